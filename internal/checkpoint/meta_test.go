package checkpoint

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFinishedRoundTrip(t *testing.T) {
	cases := []struct {
		name      string
		committed int64
		spans     []Span
		want      []Span
	}{
		{"none", 10, nil, nil},
		{"one", 10, []Span{{12, 15}}, []Span{{12, 15}}},
		{"adjacent to the commit", 10, []Span{{10, 11}, {13, 20}}, []Span{{10, 11}, {13, 20}}},
		{"before the commit is cut", 10, []Span{{5, 12}, {14, 15}}, []Span{{10, 12}, {14, 15}}},
		{"wholly before the commit", 10, []Span{{5, 8}}, nil},
		{"large offsets", 1 << 40, []Span{{1<<40 + 3, 1<<40 + 900}}, []Span{{1<<40 + 3, 1<<40 + 900}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			meta := Encode(c.committed, c.spans, at)
			if len(meta) > MetaMax {
				t.Fatalf("metadata of %d bytes, want at most %d", len(meta), MetaMax)
			}
			got, gotAt := Decode(c.committed, meta)
			if !slices.Equal(got, c.want) || !gotAt.Equal(at) {
				t.Fatalf("decode(encode(%v)) = %v at %v, want %v at %v (metadata %q)", c.spans, got, gotAt, c.want, at, meta)
			}
		})
	}
}

// Metadata written by older processors, without the time, still tells
// what finished.
func TestFinishedV1(t *testing.T) {
	// 101..105 finished after a commit at 100: gap 1, length 4.
	spans, when := Decode(100, metaPrefixV1+"100:AQQ")
	if want := []Span{{101, 105}}; !slices.Equal(spans, want) || !when.IsZero() {
		t.Fatalf("decode v1 = %v at %v, want %v and no time", spans, when, want)
	}
}

// Metadata for another offset, or not ours, skips nothing: the records are
// consumed again rather than skipped on a guess.
func TestFinishedForeign(t *testing.T) {
	meta := Encode(100, []Span{{101, 105}}, at)
	for _, c := range []struct {
		name      string
		committed int64
		meta      string
	}{
		{"another offset", 101, meta},
		{"kgo's member id", 100, "kgo-1234-abcd"},
		{"empty", 100, ""},
		{"truncated", 100, meta[:len(meta)-2]},
		{"bad base64", 100, metaPrefix + "100:1:!!"},
		{"zero length run", 100, metaPrefix + "100:1:AAA"},
		{"negative committed", -1, metaPrefix + "-1:1:AQE"},
		{"no time", 100, metaPrefix + "100:AQE"},
		{"negative time", 100, metaPrefix + "100:-5:AQE"},
		{"v1 bad base64", 100, metaPrefixV1 + "100:!!"},
	} {
		if got, when := Decode(c.committed, c.meta); got != nil || !when.IsZero() {
			t.Errorf("%s: decode = %v at %v, want nil and no time", c.name, got, when)
		}
	}
}

// A partition with more finished ranges than the metadata can carry lists
// the first ones only: what is left out is sent again, never skipped.
func TestFinishedCap(t *testing.T) {
	var spans []Span
	for i := range int64(5000) {
		spans = append(spans, Span{1000 + 3*i, 1000 + 3*i + 1})
	}
	meta := Encode(1000, spans, at)
	if len(meta) > MetaMax {
		t.Fatalf("metadata of %d bytes, want at most %d", len(meta), MetaMax)
	}
	// The longest offset and time the prefix can hold still fit.
	if long := Encode(1<<62, []Span{{1<<62 + 1, 1<<62 + 2}}, time.UnixMilli(1<<50)); len(long) > MetaMax {
		t.Fatalf("metadata of %d bytes, want at most %d", len(long), MetaMax)
	}
	got, _ := Decode(1000, meta)
	if len(got) == 0 || len(got) >= len(spans) {
		t.Fatalf("kept %d of %d spans, want a prefix", len(got), len(spans))
	}
	if !slices.Equal(got, spans[:len(got)]) {
		t.Fatalf("kept spans are not a prefix of the finished ones")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(int64(100), Encode(100, []Span{{101, 105}, {200, 201}}, at))
	f.Add(int64(0), metaPrefix+"0:1:AQE")
	f.Add(int64(0), metaPrefixV1+"0:AQE")
	f.Add(int64(7), "kgo")
	f.Fuzz(func(t *testing.T, committed int64, meta string) {
		spans, _ := Decode(committed, meta)
		at := committed
		for _, s := range spans {
			if s.From < at || s.To <= s.From {
				t.Fatalf("decode(%d, %q) = %v: spans must be ordered, non-empty, at or after the commit", committed, meta, spans)
			}
			at = s.To
		}
		if spans != nil && !strings.HasPrefix(meta, metaPrefix) && !strings.HasPrefix(meta, metaPrefixV1) {
			t.Fatalf("decoded spans from foreign metadata %q", meta)
		}
	})
}
