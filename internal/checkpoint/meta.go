package checkpoint

import (
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
	"time"
)

// A Kafka offset commit is one number per partition: the first record not
// yet finished. Records finish out of order (sends take different times, a
// retry record is held until due while later ones, due sooner, go out), so
// the records finished after that first unfinished one would be consumed
// and sent again by the partition's next owner after a crash. Every commit
// therefore carries, in the partition's commit metadata, the offsets after
// the committed one that are finished too, and a new owner skips them: a
// crash re-sends what was in flight and what finished since the last
// commit, not everything behind the slowest record. (The same idea as
// Confluent's Parallel Consumer offset maps.)
//
// The metadata is "tierpush.finished.v2:<committed offset>:<unix ms>:<runs>",
// the unix milliseconds being when the committing member wrote it (a new
// owner reads what was produced since then, less a margin: internal/consume)
// and runs base64url varint pairs (gap, length) of finished offset ranges,
// each gap counted from the end of the previous range, the first from the
// committed offset; runs may be empty. Every commit carries it, so that its
// time is known even when nothing is finished past the committed offset.
// "tierpush.finished.v1:<committed offset>:<runs>", without the time, is
// what older processors wrote: it still decodes. The metadata is capped at
// MetaMax bytes (Kafka's offset.metadata.max.bytes is 4096 by default):
// ranges that do not fit are left out, and their records are sent again,
// never skipped wrongly.
const (
	metaPrefix   = "tierpush.finished.v2:"
	metaPrefixV1 = "tierpush.finished.v1:"
	MetaMax      = 2048
)

// Span is a range [From, To) of finished offsets.
type Span struct{ From, To int64 }

// Encode returns the commit metadata for a partition committed at
// committed, written at at, whose finished offsets at or after committed are
// spans (sorted, not overlapping); "" for a negative offset.
func Encode(committed int64, spans []Span, at time.Time) string {
	if committed < 0 {
		return ""
	}
	var buf []byte
	// Room for the prefix, the offset, the time and their colons.
	maxRaw := base64.RawURLEncoding.DecodedLen(MetaMax - len(metaPrefix) - 2*21)
	from := committed
	for _, s := range spans {
		s.From = max(s.From, from)
		if s.To <= s.From {
			continue
		}
		n := len(buf)
		buf = binary.AppendUvarint(buf, uint64(s.From-from))
		buf = binary.AppendUvarint(buf, uint64(s.To-s.From))
		if len(buf) > maxRaw {
			buf = buf[:n]
			break
		}
		from = s.To
	}
	return metaPrefix + strconv.FormatInt(committed, 10) + ":" + strconv.FormatInt(max(at.UnixMilli(), 0), 10) + ":" +
		base64.RawURLEncoding.EncodeToString(buf)
}

// Decode returns what the metadata of a partition committed at committed
// tells: the finished spans after it, and when it was written (zero for
// metadata of older processors, which did not say). Metadata written by
// something else, or for another offset, tells nothing: nil and zero.
func Decode(committed int64, meta string) (spans []Span, at time.Time) {
	rest, ok := strings.CutPrefix(meta, metaPrefix)
	v1 := false
	if !ok {
		if rest, ok = strings.CutPrefix(meta, metaPrefixV1); !ok {
			return nil, time.Time{}
		}
		v1 = true
	}
	num, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, time.Time{}
	}
	if o, err := strconv.ParseInt(num, 10, 64); err != nil || o != committed || committed < 0 {
		return nil, time.Time{}
	}
	enc := rest
	if !v1 {
		var ms string
		if ms, enc, ok = strings.Cut(rest, ":"); !ok {
			return nil, time.Time{}
		}
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || n < 0 || n > 1<<50 {
			return nil, time.Time{}
		}
		at = time.UnixMilli(n)
	}
	spans, ok = decodeRuns(committed, enc)
	if !ok {
		return nil, time.Time{}
	}
	return spans, at
}

// decodeRuns decodes the base64url varint runs after committed.
func decodeRuns(committed int64, enc string) ([]Span, bool) {
	buf, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil, false
	}
	var out []Span
	from := committed
	for len(buf) > 0 {
		gap, n := binary.Uvarint(buf)
		if n <= 0 {
			return nil, false
		}
		buf = buf[n:]
		length, n := binary.Uvarint(buf)
		if n <= 0 || length == 0 || gap > 1<<62 || length > 1<<62 {
			return nil, false
		}
		buf = buf[n:]
		s := Span{From: from + int64(gap), To: from + int64(gap) + int64(length)}
		if s.From < from || s.To <= s.From {
			return nil, false // overflow
		}
		out = append(out, s)
		from = s.To
	}
	return out, true
}
