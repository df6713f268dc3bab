package event

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/netguard"
)

// Key material of testdata/event.json.
const (
	p256dhURL = "BKvkXHsHgM_FGUP6NTmAmdMl39YWEJKNSfUWv_A5EsSotPSFbQdEDkuAOpAQOz5xE57cUS_H_zrZgX22c-I9ARI"
	p256dhStd = "BKvkXHsHgM/FGUP6NTmAmdMl39YWEJKNSfUWv/A5EsSotPSFbQdEDkuAOpAQOz5xE57cUS/H/zrZgX22c+I9ARI="
	authURL   = "Melh22Ku_vPce1JQoYiG_g"
	authStd   = "Melh22Ku/vPce1JQoYiG/g=="
	endpoint  = "https://fcm.googleapis.com/fcm/send/dXNlcjEyMzQ:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx"
)

var recordTime = time.Date(2026, 11, 21, 12, 30, 0, 0, time.UTC)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mutate decodes the fixture into a generic map, applies edit and encodes it
// again.
func mutate(t testing.TB, edit func(ev, sub, keys map[string]any)) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(readFixture(t, "event.json"), &ev); err != nil {
		t.Fatal(err)
	}
	sub := ev["subscription"].(map[string]any)
	keys := sub["keys"].(map[string]any)
	edit(ev, sub, keys)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeFixture(t *testing.T) {
	got, err := Decode(readFixture(t, "event.json"), recordTime, DefaultRules())
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	wantP256dh, _ := base64.RawURLEncoding.DecodeString(p256dhURL)
	wantAuth, _ := base64.RawURLEncoding.DecodeString(authURL)
	checks := []struct {
		name      string
		got, want any
	}{
		{"ID", got.ID, "evt-01"},
		{"Endpoint", got.Endpoint, endpoint},
		{"EndpointURL.Host", got.EndpointURL.Host, "fcm.googleapis.com"},
		{"Origin", got.Origin(), "https://fcm.googleapis.com"},
		{"P256dh", string(got.P256dh), string(wantP256dh)},
		{"Auth", string(got.Auth), string(wantAuth)},
		{"Payload", string(got.Payload), `{"title":"Your code","body":"Use 482913 to sign in. It expires in 10 minutes.","url":"https://example.com/login"}`},
		{"TTL", got.TTL, time.Hour},
		{"Urgency", got.Urgency, UrgencyHigh},
		{"Topic", got.Topic, "order-42"},
		{"CreatedAt", got.CreatedAt, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)},
		{"EndpointHash", got.EndpointHash(), EndpointHash(endpoint)},
		{"len(EndpointHash)", len(got.EndpointHash()), 16},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestDecodeValid(t *testing.T) {
	set := func(k string, v any) func(ev, sub, keys map[string]any) {
		return func(ev, sub, keys map[string]any) { ev[k] = v }
	}
	wantApp := func(want string) func(t *testing.T, e *Event) {
		return func(t *testing.T, e *Event) {
			if e.App != want {
				t.Errorf("App = %q, want %q", e.App, want)
			}
		}
	}
	minimal := func(ev, sub, keys map[string]any) {
		for _, k := range []string{"payload", "ttl", "urgency", "topic", "created_at", "trace"} {
			delete(ev, k)
		}
	}
	payload := func(n int) string { return strings.Repeat("x", n) }
	bin := []byte{0, 0xff, 0xfe, 0x80, 0x7f, '"', '\\'}
	tests := []struct {
		name  string
		value []byte
		rules func(*Rules)
		check func(t *testing.T, e *Event)
	}{
		{"minimal takes defaults", mutate(t, minimal), nil, func(t *testing.T, e *Event) {
			if got, want := e.TTL, 24*time.Hour; got != want {
				t.Errorf("TTL = %v, want %v", got, want)
			}
			if got, want := e.CreatedAt, recordTime; !got.Equal(want) {
				t.Errorf("CreatedAt = %v, want %v", got, want)
			}
			if e.Payload != nil || e.Urgency != "" || e.Topic != "" {
				t.Errorf("Payload %q Urgency %q Topic %q, want all empty", e.Payload, e.Urgency, e.Topic)
			}
		}},
		{"rules default TTL", mutate(t, minimal), func(r *Rules) { r.DefaultTTL = time.Minute }, func(t *testing.T, e *Event) {
			if got, want := e.TTL, time.Minute; got != want {
				t.Errorf("TTL = %v, want %v", got, want)
			}
		}},
		{"std base64 padded keys", mutate(t, func(ev, sub, keys map[string]any) {
			keys["p256dh"], keys["auth"] = p256dhStd, authStd
		}), nil, func(t *testing.T, e *Event) {
			want, _ := base64.StdEncoding.DecodeString(p256dhStd)
			if !bytes.Equal(e.P256dh, want) {
				t.Errorf("P256dh = %x, want %x", e.P256dh, want)
			}
		}},
		{"url base64 padded keys", mutate(t, func(ev, sub, keys map[string]any) {
			keys["p256dh"], keys["auth"] = p256dhURL+"=", authURL+"=="
		}), nil, func(t *testing.T, e *Event) {
			want, _ := base64.StdEncoding.DecodeString(authStd)
			if !bytes.Equal(e.Auth, want) {
				t.Errorf("Auth = %x, want %x", e.Auth, want)
			}
		}},
		{"binary payload std base64", mutate(t, func(ev, sub, keys map[string]any) {
			delete(ev, "payload")
			ev["payload_b64"] = base64.StdEncoding.EncodeToString(bin)
		}), nil, func(t *testing.T, e *Event) {
			if !bytes.Equal(e.Payload, bin) {
				t.Errorf("Payload = %x, want %x", e.Payload, bin)
			}
		}},
		{"binary payload url base64 unpadded", mutate(t, func(ev, sub, keys map[string]any) {
			delete(ev, "payload")
			ev["payload_b64"] = base64.RawURLEncoding.EncodeToString(bin)
		}), nil, func(t *testing.T, e *Event) {
			if !bytes.Equal(e.Payload, bin) {
				t.Errorf("Payload = %x, want %x", e.Payload, bin)
			}
		}},
		{"payload with escapes", mutate(t, func(ev, sub, keys map[string]any) {
			ev["payload"] = "é\n\t\"☃\"𝄞"
		}), nil, func(t *testing.T, e *Event) {
			if got, want := string(e.Payload), "é\n\t\"☃\"𝄞"; got != want {
				t.Errorf("Payload = %q, want %q", got, want)
			}
		}},
		{"payload at the limit", mutate(t, func(ev, sub, keys map[string]any) {
			ev["payload"] = payload(3993)
		}), nil, func(t *testing.T, e *Event) {
			if got, want := len(e.Payload), 3993; got != want {
				t.Errorf("len(Payload) = %d, want %d", got, want)
			}
		}},
		{"binary payload at the limit", mutate(t, func(ev, sub, keys map[string]any) {
			delete(ev, "payload")
			ev["payload_b64"] = base64.StdEncoding.EncodeToString(make([]byte, 3993))
		}), nil, func(t *testing.T, e *Event) {
			if got, want := len(e.Payload), 3993; got != want {
				t.Errorf("len(Payload) = %d, want %d", got, want)
			}
		}},
		{"empty payload is an empty push", mutate(t, func(ev, sub, keys map[string]any) {
			ev["payload"] = ""
		}), nil, func(t *testing.T, e *Event) {
			if e.Payload != nil {
				t.Errorf("Payload = %q, want nil", e.Payload)
			}
		}},
		{"null payload and payload_b64", mutate(t, func(ev, sub, keys map[string]any) {
			ev["payload"], ev["payload_b64"] = nil, nil
		}), nil, func(t *testing.T, e *Event) {
			if e.Payload != nil {
				t.Errorf("Payload = %q, want nil", e.Payload)
			}
		}},
		{"ttl zero", mutate(t, func(ev, sub, keys map[string]any) { ev["ttl"] = 0 }), nil, func(t *testing.T, e *Event) {
			if e.TTL != 0 {
				t.Errorf("TTL = %v, want 0", e.TTL)
			}
		}},
		{"ttl max", mutate(t, func(ev, sub, keys map[string]any) { ev["ttl"] = 28 * 24 * 3600 }), nil, func(t *testing.T, e *Event) {
			if got, want := e.TTL, 28*24*time.Hour; got != want {
				t.Errorf("TTL = %v, want %v", got, want)
			}
		}},
		{"ttl null takes default", mutate(t, func(ev, sub, keys map[string]any) { ev["ttl"] = nil }), nil, func(t *testing.T, e *Event) {
			if got, want := e.TTL, 24*time.Hour; got != want {
				t.Errorf("TTL = %v, want %v", got, want)
			}
		}},
		{"urgency very-low", mutate(t, func(ev, sub, keys map[string]any) { ev["urgency"] = "very-low" }), nil, func(t *testing.T, e *Event) {
			if got, want := e.Urgency, UrgencyVeryLow; got != want {
				t.Errorf("Urgency = %q, want %q", got, want)
			}
		}},
		{"topic 32 chars", mutate(t, func(ev, sub, keys map[string]any) { ev["topic"] = strings.Repeat("a_-Z", 8) }), nil, func(t *testing.T, e *Event) {
			if got, want := len(e.Topic), 32; got != want {
				t.Errorf("len(Topic) = %d, want %d", got, want)
			}
		}},
		{"created_at with offset", mutate(t, func(ev, sub, keys map[string]any) { ev["created_at"] = "2026-11-21T13:00:00.5+01:00" }), nil, func(t *testing.T, e *Event) {
			if got, want := e.CreatedAt, time.Date(2026, 11, 21, 12, 0, 0, 5e8, time.UTC); !got.Equal(want) {
				t.Errorf("CreatedAt = %v, want %v", got, want)
			}
		}},
		{"created_at in the future is clamped to the record's time", mutate(t, func(ev, sub, keys map[string]any) { ev["ttl"] = 60; ev["created_at"] = "2027-11-21T12:30:00Z" }), nil, func(t *testing.T, e *Event) {
			if got, want := e.CreatedAt, recordTime; !got.Equal(want) {
				t.Errorf("CreatedAt = %v, want the record's time %v", got, want)
			}
		}},
		{"id max length and unicode", mutate(t, func(ev, sub, keys map[string]any) { ev["id"] = strings.Repeat("é", 128) }), nil, func(t *testing.T, e *Event) {
			if got, want := len(e.ID), 256; got != want {
				t.Errorf("len(ID) = %d, want %d", got, want)
			}
		}},
		{"unknown fields ignored", mutate(t, func(ev, sub, keys map[string]any) {
			ev["extra"] = []any{1, "two", map[string]any{"three": []any{3}}}
			sub["expirationTime"] = nil
			keys["extra"] = true
		}), nil, nil},
		{"origin keeps explicit port, drops default", mutate(t, func(ev, sub, keys map[string]any) {
			sub["endpoint"] = "https://Push.Example.COM:443/x"
		}), nil, func(t *testing.T, e *Event) {
			if got, want := e.Origin(), "https://push.example.com"; got != want {
				t.Errorf("Origin = %q, want %q", got, want)
			}
		}},
		{"origin with port", mutate(t, func(ev, sub, keys map[string]any) {
			sub["endpoint"] = "http://127.0.0.1:8080/push/1"
		}), nil, func(t *testing.T, e *Event) {
			if got, want := e.Origin(), "http://127.0.0.1:8080"; got != want {
				t.Errorf("Origin = %q, want %q", got, want)
			}
		}},
		{"origin IPv6", mutate(t, func(ev, sub, keys map[string]any) {
			sub["endpoint"] = "https://[2001:DB8::1]:8443"
		}), nil, func(t *testing.T, e *Event) {
			if got, want := e.Origin(), "https://[2001:db8::1]:8443"; got != want {
				t.Errorf("Origin = %q, want %q", got, want)
			}
		}},
		{"app", mutate(t, set("app", "shop-2027.eu_1")), nil, wantApp("shop-2027.eu_1")},
		{"app absent is the default identity", mutate(t, minimal), nil, wantApp("")},
		{"app null is the default identity", mutate(t, set("app", nil)), nil, wantApp("")},
		{"app default is the default identity", mutate(t, set("app", DefaultApp)), nil, wantApp("")},
		{"app of 64 bytes", mutate(t, set("app", strings.Repeat("a", 64))), nil, wantApp(strings.Repeat("a", 64))},
		{"app escaped", []byte(strings.Replace(string(readFixture(t, "event.json")), `{`, `{"app":"sh\u006fp",`, 1)), nil, wantApp("shop")},
		{"guard allows a push service", mutate(t, func(ev, sub, keys map[string]any) {
			sub["endpoint"] = "https://web.push.apple.com/QGuQyavXutnMH1bTx3Q6"
		}), func(r *Rules) { r.Guard = mustGuard(t) }, func(t *testing.T, e *Event) {
			if got, want := e.Origin(), "https://web.push.apple.com"; got != want {
				t.Errorf("Origin = %q, want %q", got, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := DefaultRules()
			if tt.rules != nil {
				tt.rules(&rules)
			}
			got, err := Decode(tt.value, recordTime, rules)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(got.P256dh) != P256dhLen || len(got.Auth) != AuthLen {
				t.Errorf("key lengths %d, %d", len(got.P256dh), len(got.Auth))
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func mustGuard(t testing.TB) *netguard.Policy {
	t.Helper()
	p, err := netguard.New(netguard.AllowHosts(netguard.DefaultPushHosts()...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecodeInvalid(t *testing.T) {
	// A 65-byte string that is not an uncompressed point, and one that is
	// uncompressed but off the curve (last byte flipped).
	compressed := base64.RawURLEncoding.EncodeToString(append([]byte{3}, make([]byte, 64)...))
	offCurve := "BKvkXHsHgM_FGUP6NTmAmdMl39YWEJKNSfUWv_A5EsSotPSFbQdEDkuAOpAQOz5xE57cUS_H_zrZgX22c-I9ARM"
	set := func(k string, v any) func(ev, sub, keys map[string]any) {
		return func(ev, sub, keys map[string]any) { ev[k] = v }
	}
	setSub := func(k string, v any) func(ev, sub, keys map[string]any) {
		return func(ev, sub, keys map[string]any) { sub[k] = v }
	}
	setKey := func(k string, v any) func(ev, sub, keys map[string]any) {
		return func(ev, sub, keys map[string]any) { keys[k] = v }
	}
	del := func(k string) func(ev, sub, keys map[string]any) {
		return func(ev, sub, keys map[string]any) { delete(ev, k) }
	}
	deep := `{"id":"x","a":` + strings.Repeat("[", 16) + strings.Repeat("]", 16) + `}`
	tests := []struct {
		name   string
		value  []byte
		guard  bool
		reason Reason
		field  string
		msg    string // substring of Error(), if set
	}{
		{"empty", nil, false, ReasonInvalid, "", "empty"},
		{"whitespace", []byte("  \n"), false, ReasonInvalid, "", "malformed JSON"},
		{"not JSON", []byte("hello"), false, ReasonInvalid, "", "malformed JSON"},
		{"truncated", readFixture(t, "event.json")[:100], false, ReasonInvalid, "", "malformed JSON"},
		{"array", []byte(`[{"id":"x"}]`), false, ReasonInvalid, "", "JSON object"},
		{"string", []byte(`"evt"`), false, ReasonInvalid, "", "JSON object"},
		{"null", []byte(`null`), false, ReasonInvalid, "id", "missing"},
		{"trailing data", append(readFixture(t, "event.json"), "{}"...), false, ReasonInvalid, "", "malformed JSON"},
		{"invalid UTF-8", []byte("{\"id\":\"\xff\"}"), false, ReasonInvalid, "", "UTF-8"},
		{"too deep", []byte(deep), false, ReasonInvalid, "", "deeper than 16"},
		{"too big", mutate(t, set("padding", strings.Repeat("x", 64<<10))), false, ReasonInvalid, "", "limit 65536"},
		{"id missing", mutate(t, del("id")), false, ReasonInvalid, "id", "missing"},
		{"id null", mutate(t, set("id", nil)), false, ReasonInvalid, "id", "missing"},
		{"id empty", mutate(t, set("id", "")), false, ReasonInvalid, "id", "empty"},
		{"id number", mutate(t, set("id", 42)), false, ReasonInvalid, "id", "JSON string"},
		{"id too long", mutate(t, set("id", strings.Repeat("a", 257))), false, ReasonInvalid, "id", "257 bytes"},
		{"id control char", mutate(t, set("id", "a\nb")), false, ReasonInvalid, "id", "non-printable"},
		{"id NUL", mutate(t, set("id", "a\x00b")), false, ReasonInvalid, "id", "non-printable"},
		{"subscription missing", mutate(t, del("subscription")), false, ReasonInvalid, "subscription", "missing"},
		{"subscription null", mutate(t, set("subscription", nil)), false, ReasonInvalid, "subscription", "missing"},
		{"keys missing", mutate(t, func(ev, sub, keys map[string]any) { delete(sub, "keys") }), false, ReasonInvalid, "subscription.keys", "missing"},
		{"subscription string", mutate(t, set("subscription", "x")), false, ReasonInvalid, "subscription", "JSON object"},
		{"keys array", mutate(t, setSub("keys", []any{})), false, ReasonInvalid, "subscription.keys", "JSON object"},
		{"endpoint missing", mutate(t, func(ev, sub, keys map[string]any) { delete(sub, "endpoint") }), false, ReasonInvalid, "subscription.endpoint", "missing"},
		{"endpoint empty", mutate(t, setSub("endpoint", "")), false, ReasonInvalid, "subscription.endpoint", "empty"},
		{"endpoint number", mutate(t, setSub("endpoint", 1)), false, ReasonInvalid, "subscription.endpoint", "JSON string"},
		{"endpoint ftp", mutate(t, setSub("endpoint", "ftp://fcm.googleapis.com/x")), false, ReasonInvalid, "subscription.endpoint", "https"},
		{"endpoint relative", mutate(t, setSub("endpoint", "/fcm/send/x")), false, ReasonInvalid, "subscription.endpoint", "https"},
		{"endpoint malformed", mutate(t, setSub("endpoint", "https://fcm.googleapis.com/%zz")), false, ReasonInvalid, "subscription.endpoint", "malformed"},
		{"endpoint userinfo", mutate(t, setSub("endpoint", "https://u:p@fcm.googleapis.com/x")), false, ReasonInvalid, "subscription.endpoint", "userinfo"},
		{"endpoint loopback guarded", mutate(t, setSub("endpoint", "https://127.0.0.1/fcm/send/x")), true, ReasonEndpointBlocked, "subscription.endpoint", "not public"},
		{"endpoint metadata guarded", mutate(t, setSub("endpoint", "https://169.254.169.254/latest")), true, ReasonEndpointBlocked, "subscription.endpoint", "not public"},
		{"endpoint http guarded", mutate(t, setSub("endpoint", "http://fcm.googleapis.com/fcm/send/x")), true, ReasonEndpointBlocked, "subscription.endpoint", "scheme"},
		{"endpoint unknown host guarded", mutate(t, setSub("endpoint", "https://push.example.com/x")), true, ReasonEndpointBlocked, "subscription.endpoint", "allowed push hosts"},
		{"p256dh missing", mutate(t, func(ev, sub, keys map[string]any) { delete(keys, "p256dh") }), false, ReasonInvalid, "subscription.keys.p256dh", "missing"},
		{"p256dh empty", mutate(t, setKey("p256dh", "")), false, ReasonInvalid, "subscription.keys.p256dh", "empty"},
		{"p256dh bad char", mutate(t, setKey("p256dh", "!"+p256dhURL[1:])), false, ReasonInvalid, "subscription.keys.p256dh", "invalid base64"},
		{"p256dh mixed alphabets", mutate(t, setKey("p256dh", strings.Replace(p256dhURL, "_", "/", 1))), false, ReasonInvalid, "subscription.keys.p256dh", "invalid base64"},
		{"p256dh 64 bytes", mutate(t, setKey("p256dh", base64.RawURLEncoding.EncodeToString(make([]byte, 64)))), false, ReasonInvalid, "subscription.keys.p256dh", "64 bytes, want 65"},
		{"p256dh 66 bytes", mutate(t, setKey("p256dh", base64.RawURLEncoding.EncodeToString(make([]byte, 66)))), false, ReasonInvalid, "subscription.keys.p256dh", "66 bytes, want 65"},
		{"p256dh compressed prefix", mutate(t, setKey("p256dh", compressed)), false, ReasonInvalid, "subscription.keys.p256dh", "uncompressed"},
		{"p256dh off curve", mutate(t, setKey("p256dh", offCurve)), false, ReasonInvalid, "subscription.keys.p256dh", "not a point"},
		{"p256dh zero point", mutate(t, setKey("p256dh", base64.RawURLEncoding.EncodeToString(append([]byte{4}, make([]byte, 64)...)))), false, ReasonInvalid, "subscription.keys.p256dh", "not a point"},
		{"p256dh bad length mod 4", mutate(t, setKey("p256dh", p256dhURL+"AA")), false, ReasonInvalid, "subscription.keys.p256dh", "invalid base64"},
		{"p256dh number", mutate(t, setKey("p256dh", 4)), false, ReasonInvalid, "subscription.keys.p256dh", "JSON string"},
		{"auth 12 bytes", mutate(t, setKey("auth", base64.RawURLEncoding.EncodeToString(make([]byte, 12)))), false, ReasonInvalid, "subscription.keys.auth", "subscription.keys.auth: auth secret is 12 bytes, want 16"},
		{"auth missing", mutate(t, func(ev, sub, keys map[string]any) { delete(keys, "auth") }), false, ReasonInvalid, "subscription.keys.auth", "missing"},
		{"auth bad char", mutate(t, setKey("auth", "Melh22Ku.vPce1JQoYiG_g")), false, ReasonInvalid, "subscription.keys.auth", "invalid base64"},
		{"both payloads", mutate(t, set("payload_b64", "aGk=")), false, ReasonInvalid, "payload_b64", "not both"},
		{"both payloads one empty", mutate(t, set("payload_b64", "")), false, ReasonInvalid, "payload_b64", "not both"},
		{"payload number", mutate(t, set("payload", 1)), false, ReasonInvalid, "payload", "JSON string"},
		{"payload object", mutate(t, set("payload", map[string]any{"a": 1})), false, ReasonInvalid, "payload", "JSON string"},
		{"payload one byte too large", mutate(t, set("payload", strings.Repeat("x", 3994))), false, ReasonPayloadTooLarge, "payload", "payload: is 3994 bytes, limit 3993"},
		{"payload multibyte too large", mutate(t, set("payload", strings.Repeat("é", 1997))), false, ReasonPayloadTooLarge, "payload", "3994 bytes"},
		{"payload_b64 one byte too large", mutate(t, func(ev, sub, keys map[string]any) {
			delete(ev, "payload")
			ev["payload_b64"] = base64.StdEncoding.EncodeToString(make([]byte, 3994))
		}), false, ReasonPayloadTooLarge, "payload_b64", "3994 bytes"},
		{"payload_b64 invalid", mutate(t, func(ev, sub, keys map[string]any) {
			delete(ev, "payload")
			ev["payload_b64"] = "not base64!"
		}), false, ReasonInvalid, "payload_b64", "invalid base64"},
		{"payload_b64 non-canonical tail", mutate(t, func(ev, sub, keys map[string]any) {
			delete(ev, "payload")
			ev["payload_b64"] = "a"
		}), false, ReasonInvalid, "payload_b64", "invalid base64"},
		{"ttl negative", mutate(t, set("ttl", -1)), false, ReasonInvalid, "ttl", "negative"},
		{"ttl fraction", mutate(t, set("ttl", 1.5)), false, ReasonInvalid, "ttl", "whole seconds"},
		{"ttl exponent", mutate(t, set("ttl", json.Number("1e3"))), false, ReasonInvalid, "ttl", "whole seconds"},
		{"ttl string", mutate(t, set("ttl", "3600")), false, ReasonInvalid, "ttl", "number of seconds"},
		{"ttl bool", mutate(t, set("ttl", true)), false, ReasonInvalid, "ttl", "number of seconds"},
		{"ttl over max", mutate(t, set("ttl", 28*24*3600+1)), false, ReasonInvalid, "ttl", "exceeds 2419200"},
		{"ttl huge", mutate(t, set("ttl", json.Number("99999999999999999999999999"))), false, ReasonInvalid, "ttl", "exceeds"},
		{"urgency unknown", mutate(t, set("urgency", "urgent")), false, ReasonInvalid, "urgency", "very-low, low, normal or high"},
		{"urgency case", mutate(t, set("urgency", "HIGH")), false, ReasonInvalid, "urgency", ""},
		{"urgency number", mutate(t, set("urgency", 1)), false, ReasonInvalid, "urgency", "JSON string"},
		{"topic too long", mutate(t, set("topic", strings.Repeat("a", 33))), false, ReasonInvalid, "topic", "33 characters, limit 32"},
		{"topic space", mutate(t, set("topic", "order 42")), false, ReasonInvalid, "topic", "base64url"},
		{"topic dot", mutate(t, set("topic", "order.42")), false, ReasonInvalid, "topic", "base64url"},
		{"app empty", mutate(t, set("app", "")), false, ReasonInvalid, "app", "empty"},
		{"app too long", mutate(t, set("app", strings.Repeat("a", 65))), false, ReasonInvalid, "app", "65 bytes, limit 64"},
		{"app slash", mutate(t, set("app", "shop/eu")), false, ReasonInvalid, "app", "letters, digits"},
		{"app space", mutate(t, set("app", "shop eu")), false, ReasonInvalid, "app", "letters, digits"},
		{"app non-ASCII", mutate(t, set("app", "shöp")), false, ReasonInvalid, "app", "letters, digits"},
		{"app control character", mutate(t, set("app", "shop\n")), false, ReasonInvalid, "app", "letters, digits"},
		{"app number", mutate(t, set("app", 7)), false, ReasonInvalid, "app", "JSON string"},
		{"app object", mutate(t, set("app", map[string]any{"name": "shop"})), false, ReasonInvalid, "app", "JSON string"},
		{"created_at words", mutate(t, set("created_at", "yesterday")), false, ReasonInvalid, "created_at", "RFC 3339"},
		{"created_at space", mutate(t, set("created_at", "2026-11-21 12:00:00Z")), false, ReasonInvalid, "created_at", "RFC 3339"},
		{"created_at no zone", mutate(t, set("created_at", "2026-11-21T12:00:00")), false, ReasonInvalid, "created_at", "RFC 3339"},
		{"created_at number", mutate(t, set("created_at", 1764000000)), false, ReasonInvalid, "created_at", "JSON string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := DefaultRules()
			if tt.guard {
				rules.Guard = mustGuard(t)
			}
			ev, err := Decode(tt.value, recordTime, rules)
			if err == nil {
				t.Fatalf("Decode accepted %s: %+v", tt.value, ev)
			}
			if ev != nil {
				t.Errorf("Decode returned an event with error %v", err)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not a *Error", err, err)
			}
			if got, want := e.Reason, tt.reason; got != want {
				t.Errorf("Reason = %q, want %q (%v)", got, want, err)
			}
			if got, want := e.Field, tt.field; got != want {
				t.Errorf("Field = %q, want %q (%v)", got, want, err)
			}
			if got := err.Error(); !strings.Contains(got, tt.msg) {
				t.Errorf("Error() = %q, want it to contain %q", got, tt.msg)
			}
			if got, ok := ReasonOf(err); !ok || got != tt.reason {
				t.Errorf("ReasonOf = %q, %v", got, ok)
			}
			assertNoSecrets(t, err, tt.value)
		})
	}
}

// assertNoSecrets fails if err's text holds the endpoint, a key or a payload
// of value.
func assertNoSecrets(t *testing.T, err error, value []byte) {
	t.Helper()
	var ev struct {
		Subscription struct {
			Endpoint any `json:"endpoint"`
			Keys     struct {
				P256dh any `json:"p256dh"`
				Auth   any `json:"auth"`
			} `json:"keys"`
		} `json:"subscription"`
		Payload    any `json:"payload"`
		PayloadB64 any `json:"payload_b64"`
	}
	if json.Unmarshal(value, &ev) != nil {
		return
	}
	msg := err.Error()
	for _, v := range []any{ev.Subscription.Endpoint, ev.Subscription.Keys.P256dh, ev.Subscription.Keys.Auth, ev.Payload, ev.PayloadB64} {
		if s, ok := v.(string); ok && len(s) >= 8 && strings.Contains(msg, s) {
			t.Errorf("error %q holds a secret %q", msg, s)
		}
	}
	if s, ok := ev.Subscription.Endpoint.(string); ok {
		if i := strings.Index(s, "://"); i >= 0 {
			if j := strings.IndexByte(s[i+3:], '/'); j >= 0 && len(s[i+3+j:]) > 1 && strings.Contains(msg, s[i+3+j:]) {
				t.Errorf("error %q holds the endpoint path", msg)
			}
		}
	}
}

func TestDecodeErrorUnwrapsBlocked(t *testing.T) {
	value := mutate(t, func(ev, sub, keys map[string]any) { sub["endpoint"] = "https://10.0.0.1/x" })
	rules := DefaultRules()
	rules.Guard = mustGuard(t)
	_, err := Decode(value, recordTime, rules)
	var be *netguard.BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("error %v does not unwrap to a *netguard.BlockedError", err)
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	value := readFixture(t, "event.json")
	ev, err := Decode(value, recordTime, DefaultRules())
	if err != nil {
		t.Fatal(err)
	}
	want := string(ev.Payload) + ev.ID + ev.Endpoint + ev.Topic
	for i := range value {
		value[i] = 'X'
	}
	if got := string(ev.Payload) + ev.ID + ev.Endpoint + ev.Topic; got != want {
		t.Errorf("event changed with its input: %q", got)
	}
}

func TestRulesValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Rules)
		field string // "" means valid
	}{
		{"default", func(*Rules) {}, ""},
		{"max ttl zero", func(r *Rules) { r.MaxTTL = 0 }, "MaxTTL"},
		{"default over max", func(r *Rules) { r.DefaultTTL = r.MaxTTL + 1 }, "DefaultTTL"},
		{"negative payload", func(r *Rules) { r.MaxPayload = -1 }, "MaxPayload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := DefaultRules()
			tt.edit(&r)
			err := r.Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.field)):
				t.Errorf("Validate = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestTooDeep(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{}`, false},
		{strings.Repeat("[", 16) + strings.Repeat("]", 16), false},
		{strings.Repeat("[", 17), true},
		{`{"a":"` + strings.Repeat("[", 40) + `"}`, false},
		{`{"a":"\"` + strings.Repeat("[", 40) + `"}`, false},
		{`{"a":"\\"` + strings.Repeat("[", 40) + `}`, true},
		{`{"a":"\\\"` + strings.Repeat("[", 40) + `"}`, false},
		{`"unterminated`, false},
	}
	for _, tt := range tests {
		if got := tooDeep([]byte(tt.in), 16); got != tt.want {
			t.Errorf("tooDeep(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	text := readFixture(b, "event.json")
	binary := mutate(b, func(ev, sub, keys map[string]any) {
		delete(ev, "payload")
		ev["payload_b64"] = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, 1024))
	})
	guarded := DefaultRules()
	guarded.Guard = mustGuard(b)
	for _, bm := range []struct {
		name  string
		value []byte
		rules Rules
	}{
		{"text", text, DefaultRules()},
		{"text+guard", text, guarded},
		{"binary1KiB", binary, DefaultRules()},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bm.value)))
			for b.Loop() {
				if _, err := Decode(bm.value, recordTime, bm.rules); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEndpointHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = EndpointHash(endpoint)
	}
}
