package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The oracle parse is held to: encoding/json into wire, its errors turned
// into the *Error Decode gave when it parsed with json.Unmarshal.

func (r *rawValue) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

func parseStd(value []byte, w *wire) *Error {
	if err := json.Unmarshal(value, w); err != nil {
		return jsonError(err)
	}
	var p struct {
		Subscription seenSubscription `json:"subscription"`
	}
	json.Unmarshal(value, &p) // its errors are the first Unmarshal's
	w.Subscription.given, w.Subscription.Keys.given = p.Subscription.given, p.Subscription.keys
	return nil
}

// seenSubscription notes, as encoding/json decodes into it, whether a
// subscription object and a keys object in it were given: null and other
// types leave it as it was, as they leave a struct.
type seenSubscription struct{ given, keys bool }

func (s *seenSubscription) UnmarshalJSON(b []byte) error {
	if b[0] != '{' {
		return nil
	}
	s.given = true
	var k struct {
		Keys seenObject `json:"keys"`
	}
	json.Unmarshal(b, &k)
	s.keys = s.keys || bool(k.Keys)
	return nil
}

// seenObject notes whether an object was given for it.
type seenObject bool

func (s *seenObject) UnmarshalJSON(b []byte) error {
	if b[0] == '{' {
		*s = true
	}
	return nil
}

func jsonError(err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return invalid("", "malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te) && te.Field == "":
		return invalid("", "event must be a JSON object")
	case errors.As(err, &te):
		return invalid(te.Field, "want a JSON object")
	}
	return invalid("", "malformed JSON")
}

// decodeStd is Decode as it was with encoding/json.
func decodeStd(value []byte, recordTime time.Time, rules Rules) (*Event, *Error) {
	if e := precheck(value); e != nil {
		return nil, e
	}
	var w wire
	if e := parseStd(value, &w); e != nil {
		return nil, e
	}
	return fromWire(&w, recordTime, rules)
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // the error, or "" for none
	}{
		{"whitespace", "  \n", "malformed JSON at byte 3"},
		{"empty object", "{}", ""},
		{"null", "null", ""},
		{"number", "12", "event must be a JSON object"},
		{"array", `[{"id":"x"}]`, "event must be a JSON object"},
		{"trailing", `{} {}`, "malformed JSON at byte 4"},
		{"trailing comma", `{"a":1,}`, "malformed JSON at byte 8"},
		{"leading zero", `{"a":01}`, "malformed JSON at byte 7"},
		{"bare minus", `{"a":-}`, "malformed JSON at byte 7"},
		{"dot without digits", `{"a":1.}`, "malformed JSON at byte 8"},
		{"exponent without digits", `{"a":1e+}`, "malformed JSON at byte 9"},
		{"bad literal", `{"a":nul}`, "malformed JSON at byte 9"},
		{"cut literal", `{"a":tr`, "malformed JSON at byte 7"},
		{"bad escape", `{"a":"\x"}`, "malformed JSON at byte 8"},
		{"bad unicode escape", `{"a":"\u12g4"}`, "malformed JSON at byte 11"},
		{"control character", "{\"a\":\"\t\"}", "malformed JSON at byte 7"},
		{"unclosed array", `{"a":[1,2}`, "malformed JSON at byte 10"},
		{"mismatched bracket", `{"a":{"b":1]}`, "malformed JSON at byte 12"},
		{"missing colon", `{"a" 1}`, "malformed JSON at byte 6"},
		{"key not a string", `{a:1}`, "malformed JSON at byte 2"},
		{"cut", `{"id":"x"`, "malformed JSON at byte 9"},
		{"nested skip", `{"x":[{"a":[1,{"b":null}],"c":"}"},[],{}],"id":"y"}`, ""},
		{"subscription string", `{"subscription":"x"}`, "subscription: want a JSON object"},
		{"keys number", `{"subscription":{"keys":1}}`, "subscription.keys: want a JSON object"},
		{"first type error wins", `{"subscription":{"keys":[]},"subscription":true}`, "subscription.keys: want a JSON object"},
		{"syntax error after a type error", `{"subscription":1,"a":}`, "malformed JSON at byte 23"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w wire
			got := ""
			if e := parse([]byte(tt.in), &w); e != nil {
				got = e.Error()
			}
			if got != tt.want {
				t.Errorf("parse(%q) = %q, want %q", tt.in, got, tt.want)
			}
			var ws wire
			std := ""
			if e := parseStd([]byte(tt.in), &ws); e != nil {
				std = e.Error()
			}
			if got != std {
				t.Errorf("parse(%q) = %q, encoding/json %q", tt.in, got, std)
			}
		})
	}
}

