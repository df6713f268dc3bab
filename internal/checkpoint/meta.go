package checkpoint

import (
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"
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
// The metadata is "tierpush.finished.v1:<committed offset>:<runs>", runs
// being base64url varint pairs (gap, length) of finished offset ranges,
// each gap counted from the end of the previous range, the first from the
// committed offset. It is capped at MetaMax bytes (Kafka's
// offset.metadata.max.bytes is 4096 by default): ranges that do not fit are
// left out, and their records are sent again, never skipped wrongly.
const (
	metaPrefix = "tierpush.finished.v1:"
	MetaMax    = 2048
)

// Span is a range [From, To) of finished offsets.
type Span struct{ From, To int64 }

// Encode returns the commit metadata for a partition committed at
// committed whose finished offsets at or after it are spans (sorted, not
// overlapping), or "" when there are none.
func Encode(committed int64, spans []Span) string {
	if committed < 0 {
		return ""
	}
	var buf []byte
	maxRaw := base64.RawURLEncoding.DecodedLen(MetaMax - len(metaPrefix) - 21)
	at := committed
	for _, s := range spans {
		s.From = max(s.From, at)
		if s.To <= s.From {
			continue
		}
		n := len(buf)
		buf = binary.AppendUvarint(buf, uint64(s.From-at))
		buf = binary.AppendUvarint(buf, uint64(s.To-s.From))
		if len(buf) > maxRaw {
			buf = buf[:n]
			break
		}
		at = s.To
	}
	if len(buf) == 0 {
		return ""
	}
	return metaPrefix + strconv.FormatInt(committed, 10) + ":" + base64.RawURLEncoding.EncodeToString(buf)
}

// Decode returns the finished spans the metadata of a partition
// committed at committed lists, or nil when it lists none, was written by
// something else, or for another offset.
func Decode(committed int64, meta string) []Span {
	rest, ok := strings.CutPrefix(meta, metaPrefix)
	if !ok {
		return nil
	}
	num, enc, ok := strings.Cut(rest, ":")
	if !ok {
		return nil
	}
	if at, err := strconv.ParseInt(num, 10, 64); err != nil || at != committed || committed < 0 {
		return nil
	}
	buf, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil
	}
	var out []Span
	at := committed
	for len(buf) > 0 {
		gap, n := binary.Uvarint(buf)
		if n <= 0 {
			return nil
		}
		buf = buf[n:]
		length, n := binary.Uvarint(buf)
		if n <= 0 || length == 0 || gap > 1<<62 || length > 1<<62 {
			return nil
		}
		buf = buf[n:]
		s := Span{From: at + int64(gap), To: at + int64(gap) + int64(length)}
		if s.From < at || s.To <= s.From {
			return nil // overflow
		}
		out = append(out, s)
		at = s.To
	}
	return out
}
