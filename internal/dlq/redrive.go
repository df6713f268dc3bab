package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Defaults of Options.
const (
	DefaultGroup       = "tierpush-redrive"
	DefaultMaxRedrives = 3
)

// brokerTimeout bounds a produce or commit that Redrive finishes after its
// context is cancelled: an interrupt lands between records, never between
// a record's produce and its commit.
const brokerTimeout = 30 * time.Second

// Limiter paces redriven records; *rate.Limiter is one.
type Limiter interface {
	Wait(ctx context.Context) error
}

var _ Limiter = (*rate.Limiter)(nil)

// Options shape a Redrive.
type Options struct {
	// DryRun reads from the group's position and reports what would be
	// redriven, producing and committing nothing.
	DryRun bool
	// Limit stops the run after that many records are redriven; 0 means
	// no limit.
	Limit int
	// Rate is the most records redriven per second; 0 means unpaced.
	Rate float64
	// Limiter, when set, paces instead of Rate (tests).
	Limiter Limiter
	// MaxRedrives is the loop guard: a record already redriven that many
	// times (push-redrive-count) is refused. 0 means DefaultMaxRedrives.
	MaxRedrives int
	// Group is the consumer group whose committed offsets on the DLQ are
	// the redrive's position. "" means DefaultGroup.
	Group string
	// IncludeBadSignature allows redriving records refused for a missing
	// or wrong push-sig: they may be forged or tampered with.
	IncludeBadSignature bool
	// OnStart, when set, is called once with the number of DLQ records
	// the run will read.
	OnStart func(total int64)
	// OnRecord, when set, is called after each record is handled (for a
	// redriven record: after its produce is acknowledged and its offset
	// committed).
	OnRecord func(Result)
}

// Validate reports the first option out of range, naming it.
func (o *Options) Validate() error {
	switch {
	case o.Limit < 0:
		return fmt.Errorf("Limit %d: want 0 (no limit) or more", o.Limit)
	case o.Rate < 0:
		return fmt.Errorf("Rate %v: want 0 (unpaced) or more", o.Rate)
	case o.MaxRedrives < 0:
		return fmt.Errorf("MaxRedrives %d: want 1 or more (0 for the default %d)", o.MaxRedrives, DefaultMaxRedrives)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.MaxRedrives == 0 {
		o.MaxRedrives = DefaultMaxRedrives
	}
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	return o
}

// Skip says why a record was not redriven.
type Skip string

// Why records are passed over. Every skipped record is committed past: the
// group's next run does not see it again.
const (
	SkipFiltered     Skip = "filtered"      // the filter does not match it
	SkipNoTier       Skip = "no_tier"       // push-origin names no tier topic
	SkipBadCount     Skip = "bad_count"     // push-redrive-count unreadable: the loop guard cannot tell
	SkipBadSignature Skip = "bad_signature" // possibly forged; needs IncludeBadSignature
	SkipLoopGuard    Skip = "loop_guard"    // redriven MaxRedrives times already
	SkipWouldFail    Skip = "would_fail"    // its reason cannot succeed again (WouldFailAgain) and the filter does not name it
)

// wouldFail are the reasons whose event, sent again as it is, meets the
// same answer: the processor or the push service refused the event itself,
// not the moment. A redrive passes them over unless its filter names the
// reason (after the endpoint policy or the event's producer was fixed).
// The others can succeed later: max_attempts and the VAPID reasons once the
// push service or the keys are right again, ttl_expired with a fresh TTL
// (an event without created_at counts its TTL from the redriven record).
var wouldFail = map[topology.Reason]string{
	topology.ReasonInvalidEvent:    "the event does not decode or breaks a rule: the processor refuses it again",
	topology.ReasonEndpointBlocked: "the endpoint policy refuses its endpoint again",
	topology.ReasonPayloadTooLarge: "its payload is over the push service's limit again",
	topology.ReasonRejected:        "the push service refused the request itself (4xx): the same request meets the same answer",
}

// WouldFailAgain reports whether an event dead-lettered for reason would
// fail the same way if redriven unchanged, and says why.
func WouldFailAgain(reason topology.Reason) (why string, ok bool) {
	why, ok = wouldFail[reason]
	return why, ok
}

// Decision is what Redrive does with one record.
type Decision struct {
	Skip  Skip   // "" when the record is redriven
	Topic string // the tier topic it goes to
	Count int    // its push-redrive-count once redriven
}

// Plan decides, without I/O, whether r is redriven and where to. o must
// have its defaults applied.
func Plan(r *Record, f *Filter, names topology.Names, o *Options) Decision {
	switch {
	case !f.Match(r):
		return Decision{Skip: SkipFiltered}
	case !r.Tier.Valid():
		return Decision{Skip: SkipNoTier}
	case r.badRedriveCount:
		return Decision{Skip: SkipBadCount}
	case r.Meta.Reason == topology.ReasonBadSignature && !o.IncludeBadSignature:
		return Decision{Skip: SkipBadSignature}
	case r.Meta.RedriveCount >= o.MaxRedrives:
		return Decision{Skip: SkipLoopGuard}
	}
	if _, hopeless := WouldFailAgain(r.Meta.Reason); hopeless && !slices.Contains(f.Reasons, r.Meta.Reason) {
		return Decision{Skip: SkipWouldFail}
	}
	return Decision{Topic: names.Tier(r.Tier), Count: r.Meta.RedriveCount + 1}
}

// Replay builds the record d sends r to: value and key intact, every
// push-* routing header dropped (the tier topic starts the event afresh),
// other headers such as traceparent kept, push-redrive-count set.
func Replay(r *Record, d Decision) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(r.Raw.Headers)+1)
	for _, h := range r.Raw.Headers {
		if !strings.HasPrefix(h.Key, "push-") {
			hs = append(hs, h)
		}
	}
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderRedriveCount, Value: []byte(strconv.Itoa(d.Count))})
	return &kgo.Record{Topic: d.Topic, Key: r.Raw.Key, Value: r.Raw.Value, Headers: hs}
}

