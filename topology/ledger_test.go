package topology

import (
	"encoding/json"
	"testing"
)

// AppendJSON writes what encoding/json writes, for any id.
func TestOutcomeAppendJSON(t *testing.T) {
	ids := []string{"evt-01", "", `quote"and\backslash`, "<script>&", "tab\tnew\nline", "é✓ unicode", "bad \xff utf-8", "\u2028\u2029", "x\x00y"}
	for _, id := range ids {
		for _, tier := range []string{"", "tier1"} {
			for _, app := range []string{"", "shop-2027", id} {
				o := OutcomeRecord{ID: id, Outcome: "delivered", Reason: "delivered", Status: 201, Attempts: 2, Tier: tier, App: app,
					EndpointHash: "3f9a0c1d2e3f4a5b", LatencyMS: -5, FirstSeen: 1_800_000_000_000, At: 1_800_000_000_123}
				want, _ := json.Marshal(o)
				if got := o.AppendJSON(nil); string(got) != string(want) {
					t.Errorf("id %q tier %q app %q:\n got %s\nwant %s", id, tier, app, got, want)
				}
			}
		}
	}
}

func FuzzOutcomeAppendJSON(f *testing.F) {
	f.Add("evt-01", "tier1", int64(5))
	f.Add("<\xff>", "", int64(-1))
	f.Fuzz(func(t *testing.T, id, tier string, n int64) {
		// The app takes the id's bytes too: whatever an app holds.
		for _, app := range []string{"", id} {
			o := OutcomeRecord{ID: id, Outcome: "dead", Reason: "max_attempts", Tier: tier, App: app, LatencyMS: n, At: n}
			want, _ := json.Marshal(o)
			if got := o.AppendJSON(nil); string(got) != string(want) {
				t.Fatalf("got %s, want %s", got, want)
			}
		}
	})
}
