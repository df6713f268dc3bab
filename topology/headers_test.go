package topology

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func hdr(kv ...string) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestMetaHeadersRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		meta Meta
	}{
		{"minimal", Meta{FirstSeen: t0}},
		{"retry", Meta{
			Attempt: 2, Due: t0.Add(8 * time.Second), FirstSeen: t0,
			Origin: "push.tier1/3/42", Status: 503,
		}},
		{"hop", Meta{
			Attempt: 3, Due: t0.Add(time.Minute), NotBefore: t0.Add(5 * time.Minute), FirstSeen: t0,
			Origin: "push.tier2/0/0", Status: 429,
		}},
		{"dlq", Meta{
			Attempt: 5, FirstSeen: t0, Origin: "push.tier3/11/123456789",
			Status: 500, Reason: ReasonMaxAttempts, Error: "push service answered 500", RedriveCount: 2,
		}},
		{"outcome", Meta{Attempt: 1, FirstSeen: t0, Origin: "push.tier1/0/7", Status: 201, Reason: ReasonDelivered}},
		{"millisecond times", Meta{
			Attempt: 1, Due: t0.Add(2*time.Second + 123*time.Millisecond), FirstSeen: t0.Add(999 * time.Millisecond),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := tt.meta.Headers(nil)
			for _, h := range hs {
				if h.Key == HeaderSig {
					t.Errorf("Headers() wrote %s", HeaderSig)
				}
			}
			got, err := DecodeMeta(hs)
			if err != nil {
				t.Fatalf("DecodeMeta(Headers()) error = %v", err)
			}
			if !metaEqual(got, tt.meta) {
				t.Errorf("DecodeMeta(Headers()) = %+v\nwant %+v", got, tt.meta)
			}
		})
	}
}

// metaEqual compares metas with times at the codec's millisecond precision.
func metaEqual(a, b Meta) bool {
	eqT := func(x, y time.Time) bool {
		if x.IsZero() || y.IsZero() {
			return x.IsZero() == y.IsZero()
		}
		return x.UnixMilli() == y.UnixMilli()
	}
	return a.Attempt == b.Attempt && eqT(a.Due, b.Due) && eqT(a.NotBefore, b.NotBefore) &&
		eqT(a.FirstSeen, b.FirstSeen) && a.Origin == b.Origin && a.Status == b.Status &&
		a.Reason == b.Reason && a.Error == b.Error && a.RedriveCount == b.RedriveCount && a.Sig == b.Sig
}

