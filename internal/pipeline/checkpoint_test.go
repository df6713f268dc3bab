package pipeline

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/topology"
)

func TestFinishedRoundTrip(t *testing.T) {
	cases := []struct {
		name      string
		committed int64
		spans     []span
		want      []span
	}{
		{"none", 10, nil, nil},
		{"one", 10, []span{{12, 15}}, []span{{12, 15}}},
		{"adjacent to the commit", 10, []span{{10, 11}, {13, 20}}, []span{{10, 11}, {13, 20}}},
		{"before the commit is cut", 10, []span{{5, 12}, {14, 15}}, []span{{10, 12}, {14, 15}}},
		{"wholly before the commit", 10, []span{{5, 8}}, nil},
		{"large offsets", 1 << 40, []span{{1<<40 + 3, 1<<40 + 900}}, []span{{1<<40 + 3, 1<<40 + 900}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			meta := encodeFinished(c.committed, c.spans)
			if c.want == nil {
				if meta != "" {
					t.Fatalf("encode = %q, want empty", meta)
				}
				return
			}
			if len(meta) > finishedMetaMax {
				t.Fatalf("metadata of %d bytes, want at most %d", len(meta), finishedMetaMax)
			}
			got := decodeFinished(c.committed, meta)
			if !slices.Equal(got, c.want) {
				t.Fatalf("decode(encode(%v)) = %v, want %v (metadata %q)", c.spans, got, c.want, meta)
			}
		})
	}
}

// Metadata for another offset, or not ours, skips nothing: the records are
// consumed again rather than skipped on a guess.
func TestFinishedForeign(t *testing.T) {
	meta := encodeFinished(100, []span{{101, 105}})
	for _, c := range []struct {
		name      string
		committed int64
		meta      string
	}{
		{"another offset", 101, meta},
		{"kgo's member id", 100, "kgo-1234-abcd"},
		{"empty", 100, ""},
		{"truncated", 100, meta[:len(meta)-2]},
		{"bad base64", 100, finishedPrefix + "100:!!"},
		{"zero length run", 100, finishedPrefix + "100:AAA"},
		{"negative committed", -1, finishedPrefix + "-1:AQE"},
	} {
		if got := decodeFinished(c.committed, c.meta); got != nil {
			t.Errorf("%s: decode = %v, want nil", c.name, got)
		}
	}
}

// A partition with more finished ranges than the metadata can carry lists
// the first ones only: what is left out is sent again, never skipped.
func TestFinishedCap(t *testing.T) {
	var spans []span
	for i := range int64(5000) {
		spans = append(spans, span{1000 + 3*i, 1000 + 3*i + 1})
	}
	meta := encodeFinished(1000, spans)
	if len(meta) > finishedMetaMax {
		t.Fatalf("metadata of %d bytes, want at most %d", len(meta), finishedMetaMax)
	}
	got := decodeFinished(1000, meta)
	if len(got) == 0 || len(got) >= len(spans) {
		t.Fatalf("kept %d of %d spans, want a prefix", len(got), len(spans))
	}
	if !slices.Equal(got, spans[:len(got)]) {
		t.Fatalf("kept spans are not a prefix of the finished ones")
	}
}

func FuzzDecodeFinished(f *testing.F) {
	f.Add(int64(100), encodeFinished(100, []span{{101, 105}, {200, 201}}))
	f.Add(int64(0), finishedPrefix+"0:AQE")
	f.Add(int64(7), "kgo")
	f.Fuzz(func(t *testing.T, committed int64, meta string) {
		spans := decodeFinished(committed, meta)
		at := committed
		for _, s := range spans {
			if s.from < at || s.to <= s.from {
				t.Fatalf("decode(%d, %q) = %v: spans must be ordered, non-empty, at or after the commit", committed, meta, spans)
			}
			at = s.to
		}
		if spans != nil && !strings.HasPrefix(meta, finishedPrefix) {
			t.Fatalf("decoded spans from foreign metadata %q", meta)
		}
	})
}

// testQueue makes a partition whose queue holds records at offsets, done
// as marked.
func testQueue(offsets []int64, done []bool) *partition {
	p := newPartition("push.tier1", 0, topology.Source{})
	for i, o := range offsets {
		t := p.track(&kgo.Record{Offset: o}, time.Time{})
		t.done = done[i]
	}
	return p
}

func TestFinishedSpans(t *testing.T) {
	// Head 10 unfinished; 11, 12 finished; 13 held; 15 finished, 17
	// finished with 16 absent (a transaction marker); 18 in flight.
	p := testQueue([]int64{10, 11, 12, 13, 15, 17, 18}, []bool{false, true, true, false, true, true, false})
	if got, want := p.finishedSpans(10), []span{{11, 13}, {15, 18}}; !slices.Equal(got, want) {
		t.Errorf("finishedSpans(10) = %v, want %v", got, want)
	}
	// A commit request older than the head: what the checkpoint passed
	// since is finished too.
	if got, want := p.finishedSpans(7), []span{{7, 10}, {11, 13}, {15, 18}}; !slices.Equal(got, want) {
		t.Errorf("finishedSpans(7) = %v, want %v", got, want)
	}
	if got := testQueue(nil, nil).finishedSpans(4); got != nil {
		t.Errorf("empty queue: %v, want nil", got)
	}
}

func TestSkip(t *testing.T) {
	p := newPartition("push.tier1", 0, topology.Source{})
	p.prior = []span{{11, 13}, {15, 18}}
	var skipped []int64
	for o := int64(10); o < 20; o++ {
		if p.skip(o) {
			skipped = append(skipped, o)
		}
	}
	if want := []int64{11, 12, 15, 16, 17}; !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	if len(p.prior) != 0 {
		t.Errorf("spans behind the last offset kept: %v", p.prior)
	}
}

// finish flags the partition for a metadata commit only when a record
// finished behind an unfinished one.
func TestFinishMetaDirty(t *testing.T) {
	p := testQueue([]int64{1, 2, 3}, []bool{false, false, false})
	if last := p.finish(p.queue[0]); last == nil || last.Offset != 1 || p.metaDirty {
		t.Fatalf("head finished: last %v, metaDirty %v; want offset 1, false", last, p.metaDirty)
	}
	if last := p.finish(p.queue[1]); last != nil || !p.metaDirty {
		t.Fatalf("record behind the head finished: last %v, metaDirty %v; want nil, true", last, p.metaDirty)
	}
}

// detach leaves nothing of the fetch behind: the copy shares no bytes
// with the record it came from.
func TestDetach(t *testing.T) {
	buf := []byte("keyvaluehdr")
	r := &kgo.Record{Topic: "push.tier1.retry-2s", Partition: 3, Offset: 7, Key: buf[0:3], Value: buf[3:8],
		Headers: []kgo.RecordHeader{{Key: "push-due", Value: buf[8:11]}, {Key: "empty"}}}
	c := detach(r)
	for i := range buf {
		buf[i] = 'x'
	}
	if string(c.Key) != "key" || string(c.Value) != "value" || string(c.Headers[0].Value) != "hdr" || c.Headers[1].Value != nil {
		t.Fatalf("copy changed with the fetch buffer: key %q value %q headers %v", c.Key, c.Value, c.Headers)
	}
	if c.Topic != r.Topic || c.Partition != r.Partition || c.Offset != r.Offset {
		t.Fatalf("copy lost its position: %s/%d@%d", c.Topic, c.Partition, c.Offset)
	}
	c.Key = append(c.Key, '!')
	if string(c.Value) != "value" {
		t.Fatalf("appending to the key overwrote the value: %q", c.Value)
	}
}