func TestParseKeys(t *testing.T) {
	in := `{"ID":"a","id":"b","\u0073ubscription":{"ENDPOINT":"e","\u212Aeys":{"p256dh":"k","auth":"x"}},` +
		`"subscription":null,"ſubscription":{"keys":{"Auth":"y"}},"payload":"p","payload":null,"extra":{"id":"no"}}`
	var got wire
	if e := parse([]byte(in), &got); e != nil {
		t.Fatal(e)
	}
	want := wire{
		ID:           rawValue(`"b"`),
		Subscription: wireSubscription{Endpoint: rawValue(`"e"`), Keys: wireKeys{P256dh: rawValue(`"k"`), Auth: rawValue(`"y"`), given: true}, given: true},
		Payload:      rawValue(`null`),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parse = %+v, want %+v", got, want)
	}
}

// FuzzParse holds Decode to Decode over encoding/json: the same inputs
// accepted, the same error (reason, field, message) for those refused, the
// same event for those accepted.
func FuzzParse(f *testing.F) {
	f.Add(readFixture(f, "event.json"))
	seeds, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range seeds {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		_, lit, _ := strings.Cut(string(b), "[]byte(")
		s, err := strconv.Unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(lit), ")")))
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		f.Add([]byte(s))
	}
	for _, s := range []string{`{"a":[1,{"b":[true,false,null,-0.5e+3]}],"id":"\u0041"}`, `{"subscription":[]}`, `[]`, `"x"`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	rules := DefaultRules()
	f.Fuzz(func(t *testing.T, value []byte) {
		if precheck(value) == nil { // what parse may assume
			var got, want wire
			ge, we := parse(value, &got), parseStd(value, &want)
			if !sameError(ge, we) {
				t.Fatalf("parse(%q) = %v, encoding/json %v", value, ge, we)
			}
			if ge == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("parse(%q) = %+v, encoding/json %+v", value, got, want)
			}
		}
		gev, gerr := decode(value, recordTime, rules)
		wev, werr := decodeStd(value, recordTime, rules)
		if !sameError(gerr, werr) {
			t.Fatalf("decode(%q) = %v, with encoding/json %v", value, gerr, werr)
		}
		if gerr == nil && !sameEvent(gev, wev) {
			t.Fatalf("decode(%q) = %+v, with encoding/json %+v", value, gev, wev)
		}
	})
}

func sameError(a, b *Error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Reason == b.Reason && a.Field == b.Field && a.Msg == b.Msg
}

func sameEvent(a, b *Event) bool {
	return a.ID == b.ID && a.Endpoint == b.Endpoint && reflect.DeepEqual(a.EndpointURL, b.EndpointURL) &&
		bytes.Equal(a.P256dh, b.P256dh) && bytes.Equal(a.Auth, b.Auth) &&
		bytes.Equal(a.Payload, b.Payload) && (a.Payload == nil) == (b.Payload == nil) &&
		a.TTL == b.TTL && a.Urgency == b.Urgency && a.Topic == b.Topic && a.CreatedAt.Equal(b.CreatedAt) &&
		a.App == b.App && a.origin == b.origin && bytes.Equal(a.uaKey.Bytes(), b.uaKey.Bytes())
}

// String shows a raw value as its JSON text in test failures.
func (r rawValue) String() string { return string(r) }