// Action is what happened to a record.
type Action int

// Actions of a Result.
const (
	ActionSkipped      Action = iota
	ActionRedriven            // produced to its tier topic, DLQ offset committed
	ActionWouldRedrive        // dry run
)

// Result reports one handled record.
type Result struct {
	Record *Record
	Action Action
	Skip   Skip
	// Topic, Partition and Offset are where a redriven record was
	// produced (Topic alone in a dry run).
	Topic     string
	Partition int32
	Offset    int64
}

// Report sums up a Redrive.
type Report struct {
	// Total is how many DLQ records lay between the group's position and
	// the high-water marks when the run began.
	Total int64
	// Scanned counts the records handled.
	Scanned int
	// Redriven counts the records redriven, or that would be in a dry run.
	Redriven int
	ByTier   map[tiers.Tier]int
	Skipped  map[Skip]int
	// WouldFail counts by reason the records passed over as SkipWouldFail.
	WouldFail map[topology.Reason]int
	// LimitReached is true when the run stopped at Options.Limit.
	LimitReached bool
}

// errLimit stops a run at Options.Limit.
var errLimit = errors.New("limit reached")

// Redrive replays the DLQ records that f selects to their tier topics, from
// the position of the consumer group o.Group up to the high-water marks
// when it began. It commits each DLQ offset only after the redriven record
// is acknowledged, so a run stopped by ctx resumes where it stopped: no
// record is replayed twice and none skipped. Records passed over are
// counted in the Report by why, and committed past too.
//
// cl produces and asks the broker for offsets; it must not be a group
// consumer. Redrive joins o.Group with a client of its own built from
// cl.Opts(). On a cancelled ctx it returns the Report so far and ctx's
// error.
func Redrive(ctx context.Context, cl *kgo.Client, names topology.Names, f Filter, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	o = o.withDefaults()
	rd := &redrive{cl: cl, names: names, f: &f, o: &o,
		rep: Report{ByTier: make(map[tiers.Tier]int), Skipped: make(map[Skip]int), WouldFail: make(map[topology.Reason]int)}}
	switch {
	case o.Limiter != nil:
		rd.limiter = o.Limiter
	case o.Rate > 0:
		rd.limiter = rate.NewLimiter(rate.Limit(o.Rate), 1)
	}
	adm := kadm.NewClient(cl)
	topic := names.DLQ()
	spans, err := snapshot(ctx, adm, topic, o.Group)
	if err != nil {
		return rd.rep, err
	}
	for _, s := range spans {
		rd.rep.Total += max(0, s.end-s.start)
	}
	if o.OnStart != nil {
		o.OnStart(rd.rep.Total)
	}
	if o.DryRun {
		err = scan(ctx, cl, adm, topic, o.Group, spans, rd.dryRun)
	} else {
		err = rd.run(ctx, adm, topic, spans)
	}
	if errors.Is(err, errLimit) {
		rd.rep.LimitReached, err = true, nil
	}
	return rd.rep, err
}

type redrive struct {
	cl       *kgo.Client
	consumer *kgo.Client
	names    topology.Names
	f        *Filter
	o        *Options
	limiter  Limiter
	rep      Report
	// skipped holds, per partition, the last record passed over and not
	// yet committed; a redriven record's commit covers it.
	skipped map[int32]*kgo.Record
}

