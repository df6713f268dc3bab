package topology

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// parseHeaderLines turns fuzz input into record headers: one "key=value" per
// line; a line without '=' is a key with an empty value.
func parseHeaderLines(data []byte) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		k, v, _ := bytes.Cut(line, []byte("="))
		hs = append(hs, kgo.RecordHeader{Key: string(k), Value: v})
	}
	return hs
}

// FuzzDecodeMeta feeds hostile record headers to DecodeMeta (anyone who can
// produce to a retry topic or the DLQ controls them). Seed corpus:
// testdata/fuzz/FuzzDecodeMeta.
func FuzzDecodeMeta(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		hs := parseHeaderLines(data)
		m, err := DecodeMeta(hs)
		if err != nil {
			if !errors.Is(err, ErrHeader) {
				t.Fatalf("DecodeMeta error %v does not wrap ErrHeader", err)
			}
			if !metaEqual(m, Meta{}) {
				t.Fatalf("DecodeMeta returned %+v with its error", m)
			}
			return
		}
		for _, n := range []int{m.Attempt, m.Status, m.RedriveCount} {
			if n < 0 || n > 1_000_000 {
				t.Fatalf("DecodeMeta accepted a count of %d", n)
			}
		}
		for _, s := range []string{m.Origin, string(m.Reason), m.Error, m.Sig} {
			if len(s) > maxHeaderValue {
				t.Fatalf("DecodeMeta accepted a %d-byte value", len(s))
			}
		}
		if m.FirstSeen.IsZero() {
			return // Headers always writes push-first-seen; see TestMetaHeadersRoundTrip
		}
		again, err := DecodeMeta(m.Headers(nil))
		if err != nil {
			t.Fatalf("DecodeMeta(Headers(%+v)) error = %v", m, err)
		}
		want := m
		want.Sig = ""
		if !metaEqual(again, want) {
			t.Fatalf("round trip changed the meta:\n got %+v\nwant %+v", again, want)
		}
	})
}

// FuzzParseOrigin feeds hostile push-origin values to ParseOrigin. Seed
// corpus: testdata/fuzz/FuzzParseOrigin.
func FuzzParseOrigin(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		topic, part, off, err := ParseOrigin(s)
		if err != nil {
			if !errors.Is(err, ErrHeader) {
				t.Fatalf("ParseOrigin(%q) error %v does not wrap ErrHeader", s, err)
			}
			return
		}
		if topic == "" || part < 0 || off < 0 {
			t.Fatalf("ParseOrigin(%q) = %q, %d, %d", s, topic, part, off)
		}
		formatted := OriginOf(&kgo.Record{Topic: topic, Partition: part, Offset: off})
		t2, p2, o2, err := ParseOrigin(formatted)
		if err != nil || t2 != topic || p2 != part || o2 != off {
			t.Fatalf("ParseOrigin(OriginOf(%q, %d, %d)) = %q, %d, %d, %v", topic, part, off, t2, p2, o2, err)
		}
	})
}

// FuzzVerify feeds forged push-sig values, values and topics to Verify. A
// record must never verify unless its signature is exactly what Sign gives
// for it. Seed corpus: testdata/fuzz/FuzzVerify, plus one valid signature
// (it depends on the test key, so it is computed here).
func FuzzVerify(f *testing.F) {
	s, err := NewSigner(keyA, keyB)
	if err != nil {
		f.Fatal(err)
	}
	const topic = "push.tier1.retry-2s"
	exp := t0.Add(time.Hour)
	good := signedRecord(f, s, topic, exp)
	f.Add(sigOf(good), good.Value, topic)
	f.Fuzz(func(t *testing.T, sig string, value []byte, topic string) {
		r := cloneRecord(good)
		r.Topic, r.Value = topic, value
		setHeader(r, HeaderSig, sig)
		err := s.Verify(r, t0)
		if err != nil {
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("Verify error %v does not wrap ErrBadSignature", err)
			}
			return
		}
		// Verified: the signature must be what Sign gives for this record
		// with one of the keys.
		parts := strings.Split(sig, ".")
		if len(parts) != 3 {
			t.Fatalf("Verify accepted %q", sig)
		}
		e, perr := strconv.ParseInt(parts[1], 10, 64)
		if perr != nil {
			t.Fatalf("Verify accepted %q", sig)
		}
		var hs []kgo.RecordHeader
		for _, h := range r.Headers {
			if h.Key != HeaderSig {
				hs = append(hs, h)
			}
		}
		want := s.Sign(r.Topic, hs, r.Value, time.Unix(e, 0))
		old := (&Signer{keys: [][]byte{keyB}}).Sign(r.Topic, hs, r.Value, time.Unix(e, 0))
		if sig != want && sig != old {
			t.Fatalf("Verify accepted %q, want only %q or %q", sig, want, old)
		}
		if t0.Unix() > e {
			t.Fatalf("Verify accepted an expired signature %q", sig)
		}
	})
}
