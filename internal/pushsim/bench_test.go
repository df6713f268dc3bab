package pushsim_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// BenchmarkPush measures the simulator's own cost per push request, in process.
func BenchmarkPush(b *testing.B) {
	for _, every := range []int{1, 100} {
		b.Run("verify-every="+strconv.Itoa(every), func(b *testing.B) {
			cfg := pushsim.DefaultConfig()
			cfg.VerifyEvery = every
			cfg.KeepDeliveries = 1024
			sim, err := pushsim.New(cfg, nil)
			if err != nil {
				b.Fatalf("new simulator: %v", err)
			}
			sim.SetBaseURL("http://push.test")
			sub := sim.Subscribe()
			var req *http.Request
			var body []byte
			send(b, sub, bytes.Repeat([]byte("x"), 512), defaultOptions(capture(b, &req, &body), newVAPID(b)))
			h := sim.Handler()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := httptest.NewRequest(http.MethodPost, sub.Endpoint, bytes.NewReader(body))
					r.Header = req.Header.Clone()
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					if w.Code != http.StatusCreated {
						b.Fatalf("status = %d, want 201", w.Code)
					}
				}
			})
		})
	}
}
