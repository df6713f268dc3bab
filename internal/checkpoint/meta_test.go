package checkpoint

import (
	"slices"
	"strings"
	"testing"
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
			meta := Encode(c.committed, c.spans)
			if c.want == nil {
				if meta != "" {
					t.Fatalf("encode = %q, want empty", meta)
				}
				return
			}
			if len(meta) > MetaMax {
				t.Fatalf("metadata of %d bytes, want at most %d", len(meta), MetaMax)
			}
			got := Decode(c.committed, meta)
			if !slices.Equal(got, c.want) {
				t.Fatalf("decode(encode(%v)) = %v, want %v (metadata %q)", c.spans, got, c.want, meta)
			}
		})
	}
}

// Metadata for another offset, or not ours, skips nothing: the records are
// consumed again rather than skipped on a guess.
func TestFinishedForeign(t *testing.T) {
	meta := Encode(100, []Span{{101, 105}})
	for _, c := range []struct {
		name      string
		committed int64
		meta      string
	}{
		{"another offset", 101, meta},
		{"kgo's member id", 100, "kgo-1234-abcd"},
		{"empty", 100, ""},
		{"truncated", 100, meta[:len(meta)-2]},
		{"bad base64", 100, metaPrefix + "100:!!"},
		{"zero length run", 100, metaPrefix + "100:AAA"},
		{"negative committed", -1, metaPrefix + "-1:AQE"},
	} {
		if got := Decode(c.committed, c.meta); got != nil {
			t.Errorf("%s: decode = %v, want nil", c.name, got)
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
	meta := Encode(1000, spans)
	if len(meta) > MetaMax {
		t.Fatalf("metadata of %d bytes, want at most %d", len(meta), MetaMax)
	}
	got := Decode(1000, meta)
	if len(got) == 0 || len(got) >= len(spans) {
		t.Fatalf("kept %d of %d spans, want a prefix", len(got), len(spans))
	}
	if !slices.Equal(got, spans[:len(got)]) {
		t.Fatalf("kept spans are not a prefix of the finished ones")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(int64(100), Encode(100, []Span{{101, 105}, {200, 201}}))
	f.Add(int64(0), metaPrefix+"0:AQE")
	f.Add(int64(7), "kgo")
	f.Fuzz(func(t *testing.T, committed int64, meta string) {
		spans := Decode(committed, meta)
		at := committed
		for _, s := range spans {
			if s.From < at || s.To <= s.From {
				t.Fatalf("decode(%d, %q) = %v: spans must be ordered, non-empty, at or after the commit", committed, meta, spans)
			}
			at = s.To
		}
		if spans != nil && !strings.HasPrefix(meta, metaPrefix) {
			t.Fatalf("decoded spans from foreign metadata %q", meta)
		}
	})
}
