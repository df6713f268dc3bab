// Package share carries pacing signals between the processors that send to
// the same push services, through a compacted topic keyed by origin
// (`push.pacing`): every processor produces its pacer's signals (its rates
// now and then, a cut, a halt, that it leaves) and reads everyone else's,
// so that together they hold one estimate of each origin, each sends its
// part of it, and a halt seen by one holds for all within a fetch. It owns one Kafka client and
// its two goroutines; it decides nothing about pacing (internal/pacing
// does) and must not block the pacer: signals it cannot send at once are
// dropped, the newest kept.
package share

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pacing"
)

// Applier takes the signals of other processors (pacing.Pacer).
type Applier interface {
	Apply(pacing.Signal)
}

var _ Applier = (*pacing.Pacer)(nil)

// Config says where signals go and who sends them.
type Config struct {
	// Topic is the compacted topic of signals, keyed by origin.
	Topic string
	// From names this processor in its signals; it must differ between
	// the processors of a group (the pod name, a host:pid).
	From string
	// Since is how far back a starting processor reads: the group's last
	// estimate of each origin it sent to, and a pause still in force,
	// reach it. Default 1 hour.
	Since time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// record is one signal as JSON, keyed by origin.
type record struct {
	From     string  `json:"from"`
	Kind     string  `json:"kind"`
	At       int64   `json:"at_ms"`
	Rate     float64 `json:"rate"`
	Accepted float64 `json:"accepted,omitempty"`
	Limited  bool    `json:"limited,omitempty"`
	// Ceiling and Epoch: the group's last cut (pacing.Signal).
	Ceiling float64 `json:"ceiling,omitempty"`
	Epoch   int64   `json:"epoch_ms,omitempty"`
	Until   int64   `json:"until_ms,omitempty"`
}

// queued bounds the signals waiting to be produced.
const queued = 1024

// Exchange produces this processor's signals and applies the others'.
type Exchange struct {
	cfg   Config
	log   *slog.Logger
	cl    *kgo.Client
	to    Applier
	mu    sync.Mutex
	queue []pacing.Signal
	wake  chan struct{}
	// Applied and Dropped count signals, for tests and metrics.
	applied, dropped, sent int64
}

// New returns an Exchange whose client is made of kopts (seed brokers,
// TLS, SASL, hooks) and reads cfg.Topic from cfg.Since ago. to receives
// the other processors' signals.
func New(cfg Config, log *slog.Logger, to Applier, kopts []kgo.Opt) (*Exchange, error) {
	if cfg.Topic == "" || cfg.From == "" {
		return nil, errors.New("share: topic and from are required")
	}
	if cfg.Since <= 0 {
		cfg.Since = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	opts := append(kopts[:len(kopts):len(kopts)],
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(cfg.Now().Add(-cfg.Since).UnixMilli())),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("share: client: %w", err)
	}
	return &Exchange{cfg: cfg, log: log, cl: cl, to: to, wake: make(chan struct{}, 1)}, nil
}

// Publish queues s to be produced; it never blocks. The oldest queued
// signal is dropped when the queue is full.
func (e *Exchange) Publish(s pacing.Signal) {
	e.mu.Lock()
	if len(e.queue) >= queued {
		e.queue = e.queue[1:]
		e.dropped++
	}
	e.queue = append(e.queue, s)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run produces queued signals and applies fetched ones until ctx ends,
// then closes the client. It owns both loops and returns once both have.
func (e *Exchange) Run(ctx context.Context) error {
	defer e.cl.Close()
	var wg sync.WaitGroup
	wg.Go(func() { e.produce(ctx) })
	for {
		fs := e.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, p int32, err error) {
			e.log.Warn("pacing signals: fetch", "topic", topic, "partition", p, "err", err)
		})
		fs.EachRecord(e.apply)
	}
	wg.Wait()
	return nil
}

func (e *Exchange) produce(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		}
		e.mu.Lock()
		batch := e.queue
		e.queue = nil
		e.mu.Unlock()
		for _, s := range batch {
			r := record{From: e.cfg.From, Kind: s.Kind, At: s.At.UnixMilli(), Rate: s.Rate, Accepted: s.Accepted, Limited: s.Limited, Ceiling: s.Ceiling}
			if !s.Epoch.IsZero() {
				r.Epoch = s.Epoch.UnixMilli()
			}
			if !s.Until.IsZero() {
				r.Until = s.Until.UnixMilli()
			}
			v, err := json.Marshal(r)
			if err != nil {
				continue
			}
			e.cl.Produce(ctx, &kgo.Record{Key: []byte(s.Origin), Value: v, Topic: e.cfg.Topic}, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					e.log.Warn("pacing signals: produce", "err", err)
				}
			})
			e.mu.Lock()
			e.sent++
			e.mu.Unlock()
		}
	}
}

// apply hands one fetched signal to the pacer, unless it is this
// processor's own or not one.
func (e *Exchange) apply(rec *kgo.Record) {
	var r record
	if len(rec.Key) == 0 || json.Unmarshal(rec.Value, &r) != nil || r.From == e.cfg.From || r.Kind == "" {
		return
	}
	s := pacing.Signal{Origin: string(rec.Key), From: r.From, Kind: r.Kind, At: time.UnixMilli(r.At), Rate: r.Rate, Accepted: r.Accepted, Limited: r.Limited, Ceiling: r.Ceiling}
	if r.Epoch != 0 {
		s.Epoch = time.UnixMilli(r.Epoch)
	}
	if r.Until != 0 {
		s.Until = time.UnixMilli(r.Until)
	}
	e.to.Apply(s)
	e.mu.Lock()
	e.applied++
	e.mu.Unlock()
}

// Counts reports the signals applied, produced and dropped so far.
func (e *Exchange) Counts() (applied, sent, dropped int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.applied, e.sent, e.dropped
}
