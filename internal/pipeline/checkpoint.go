package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
// committed offset. It is capped at finishedMetaMax bytes (Kafka's
// offset.metadata.max.bytes is 4096 by default): ranges that do not fit are
// left out, and their records are sent again, never skipped wrongly.
const (
	finishedPrefix  = "tierpush.finished.v1:"
	finishedMetaMax = 2048
)

// span is a range [from, to) of finished offsets.
type span struct{ from, to int64 }

// encodeFinished returns the commit metadata for a partition committed at
// committed whose finished offsets at or after it are spans (sorted, not
// overlapping), or "" when there are none.
func encodeFinished(committed int64, spans []span) string {
	if committed < 0 {
		return ""
	}
	var buf []byte
	maxRaw := base64.RawURLEncoding.DecodedLen(finishedMetaMax - len(finishedPrefix) - 21)
	at := committed
	for _, s := range spans {
		s.from = max(s.from, at)
		if s.to <= s.from {
			continue
		}
		n := len(buf)
		buf = binary.AppendUvarint(buf, uint64(s.from-at))
		buf = binary.AppendUvarint(buf, uint64(s.to-s.from))
		if len(buf) > maxRaw {
			buf = buf[:n]
			break
		}
		at = s.to
	}
	if len(buf) == 0 {
		return ""
	}
	return finishedPrefix + strconv.FormatInt(committed, 10) + ":" + base64.RawURLEncoding.EncodeToString(buf)
}

// decodeFinished returns the finished spans the metadata of a partition
// committed at committed lists, or nil when it lists none, was written by
// something else, or for another offset.
func decodeFinished(committed int64, meta string) []span {
	rest, ok := strings.CutPrefix(meta, finishedPrefix)
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
	var out []span
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
		s := span{from: at + int64(gap), to: at + int64(gap) + int64(length)}
		if s.from < at || s.to <= s.from {
			return nil // overflow
		}
		out = append(out, s)
		at = s.to
	}
	return out
}

// finishedSpans returns the offsets at or after committed that p knows to
// be finished: those its checkpoint has already passed (every offset before
// the head of the queue was finished by us or committed by an earlier
// owner) and the finished records in the queue. Offsets between two
// finished records that no record has (transaction markers, compacted
// records) count as finished. p.mu must be held.
func (p *partition) finishedSpans(committed int64) []span {
	if len(p.queue) == 0 {
		return nil // the head itself is committable: nothing to add
	}
	var out []span
	if head := p.queue[0].rec.Offset; committed < head {
		out = append(out, span{committed, head})
	}
	open := false
	for _, t := range p.queue {
		o := t.rec.Offset
		switch {
		case !t.done:
			open = false
		case open:
			out[len(out)-1].to = o + 1
		default:
			out = append(out, span{o, o + 1})
			open = true
		}
	}
	return out
}

// skip reports whether the record at offset o was finished by an earlier
// owner of the partition, dropping spans behind o. p.mu must be held.
func (p *partition) skip(o int64) bool {
	for len(p.prior) > 0 && p.prior[0].to <= o {
		p.prior = p.prior[1:]
	}
	return len(p.prior) > 0 && p.prior[0].from <= o
}

// annotateCommit writes the finished offsets of each partition we own into
// an offset commit request. kgo calls it just before it sends any commit
// (autocommits, commits on revoke and shutdown): see New.
func (p *Processor) annotateCommit(req *kmsg.OffsetCommitRequest) error {
	p.mu.Lock()
	parts := maps.Clone(p.parts)
	p.mu.Unlock()
	for i := range req.Topics {
		rt := &req.Topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			ps := parts[topicPart{rt.Topic, rp.Partition}]
			if ps == nil {
				continue
			}
			ps.mu.Lock()
			var meta string
			if !ps.lost {
				meta = encodeFinished(rp.Offset, ps.finishedSpans(rp.Offset))
				ps.metaDirty = false
			}
			ps.mu.Unlock()
			if meta != "" {
				rp.Metadata = &meta
			}
		}
	}
	return nil
}

// commitFinished commits, every CommitInterval, the partitions whose
// finished offsets changed while their head did not move: kgo's autocommit
// sends only partitions with a new head, so a partition waiting on one slow
// record would otherwise never tell what finished behind it.
func (p *Processor) commitFinished(ctx context.Context) {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.CommitInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		moved := p.cl.MarkedOffsets() // a new head: autocommit sends these
		offs := make(map[string]map[int32]kgo.EpochOffset)
		p.mu.Lock()
		for k, ps := range p.parts {
			if _, ok := moved[k.topic][k.part]; ok {
				continue
			}
			ps.mu.Lock()
			// The head of the queue is the first unfinished record: the
			// offset kgo has marked, or, before anything was marked, where
			// consuming began.
			if ps.metaDirty && !ps.lost && len(ps.queue) > 0 {
				h := ps.queue[0].rec
				if offs[k.topic] == nil {
					offs[k.topic] = make(map[int32]kgo.EpochOffset)
				}
				offs[k.topic][k.part] = kgo.EpochOffset{Epoch: h.LeaderEpoch, Offset: h.Offset}
			}
			ps.mu.Unlock()
		}
		p.mu.Unlock()
		if len(offs) > 0 {
			p.cl.CommitOffsets(kgo.PreCommitFnContext(ctx, p.annotateCommit), offs, nil)
		}
	}
}

// loadFinished reads the finished offsets the previous owners of newly
// assigned partitions committed, so that accept skips them. Without them
// (an error, an older commit) every record after the committed offset is
// consumed again: at least once either way.
func (p *Processor) loadFinished(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	resps, err := kadm.NewClient(cl).FetchOffsetsForTopics(ctx, p.cfg.Group, topics...)
	if err != nil {
		p.log.Warn("reading committed offsets on assignment; finished records after them will be sent again", "err", err)
		return
	}
	for topic, parts := range m {
		for _, part := range parts {
			r, ok := resps.Lookup(topic, part)
			if !ok || r.Err != nil {
				continue
			}
			spans := decodeFinished(r.At, r.Metadata)
			if len(spans) == 0 {
				continue
			}
			ps := p.partition(topic, part)
			ps.mu.Lock()
			ps.prior = spans
			ps.mu.Unlock()
			var n int64
			for _, s := range spans {
				n += s.to - s.from
			}
			p.log.Info("skipping records the previous owner finished after its last committed offset",
				"topic", topic, "partition", part, "committed", r.At, "finished", n)
		}
	}
}
