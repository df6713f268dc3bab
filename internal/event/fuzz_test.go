package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tierpush/tierpush/internal/netguard"
)

// FuzzDecode feeds hostile record values to Decode. The seed corpus is in
// testdata/fuzz/FuzzDecode. Decode must never panic, must refuse with a *Error
// of a known Reason whose text holds no secret, and whatever it accepts must
// meet the invariants the sender relies on.
func FuzzDecode(f *testing.F) {
	f.Add(readFixture(f, "event.json"))
	guard, err := netguard.New(netguard.AllowInsecure("127.0.0.1:8080"))
	if err != nil {
		f.Fatal(err)
	}
	guarded := DefaultRules()
	guarded.Guard = guard
	f.Fuzz(func(t *testing.T, value []byte) {
		for _, rules := range []Rules{DefaultRules(), guarded} {
			in := bytes.Clone(value)
			ev, err := Decode(in, recordTime, rules)
			if err != nil {
				if ev != nil {
					t.Fatal("event returned with an error")
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("error %T is not a *Error", err)
				}
				switch e.Reason {
				case ReasonInvalid, ReasonPayloadTooLarge, ReasonEndpointBlocked:
				default:
					t.Fatalf("unknown reason %q", e.Reason)
				}
				if e.Reason == ReasonEndpointBlocked && rules.Guard == nil {
					t.Fatal("endpoint_blocked without a guard")
				}
				assertNoSecrets(t, err, value)
				continue
			}
			checkInvariants(t, ev, value, rules)
			// The event must not alias the input.
			payload := string(ev.Payload)
			for i := range in {
				in[i] = 0
			}
			if string(ev.Payload) != payload {
				t.Fatal("payload aliases the input")
			}
		}
	})
}

func checkInvariants(t *testing.T, ev *Event, value []byte, rules Rules) {
	t.Helper()
	switch {
	case !json.Valid(value):
		t.Fatalf("accepted invalid JSON %q", value)
	case len(ev.P256dh) != P256dhLen || ev.P256dh[0] != 4:
		t.Fatalf("accepted p256dh %x", ev.P256dh)
	case len(ev.Auth) != AuthLen:
		t.Fatalf("accepted auth of %d bytes", len(ev.Auth))
	case len(ev.Payload) > rules.MaxPayload:
		t.Fatalf("accepted payload of %d bytes", len(ev.Payload))
	case ev.Payload != nil && len(ev.Payload) == 0:
		t.Fatal("empty non-nil payload")
	case ev.ID == "" || len(ev.ID) > MaxIDLen || !utf8.ValidString(ev.ID):
		t.Fatalf("accepted id %q", ev.ID)
	case ev.TTL < 0 || ev.TTL > rules.MaxTTL:
		t.Fatalf("accepted ttl %v", ev.TTL)
	case len(ev.Topic) > MaxTopicLen:
		t.Fatalf("accepted topic %q", ev.Topic)
	case ev.EndpointURL == nil || ev.EndpointURL.User != nil || ev.EndpointURL.Hostname() == "":
		t.Fatalf("accepted endpoint URL %v", ev.EndpointURL)
	case !strings.HasPrefix(ev.Origin(), ev.EndpointURL.Scheme+"://"):
		t.Fatalf("origin %q for scheme %q", ev.Origin(), ev.EndpointURL.Scheme)
	case len(ev.EndpointHash()) != 16:
		t.Fatalf("endpoint hash %q", ev.EndpointHash())
	case ev.App != "" && (CheckApp(ev.App) != nil || ev.App == DefaultApp):
		t.Fatalf("accepted app %q", ev.App)
	}
	switch ev.Urgency {
	case "", UrgencyVeryLow, UrgencyLow, UrgencyNormal, UrgencyHigh:
	default:
		t.Fatalf("accepted urgency %q", ev.Urgency)
	}
	if rules.Guard != nil {
		if _, err := rules.Guard.CheckEndpoint(ev.Endpoint); err != nil {
			t.Fatalf("accepted a blocked endpoint: %v", err)
		}
	}
}

// FuzzUnquote checks unquote against encoding/json on every valid JSON string
// that is valid UTF-8 (Decode refuses the rest before unquote sees it).
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{
		`"plain"`, `"a\"b\\c\/d"`, `"\b\f\n\r\t"`, `"\u00e9\u2603"`, `"\ud834\udd1e"`,
		`"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud800\ud800\udc00"`, `"é☃𝄞"`, `""`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		raw = bytes.TrimSpace(raw) // json.Unmarshal allows space around the value
		if len(raw) < 2 || raw[0] != '"' || !utf8.Valid(raw) || json.Unmarshal(raw, &want) != nil {
			return
		}
		body := raw[1 : len(raw)-1]
		n := unquote(nil, body)
		got := make([]byte, n)
		if m := unquote(got, body); m != n {
			t.Fatalf("unquote wrote %d bytes, counted %d", m, n)
		}
		if string(got) != want {
			t.Fatalf("unquote(%q) = %q, want %q", body, got, want)
		}
	})
}
