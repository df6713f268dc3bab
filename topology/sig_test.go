package topology

import (
	"bytes"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	keyA = bytes.Repeat([]byte{'a'}, 32)
	keyB = bytes.Repeat([]byte{'b'}, 64)
	keyC = bytes.Repeat([]byte{'c'}, 32)
)

func newSigner(t testing.TB, keys ...[]byte) *Signer {
	t.Helper()
	s, err := NewSigner(keys...)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	return s
}

// signedRecord builds a retry record the way the processor does: routing
// headers, then push-sig, then the trace context.
func signedRecord(t testing.TB, s *Signer, topic string, expires time.Time) *kgo.Record {
	t.Helper()
	m := Meta{
		Attempt: 1, Due: t0.Add(2 * time.Second), FirstSeen: t0,
		Origin: "push.tier1/0/17", Status: 503,
	}
	hs := m.Headers(nil)
	sig := s.Sign(topic, hs, []byte(`{"id":"evt-01"}`), expires)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderSig, Value: []byte(sig)},
		kgo.RecordHeader{Key: HeaderTraceparent, Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	)
	return &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte(`{"id":"evt-01"}`), Headers: hs}
}

func cloneRecord(r *kgo.Record) *kgo.Record {
	c := *r
	c.Value = bytes.Clone(r.Value)
	c.Headers = make([]kgo.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		c.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)}
	}
	return &c
}

func setHeader(r *kgo.Record, key, value string) {
	for i := range r.Headers {
		if r.Headers[i].Key == key {
			r.Headers[i].Value = []byte(value)
			return
		}
	}
	panic("no header " + key)
}

func sigOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderSig {
			return string(h.Value)
		}
	}
	return ""
}

func TestSignerVerify(t *testing.T) {
	const topic = "push.tier1.retry-2s"
	now := t0
	expires := now.Add(time.Hour)
	signer := newSigner(t, keyA)

	tests := []struct {
		name    string
		signer  *Signer // verifies; nil = signer
		edit    func(r *kgo.Record)
		now     time.Time // zero = now
		wantErr bool
	}{
		{name: "round trip"},
		{name: "just before expiry", now: expires},
		{name: "a non-routing header added", edit: func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "tracestate", Value: []byte("x=1")})
		}},
		{name: "key changed", edit: func(r *kgo.Record) { r.Key = []byte("other") }},
		{name: "trace context changed", edit: func(r *kgo.Record) { setHeader(r, HeaderTraceparent, "00-x-y-00") }},
		{name: "push-sig moved after the trace context", edit: func(r *kgo.Record) {
			i := slices.IndexFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == HeaderSig })
			h := r.Headers[i]
			r.Headers = append(slices.Delete(r.Headers, i, i+1), h)
		}},

		{name: "value tampered", edit: func(r *kgo.Record) { r.Value[len(r.Value)-2] ^= 1 }, wantErr: true},
		{name: "value emptied", edit: func(r *kgo.Record) { r.Value = nil }, wantErr: true},
		{name: "attempt tampered", edit: func(r *kgo.Record) { setHeader(r, HeaderAttempt, "0") }, wantErr: true},
		{name: "due tampered", edit: func(r *kgo.Record) { setHeader(r, HeaderDue, "0") }, wantErr: true},
		{name: "status tampered", edit: func(r *kgo.Record) { setHeader(r, HeaderStatus, "429") }, wantErr: true},
		{name: "origin tampered", edit: func(r *kgo.Record) { setHeader(r, HeaderOrigin, "push.tier1/0/18") }, wantErr: true},
		{name: "routing header added", edit: func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderNotBefore, Value: []byte("1")})
		}, wantErr: true},
		{name: "unknown push header added", edit: func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "push-extra", Value: nil})
		}, wantErr: true},
		{name: "routing header removed", edit: func(r *kgo.Record) {
			r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == HeaderStatus })
		}, wantErr: true},
		{name: "routing headers reordered", edit: func(r *kgo.Record) {
			r.Headers[0], r.Headers[1] = r.Headers[1], r.Headers[0]
		}, wantErr: true},
		{name: "header value moved into key", edit: func(r *kgo.Record) {
			r.Headers[0] = kgo.RecordHeader{Key: r.Headers[0].Key + string(r.Headers[0].Value)}
		}, wantErr: true},
		{name: "moved to another retry topic", edit: func(r *kgo.Record) { r.Topic = "push.tier1.retry-60s" }, wantErr: true},
		{name: "moved to another tier", edit: func(r *kgo.Record) { r.Topic = "push.tier3.retry-8s" }, wantErr: true},
		{name: "expired", now: expires.Add(time.Second), wantErr: true},
		{name: "expiry extended", edit: func(r *kgo.Record) {
			exp := strings.Split(sigOf(r), ".")
			exp[1] = "9999999999"
			setHeader(r, HeaderSig, strings.Join(exp, "."))
		}, wantErr: true},
		{name: "missing", edit: func(r *kgo.Record) {
			r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == HeaderSig })
		}, wantErr: true},
		{name: "no headers at all", edit: func(r *kgo.Record) { r.Headers = nil }, wantErr: true},
		{name: "empty", edit: func(r *kgo.Record) { setHeader(r, HeaderSig, "") }, wantErr: true},
		{name: "wrong version", edit: func(r *kgo.Record) { setHeader(r, HeaderSig, "v2"+sigOf(r)[2:]) }, wantErr: true},
		{name: "no mac", edit: func(r *kgo.Record) {
			s := sigOf(r)
			setHeader(r, HeaderSig, s[:strings.LastIndexByte(s, '.')])
		}, wantErr: true},
		{name: "expiry not a number", edit: func(r *kgo.Record) {
			exp := strings.Split(sigOf(r), ".")
			exp[1] = "soon"
			setHeader(r, HeaderSig, strings.Join(exp, "."))
		}, wantErr: true},
		{name: "mac not base64url", edit: func(r *kgo.Record) { setHeader(r, HeaderSig, sigOf(r)[:len(sigOf(r))-1]+"*") }, wantErr: true},
		{name: "mac padded", edit: func(r *kgo.Record) { setHeader(r, HeaderSig, sigOf(r)+"=") }, wantErr: true},
		{name: "mac truncated", edit: func(r *kgo.Record) { setHeader(r, HeaderSig, sigOf(r)[:len(sigOf(r))-4]) }, wantErr: true},
		{name: "mac of zeros", edit: func(r *kgo.Record) {
			exp := strings.Split(sigOf(r), ".")
			exp[2] = base64.RawURLEncoding.EncodeToString(make([]byte, 32))
			setHeader(r, HeaderSig, strings.Join(exp, "."))
		}, wantErr: true},
		{name: "duplicated", edit: func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderSig, Value: []byte(sigOf(r))})
		}, wantErr: true},
		{name: "duplicated, bad one first", edit: func(r *kgo.Record) {
			r.Headers = append([]kgo.RecordHeader{{Key: HeaderSig, Value: []byte("v1.0.AAAA")}}, r.Headers...)
		}, wantErr: true},
		{name: "verified by another key", signer: newSigner(t, keyC), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := signedRecord(t, signer, topic, expires)
			if tt.edit != nil {
				tt.edit(r)
			}
			v := tt.signer
			if v == nil {
				v = signer
			}
			at := tt.now
			if at.IsZero() {
				at = now
			}
			err := v.Verify(r, at)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Verify() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("Verify() = %v, want an error wrapping ErrBadSignature", err)
			}
		})
	}
}

