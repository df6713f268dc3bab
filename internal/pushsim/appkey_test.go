package pushsim_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// TestApplicationServerKey: a subscription made with an application server
// key accepts pushes signed with that key only (403 otherwise, as FCM
// answers), whatever Config.VAPIDPublicKey says; one made without a key
// keeps the simulator's rule.
func TestApplicationServerKey(t *testing.T) {
	a, b := newVAPID(t), newVAPID(t)
	tests := []struct {
		name   string
		global string // Config.VAPIDPublicKey
		bound  string // the subscription's key; "" for none
		signer vapidKeys
		want   int
	}{
		{"bound, its key", "", a.pub, a, http.StatusCreated},
		{"bound, another key", "", a.pub, b, http.StatusForbidden},
		{"unbound, any key", "", "", b, http.StatusCreated},
		{"bound beats the configured key", a.pub, b.pub, b, http.StatusCreated},
		{"bound, the configured key is not its own", a.pub, b.pub, a, http.StatusForbidden},
		{"unbound, the configured key", a.pub, "", a, http.StatusCreated},
		{"unbound, not the configured key", a.pub, "", b, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pushsim.DefaultConfig()
			cfg.VAPIDPublicKey = tt.global
			sim, c, _ := newHTTPSim(t, cfg)
			sub := sim.Subscribe()
			if tt.bound != "" {
				sub = sim.SubscribeWithKey(tt.bound)
			}
			if got := send(t, sub, []byte("m"), defaultOptions(c, tt.signer)).StatusCode; got != tt.want {
				t.Fatalf("status = %d, want %d", got, tt.want)
			}
			d := lastDelivery(t, sim)
			if tt.want == http.StatusCreated && (!d.Verified || string(d.Payload) != "m") {
				t.Errorf("accepted push not verified: %+v", d)
			}
			if tt.want == http.StatusForbidden && (d.Verified || d.Payload != nil || !strings.Contains(d.Reason, "application server key")) {
				t.Errorf("refused push: verified %v, reason %q", d.Verified, d.Reason)
			}
		})
	}
}

// TestSubscribeKeyHTTP: POST /subscribe?key= binds the subscription; a bad
// key is a 400.
func TestSubscribeKeyHTTP(t *testing.T) {
	sim, c, ts := newHTTPSim(t, pushsim.DefaultConfig())
	a, b := newVAPID(t), newVAPID(t)
	post := func(query string) *http.Response {
		t.Helper()
		resp, err := c.Post(ts.URL+"/subscribe?"+query, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	resp := post("script=503,201&key=" + url.QueryEscape(a.pub))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /subscribe?key= status = %d, want 201", resp.StatusCode)
	}
	var js struct {
		ID       string `json:"id"`
		Endpoint string `json:"endpoint"`
		Keys     struct {
			P256dh string `json:"p256dh"`
			Auth   string `json:"auth"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		t.Fatal(err)
	}
	sub := pushsim.Subscription{ID: js.ID, Endpoint: js.Endpoint, P256dh: js.Keys.P256dh, Auth: js.Keys.Auth}
	for i, w := range []struct {
		k    vapidKeys
		want int
	}{{b, 403}, {a, 503}, {a, 201}} {
		if got := send(t, sub, []byte("m"), defaultOptions(c, w.k)).StatusCode; got != w.want {
			t.Errorf("push %d: status %d, want %d (a refused key does not spend the script)", i, got, w.want)
		}
	}
	if got := post("key=not-a-key").StatusCode; got != http.StatusBadRequest {
		t.Errorf("POST /subscribe?key=not-a-key status = %d, want 400", got)
	}
	if n := len(sim.Deliveries()); n != 3 {
		t.Errorf("%d deliveries recorded, want 3", n)
	}
}

func TestSubscribeWithKeyPanicsOnBadKey(t *testing.T) {
	sim, _, _ := newHTTPSim(t, pushsim.DefaultConfig())
	defer func() {
		if recover() == nil {
			t.Error("SubscribeWithKey accepted a key that is no P-256 point")
		}
	}()
	sim.SubscribeWithKey("AAAA")
}
