package pacing

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/push"
)

// The replay: recorded answers in, decisions out. Each trace in
// testdata/replay is the answers a service model gave one processor, in
// the order they came (status, latency, wait inside the service,
// Retry-After); replayed, the pacer gets the same answers to its sends
// whatever it decides, and what it decides (every cut, halt and change of
// its concurrency, and what it sent each second) must be what the golden
// file says. A change to the laws shows here first, rule by rule, in
// milliseconds: `go test -run TestReplay -replay.update` rewrites the
// golden files (read the diff), `-replay.record` the traces from the
// models.

var (
	replayUpdate = flag.Bool("replay.update", false, "rewrite testdata/replay/*.golden from what the pacer decides now")
	replayRecord = flag.Bool("replay.record", false, "record testdata/replay/*.trace from the service models")
)

// replays are the recorded cases: a token bucket, a limit that halves, a
// worker pool that queues, devices throttled one by one.
var replays = []struct {
	name    string
	svc     service
	window  int
	seconds int
}{
	{"bucket-500-50ms", service{limit: 500, latency: 50 * ms}, 64, 15},
	{"bucket-100-5ms", service{limit: 100, latency: 5 * ms}, 16, 15},
	{"workers-64-300ms", service{workers: 64, latency: 300 * ms}, 256, 15},
	{"devices-5pct-50ms", service{latency: 50 * ms, device429: 0.05}, 32, 15},
}

type answer struct {
	status            int
	latency, wait, ra time.Duration
}

type tape struct {
	replay  bool
	answers []answer
	at      int
}

func (t *tape) add(r push.Result, latency, wait time.Duration) {
	t.answers = append(t.answers, answer{r.Status, latency, wait, r.RetryAfter})
}

// next is the next recorded answer; past the end, the service answers
// nothing more (a timeout).
func (t *tape) next() (push.Result, time.Duration, time.Duration) {
	if t.at >= len(t.answers) {
		return push.Result{Class: push.Retryable, Err: "timeout"}, sendTimeout, 0
	}
	a := t.answers[t.at]
	t.at++
	r := push.Result{Class: push.Delivered, Status: a.status}
	if a.status == 429 {
		r = push.Result{Class: push.Retryable, Status: 429, RetryAfter: a.ra}
	}
	return r, a.latency, a.wait
}

func TestReplay(t *testing.T) {
	for _, c := range replays {
		t.Run(c.name, func(t *testing.T) {
			trace := filepath.Join("testdata", "replay", c.name+".trace")
			if *replayRecord {
				svc := c.svc
				svc.tape = &tape{}
				s := newSim(1, &svc, c.seconds)
				s.join(0, c.window, 100_000)
				s.run()
				writeTrace(t, trace, svc.tape.answers)
			}
			svc := service{tape: &tape{replay: true, answers: readTrace(t, trace)}}
			s := newSim(1, &svc, c.seconds)
			s.join(0, c.window, 100_000)
			s.run()
			var got strings.Builder
			for i, sec := range s.secs[:c.seconds] {
				fmt.Fprintf(&got, "second %2d: sent %5d, accepted %5d, 429s %4d, E %7.1f\n", i, sec.sent, sec.ok, sec.throttled, sec.estimate)
			}
			for _, l := range s.log {
				got.WriteString(l + "\n")
			}
			golden := filepath.Join("testdata", "replay", c.name+".golden")
			if *replayUpdate {
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestReplay -replay.update writes it)", err)
			}
			if got.String() != string(want) {
				t.Errorf("the pacer decides otherwise than %s on the same answers (-replay.update rewrites it):\n%s", golden, lineDiff(string(want), got.String()))
			}
		})
	}
}

func writeTrace(t *testing.T, path string, as []answer) {
	var b strings.Builder
	b.WriteString("# status latency wait retry-after, one answer per line, in the order they came\n")
	for _, a := range as {
		fmt.Fprintf(&b, "%d %s %s %s\n", a.status, a.latency, a.wait, a.ra)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTrace(t *testing.T, path string) []answer {
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestReplay -replay.record writes it)", err)
	}
	defer f.Close()
	var as []answer
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		var a answer
		var lat, wait, ra string
		if _, err := fmt.Sscan(line, &a.status, &lat, &wait, &ra); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		for _, d := range []struct {
			s string
			p *time.Duration
		}{{lat, &a.latency}, {wait, &a.wait}, {ra, &a.ra}} {
			if *d.p, err = time.ParseDuration(d.s); err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
		}
		as = append(as, a)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return as
}

// lineDiff shows the first lines where want and got part.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, a, b)
		}
	}
	return "(same lines)"
}