func TestMetaHeadersValues(t *testing.T) {
	m := Meta{
		Attempt: 2, Due: time.UnixMilli(1_700_000_008_000), FirstSeen: time.UnixMilli(1_700_000_000_000),
		Origin: "push.tier1/3/42", Status: 503,
	}
	prefix := hdr("traceparent", "00-abc-def-01")
	got := m.Headers(prefix)
	want := hdr(
		"traceparent", "00-abc-def-01",
		HeaderAttempt, "2",
		HeaderDue, "1700000008000",
		HeaderFirstSeen, "1700000000000",
		HeaderOrigin, "push.tier1/3/42",
		HeaderStatus, "503",
	)
	if len(got) != len(want) {
		t.Fatalf("Headers() = %q, want %q", got, want)
	}
	for i := range want {
		if got[i].Key != want[i].Key || string(got[i].Value) != string(want[i].Value) {
			t.Errorf("Headers()[%d] = %s=%q, want %s=%q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

func TestDecodeMeta(t *testing.T) {
	tests := []struct {
		name string
		hs   []kgo.RecordHeader
		want Meta
	}{
		{"none", nil, Meta{}},
		{"unknown headers ignored", hdr(
			"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tracestate", "x",
			"push-unknown", "whatever",
			"content-type", strings.Repeat("x", 10_000),
			HeaderAttempt, "3",
		), Meta{Attempt: 3}},
		{"every field", hdr(
			HeaderAttempt, "4",
			HeaderDue, "1700000060000",
			HeaderNotBefore, "1700000300000",
			HeaderFirstSeen, "1700000000000",
			HeaderOrigin, "push.tier2/1/99",
			HeaderStatus, "429",
			HeaderReason, "max_attempts",
			HeaderError, "push service answered 429",
			HeaderRedriveCount, "1",
			HeaderSig, "v1.1.abc",
		), Meta{
			Attempt: 4, Due: time.UnixMilli(1_700_000_060_000), NotBefore: time.UnixMilli(1_700_000_300_000),
			FirstSeen: time.UnixMilli(1_700_000_000_000), Origin: "push.tier2/1/99", Status: 429,
			Reason: ReasonMaxAttempts, Error: "push service answered 429", RedriveCount: 1, Sig: "v1.1.abc",
		}},
		{"zero values", hdr(HeaderAttempt, "0", HeaderStatus, "0", HeaderDue, "0"), Meta{Due: time.UnixMilli(0)}},
		{"last duplicate wins", hdr(HeaderAttempt, "1", HeaderAttempt, "2"), Meta{Attempt: 2}},
		{"value at the size limit", hdr(HeaderError, strings.Repeat("e", maxHeaderValue)), Meta{Error: strings.Repeat("e", maxHeaderValue)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeMeta(tt.hs)
			if err != nil {
				t.Fatalf("DecodeMeta() error = %v", err)
			}
			if !metaEqual(got, tt.want) {
				t.Errorf("DecodeMeta() = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	big := strings.Repeat("1", maxHeaderValue+1)
	tests := []struct {
		name string
		hs   []kgo.RecordHeader
	}{
		{"attempt empty", hdr(HeaderAttempt, "")},
		{"attempt text", hdr(HeaderAttempt, "two")},
		{"attempt negative", hdr(HeaderAttempt, "-1")},
		{"attempt float", hdr(HeaderAttempt, "1.5")},
		{"attempt spaces", hdr(HeaderAttempt, " 1")},
		{"attempt huge", hdr(HeaderAttempt, "1000001")},
		{"attempt overflow", hdr(HeaderAttempt, "99999999999999999999999")},
		{"status text", hdr(HeaderStatus, "OK")},
		{"redrive negative", hdr(HeaderRedriveCount, "-3")},
		{"due text", hdr(HeaderDue, "soon")},
		{"due negative", hdr(HeaderDue, "-1")},
		{"due RFC 3339", hdr(HeaderDue, "2026-11-21T12:00:00Z")},
		{"due too far", hdr(HeaderDue, "1125899906842625")}, // 1<<50 + 1
		{"not-before float", hdr(HeaderNotBefore, "1.0")},
		{"first-seen empty", hdr(HeaderFirstSeen, "")},
		{"oversized origin", hdr(HeaderOrigin, strings.Repeat("o", maxHeaderValue+1))},
		{"oversized error", hdr(HeaderError, strings.Repeat("e", 1<<20))},
		{"oversized sig", hdr(HeaderSig, big)},
		{"bad after good", hdr(HeaderAttempt, "1", HeaderStatus, "x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeMeta(tt.hs)
			if !errors.Is(err, ErrHeader) {
				t.Fatalf("DecodeMeta() = %+v, %v; want an error wrapping ErrHeader", got, err)
			}
			if !metaEqual(got, Meta{}) {
				t.Errorf("DecodeMeta() returned %+v with its error, want the zero Meta", got)
			}
			if len(err.Error()) > 2*maxHeaderValue {
				t.Errorf("error is %d bytes long; it should not echo an oversized value", len(err.Error()))
			}
		})
	}
}

func TestOrigin(t *testing.T) {
	tests := []struct {
		name          string
		rec           kgo.Record
		want          string
		wantTopic     string
		wantPartition int32
		wantOffset    int64
	}{
		{"zero", kgo.Record{Topic: "push.tier1"}, "push.tier1/0/0", "push.tier1", 0, 0},
		{"typical", kgo.Record{Topic: "push.tier2", Partition: 7, Offset: 12345}, "push.tier2/7/12345", "push.tier2", 7, 12345},
		{"max", kgo.Record{Topic: "t", Partition: 1<<31 - 1, Offset: 1<<63 - 1}, "t/2147483647/9223372036854775807", "t", 1<<31 - 1, 1<<63 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OriginOf(&tt.rec)
			if got != tt.want {
				t.Fatalf("OriginOf() = %q, want %q", got, tt.want)
			}
			topic, part, off, err := ParseOrigin(got)
			if err != nil {
				t.Fatalf("ParseOrigin(%q) error = %v", got, err)
			}
			if topic != tt.wantTopic || part != tt.wantPartition || off != tt.wantOffset {
				t.Errorf("ParseOrigin(%q) = %q, %d, %d; want %q, %d, %d", got, topic, part, off, tt.wantTopic, tt.wantPartition, tt.wantOffset)
			}
		})
	}
}

func TestParseOriginErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"push.tier1",
		"push.tier1/3",
		"/3/4",
		"push.tier1//4",
		"push.tier1/3/",
		"push.tier1/-1/4",
		"push.tier1/3/-4",
		"push.tier1/x/4",
		"push.tier1/3/y",
		"push.tier1/2147483648/4",
		"push.tier1/3/9223372036854775808",
		"push.tier1/ 3/4",
		"//",
		"/",
	} {
		t.Run(s, func(t *testing.T) {
			topic, part, off, err := ParseOrigin(s)
			if !errors.Is(err, ErrHeader) {
				t.Fatalf("ParseOrigin(%q) = %q, %d, %d, %v; want an error wrapping ErrHeader", s, topic, part, off, err)
			}
		})
	}
}

// BenchmarkMetaHeaders is the routing headers of one outcome record.
func BenchmarkMetaHeaders(b *testing.B) {
	t0 := time.UnixMilli(1_790_000_000_000)
	m := Meta{Attempt: 1, FirstSeen: t0, Origin: "push.tier1/0/7", Status: 201, Reason: ReasonDelivered}
	dst := make([]kgo.RecordHeader, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		dst = m.Headers(dst[:0])
	}
}

// BenchmarkOriginOf is the push-origin of one consumed record.
func BenchmarkOriginOf(b *testing.B) {
	r := &kgo.Record{Topic: "push.tier1", Partition: 3, Offset: 1_234_567}
	b.ReportAllocs()
	for b.Loop() {
		_ = OriginOf(r)
	}
}