func (rd *redrive) run(ctx context.Context, adm *kadm.Client, topic string, spans map[int32]span) error {
	c := newCursor(topic, spans, func(ctx context.Context) (map[int32]int64, error) {
		return positions(ctx, adm, topic, rd.o.Group)
	})
	if c.done() {
		return nil
	}
	consumer, err := kgo.NewClient(append(rd.cl.Opts(),
		kgo.ConsumerGroup(rd.o.Group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.KeepControlRecords(), // see cursor.run
		// No partition is taken away while a batch is handled, so each
		// commit lands in the generation that fetched the record.
		kgo.BlockRebalanceOnPoll(),
	)...)
	if err != nil {
		return fmt.Errorf("join group %s: %w", rd.o.Group, err)
	}
	defer consumer.Close()
	rd.consumer, rd.skipped = consumer, make(map[int32]*kgo.Record)
	// A batch holds rebalances back while it is paced: keep it to about
	// two seconds of work.
	batch := 100
	if rd.o.Rate > 0 {
		batch = min(batch, max(1, int(2*rd.o.Rate)))
	}
	poll := func(ctx context.Context) kgo.Fetches { return consumer.PollRecords(ctx, batch) }
	afterPoll := func() error {
		err := rd.commitSkipped(ctx)
		consumer.AllowRebalance()
		return err
	}
	return c.run(ctx, poll, func(r *kgo.Record) error { return rd.handle(ctx, r) }, afterPoll)
}

// handle redrives or passes over one record.
func (rd *redrive) handle(ctx context.Context, r *kgo.Record) error {
	rec := Inspect(r, rd.names)
	d := Plan(rec, rd.f, rd.names, rd.o)
	res := Result{Record: rec, Skip: d.Skip, Topic: d.Topic}
	if d.Skip != "" {
		rd.skipped[r.Partition] = r
		return rd.count(res)
	}
	if rd.limiter != nil {
		if err := rd.limiter.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pace redrive: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// From here on the record is finished even if ctx ends: an interrupt
	// must not leave it produced but uncommitted.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), brokerTimeout)
	defer cancel()
	out := Replay(rec, d)
	if err := rd.cl.ProduceSync(bctx, out).FirstErr(); err != nil {
		return fmt.Errorf("redrive %s to %s: %w", position(r), d.Topic, err)
	}
	if err := rd.consumer.CommitRecords(bctx, r); err != nil {
		return fmt.Errorf("commit %s in group %s after redriving it (a rerun replays it): %w", position(r), rd.o.Group, err)
	}
	delete(rd.skipped, r.Partition)
	res.Action, res.Partition, res.Offset = ActionRedriven, out.Partition, out.Offset
	return rd.count(res)
}

// commitSkipped commits past the records passed over since the last
// commit.
func (rd *redrive) commitSkipped(ctx context.Context) error {
	if len(rd.skipped) == 0 {
		return nil
	}
	rs := make([]*kgo.Record, 0, len(rd.skipped))
	for _, r := range rd.skipped {
		rs = append(rs, r)
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), brokerTimeout)
	defer cancel()
	if err := rd.consumer.CommitRecords(bctx, rs...); err != nil {
		return fmt.Errorf("commit skipped records in group %s: %w", rd.o.Group, err)
	}
	clear(rd.skipped)
	return nil
}

// dryRun reports what handle would do, doing nothing.
func (rd *redrive) dryRun(r *kgo.Record) error {
	rec := Inspect(r, rd.names)
	d := Plan(rec, rd.f, rd.names, rd.o)
	res := Result{Record: rec, Skip: d.Skip, Topic: d.Topic}
	if d.Skip == "" {
		res.Action = ActionWouldRedrive
	}
	return rd.count(res)
}

// count adds res to the report, and stops the run at the limit.
func (rd *redrive) count(res Result) error {
	rd.rep.Scanned++
	if res.Action == ActionSkipped {
		rd.rep.Skipped[res.Skip]++
		if res.Skip == SkipWouldFail {
			rd.rep.WouldFail[res.Record.Meta.Reason]++
		}
	} else {
		rd.rep.Redriven++
		rd.rep.ByTier[res.Record.Tier]++
	}
	if rd.o.OnRecord != nil {
		rd.o.OnRecord(res)
	}
	if res.Action != ActionSkipped && rd.o.Limit > 0 && rd.rep.Redriven >= rd.o.Limit {
		return errLimit
	}
	return nil
}

func position(r *kgo.Record) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "@" + strconv.FormatInt(r.Offset, 10)
}