func TestSignerRotation(t *testing.T) {
	const topic = "push.tier2.retry-8s"
	now := t0
	exp := now.Add(time.Hour)
	old := newSigner(t, keyA)
	rotated := newSigner(t, keyB, keyA) // new key first, old still verifies
	retired := newSigner(t, keyB)       // old key dropped
	stranger := newSigner(t, keyC)

	tests := []struct {
		name     string
		signedBy *Signer
		verifier *Signer
		wantErr  bool
	}{
		{"old record, rotated verifier", old, rotated, false},
		{"new record, rotated verifier", rotated, rotated, false},
		{"new record, new-key verifier", rotated, retired, false},
		{"old record, old key dropped", old, retired, true},
		{"new record, old-only verifier", rotated, old, true},
		{"unknown key", stranger, rotated, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := signedRecord(t, tt.signedBy, topic, exp)
			err := tt.verifier.Verify(r, now)
			if tt.wantErr {
				if !errors.Is(err, ErrBadSignature) {
					t.Fatalf("Verify() = %v, want an error wrapping ErrBadSignature", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify() = %v, want nil", err)
			}
		})
	}
}

func TestSignerSignDeterministic(t *testing.T) {
	s := newSigner(t, keyA)
	r := signedRecord(t, s, "push.tier1.retry-2s", t0.Add(time.Hour))
	again := signedRecord(t, s, "push.tier1.retry-2s", t0.Add(time.Hour))
	if got, want := sigOf(again), sigOf(r); got != want {
		t.Errorf("Sign is not deterministic: %q then %q", want, got)
	}
	if got := sigOf(r); !strings.HasPrefix(got, "v1.") || len(got) > maxHeaderValue {
		t.Errorf("Sign() = %q, want a v1 value that fits a header", got)
	}
	moved := signedRecord(t, s, "push.tier1.retry-8s", t0.Add(time.Hour))
	if sigOf(moved) == sigOf(r) {
		t.Error("Sign gives the same signature for two topics")
	}
}

func TestSignerVerifyDoesNotModify(t *testing.T) {
	s := newSigner(t, keyA)
	r := signedRecord(t, s, "push.tier1.retry-2s", t0.Add(time.Hour))
	before := cloneRecord(r)
	if err := s.Verify(r, t0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Value, before.Value) || len(r.Headers) != len(before.Headers) {
		t.Fatal("Verify modified the record")
	}
	for i := range r.Headers {
		if r.Headers[i].Key != before.Headers[i].Key || !bytes.Equal(r.Headers[i].Value, before.Headers[i].Value) {
			t.Fatalf("Verify modified header %d", i)
		}
	}
}

func TestNewSigner(t *testing.T) {
	tests := []struct {
		name    string
		keys    [][]byte
		wantErr bool
	}{
		{"one 32-byte key", [][]byte{keyA}, false},
		{"one 64-byte key", [][]byte{keyB}, false},
		{"rotation", [][]byte{keyB, keyA}, false},
		{"no key", nil, true},
		{"empty key", [][]byte{{}}, true},
		{"31-byte key", [][]byte{keyA[:31]}, true},
		{"short old key", [][]byte{keyA, keyB[:16]}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSigner(tt.keys...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewSigner() error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				if s != nil {
					t.Error("NewSigner returned a signer with its error")
				}
				for _, k := range tt.keys {
					if len(k) > 0 && strings.Contains(err.Error(), string(k)) {
						t.Error("NewSigner error holds the key")
					}
				}
			}
		})
	}
}
