package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// benchEvent is one event of a scenario: its own subscription, so the
// simulator's arrivals per subscription are the sends of this event.
type benchEvent struct {
	id      string
	sub     pushsim.Subscription
	tier    tiers.Tier
	topic   string
	payload []byte
	prefix  []byte // the event JSON up to created_at, which is set when produced
}

const ttlSeconds = 3600

func newEvent(scenario string, i int, sub pushsim.Subscription, tier tiers.Tier, names topology.Names, malformed bool) benchEvent {
	topic := names.Tier(tier)
	id := fmt.Sprintf("bench-%s-%07d", scenario, i)
	payload := fmt.Sprintf(`{"title":"tierpush bench","body":"Your order has shipped","id":%q}`, id)
	auth := sub.Auth
	if malformed {
		auth = auth[:16] // 12 bytes: invalid_event
	}
	prefix, _ := json.Marshal(map[string]any{
		"id":           id,
		"subscription": map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256dh, "auth": auth}},
		"payload":      payload,
		"ttl":          ttlSeconds,
		"urgency":      "normal",
	})
	prefix = prefix[:len(prefix)-1] // reopen the object for created_at
	return benchEvent{id: id, sub: sub, tier: tier, topic: topic, payload: []byte(payload), prefix: prefix}
}

// value is the event JSON with created_at = now.
func (e *benchEvent) value(now time.Time) []byte {
	v := make([]byte, 0, len(e.prefix)+48)
	v = append(v, e.prefix...)
	v = append(v, `,"created_at":"`...)
	v = now.UTC().AppendFormat(v, time.RFC3339Nano)
	return append(v, `"}`...)
}

// eventIndex parses the index out of an event id.
func eventIndex(id string) (int, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	return n, err == nil
}

// arrivals records when each push request reached the simulator, per event
// (one subscription per event): the k-th arrival is the event's k-th send.
type arrivals struct {
	index map[string]int // subscription id → event; written before serving

	mu sync.Mutex
	at [][]int64 // unix ns
}

func newArrivals(n int) *arrivals {
	return &arrivals{index: make(map[string]int, n), at: make([][]int64, n)}
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/push/"); ok {
			if i, ok := a.index[id]; ok {
				now := time.Now().UnixNano()
				a.mu.Lock()
				a.at[i] = append(a.at[i], now)
				a.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	})
}

// produce produces every event, at offered events/s or, when 0, as fast as
// the broker takes them, and waits for every acknowledgement.
func produce(ctx context.Context, cl *kgo.Client, evs []benchEvent, offered float64, produced *atomic.Int64) error {
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, &err)
		}
	}
	one := func(e *benchEvent) {
		cl.Produce(ctx, &kgo.Record{Topic: e.topic, Key: []byte(e.sub.ID), Value: e.value(time.Now())}, cb)
		produced.Add(1)
	}
	if offered <= 0 {
		for i := range evs {
			one(&evs[i])
		}
	} else {
		start := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		next := 0
		for next < len(evs) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			due := min(int(time.Since(start).Seconds()*offered), len(evs))
			for ; next < due; next++ {
				one(&evs[next])
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush produces: %w", err)
	}
	if p := firstErr.Load(); p != nil {
		return fmt.Errorf("%d produces failed: %w", failed.Load(), *p)
	}
	return nil
}

// outcome is what the bench keeps of one push.outcomes record.
type outcome struct {
	topology.OutcomeRecord
	received time.Time
}

// outcomeReader reads push.outcomes from its start and keeps the first
// outcome of each event.
type outcomeReader struct {
	n     int
	total atomic.Int64 // distinct events with an outcome
	dups  atomic.Int64 // outcome records beyond the first per event
	done  chan struct{}

	mu   sync.Mutex
	outs []*outcome // by event index
	last time.Time  // when the last distinct outcome arrived
}

func newOutcomeReader(n int) *outcomeReader {
	return &outcomeReader{n: n, outs: make([]*outcome, n), done: make(chan struct{})}
}

func (o *outcomeReader) run(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			var rec topology.OutcomeRecord
			if json.Unmarshal(r.Value, &rec) != nil {
				return
			}
			i, ok := eventIndex(rec.ID)
			if !ok || i >= o.n {
				return
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.outs[i] != nil {
				o.dups.Add(1)
				return
			}
			o.outs[i] = &outcome{OutcomeRecord: rec, received: now}
			o.last = now
			if o.total.Add(1) == int64(o.n) {
				close(o.done)
			}
		})
	}
}

// nth is when the k-th distinct outcome arrived (the last, when fewer
// did).
func (o *outcomeReader) nth(k int) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ts []time.Time
	for _, out := range o.outs {
		if out != nil {
			ts = append(ts, out.received)
		}
	}
	slices.SortFunc(ts, time.Time.Compare)
	return append([]time.Time{{}}, ts...)[min(k, len(ts))] // [0]: none yet
}

// readToEnd reads topics from their start up to their end offsets at the
// time of the call.
func readToEnd(ctx context.Context, kopts []kgo.Opt, topics []string, fn func(*kgo.Record)) error {
	adm, err := kgo.NewClient(kopts...)
	if err != nil {
		return err
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topics...)
	adm.Close()
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	want := make(map[string]map[int32]kgo.Offset)
	left := make(map[string]map[int32]int64)
	n := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset <= 0 {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic], left[o.Topic] = make(map[int32]kgo.Offset), make(map[int32]int64)
		}
		want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		left[o.Topic][o.Partition] = o.Offset
		n++
	})
	if n == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(kopts, kgo.ConsumePartitions(want))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for n > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read retry topics: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			fn(r)
			if r.Offset == end-1 {
				delete(left[r.Topic], r.Partition)
				n--
			}
		})
	}
	return nil
}

// ceilingResult is the webpush-go-only loop's figures.
type ceilingResult struct {
	Concurrency  int           `json:"concurrency"`
	Seconds      float64       `json:"seconds"`
	EventsPerSec float64       `json:"events_per_sec"`
	Status       map[int]int64 `json:"status"`
	Errors       int64         `json:"errors"`
	CPUSecPer1k  float64       `json:"cpu_sec_per_1000"` // the bench process, simulator included
}

// dispatchLoop sends every event with the processor's own sender
// (internal/dispatch) alone: no Kafka, no pipeline. It shows what Kafka and
// the pipeline cost on top of the send itself.
func dispatchLoop(ctx context.Context, evs []benchEvent, conc int, vapid vapidKeys, roots *x509.CertPool) (ceilingResult, error) {
	hc := loopClient(roots)
	defer hc.CloseIdleConnections()
	w, err := dispatch.New(dispatch.Config{VAPID: dispatch.VAPID{PublicKey: vapid.pub, PrivateKey: vapid.priv, Subject: vapid.subject}}, hc)
	if err != nil {
		return ceilingResult{}, err
	}
	decoded := make([]*event.Event, len(evs))
	now := time.Now()
	for i := range evs {
		if decoded[i], err = event.Decode(evs[i].value(now), now, event.DefaultRules()); err != nil {
			return ceilingResult{}, fmt.Errorf("dispatch loop: %w", err)
		}
	}
	return loop(ctx, len(evs), conc, func(i int) (int, error) {
		res := w.Send(ctx, decoded[i], time.Hour)
		if res.Status == 0 {
			return 0, errors.New(res.Err)
		}
		return res.Status, nil
	})
}

// loopClient is the HTTP client of the loops: the processor's, trusting
// roots (the simulator's certificate) when it serves HTTPS.
func loopClient(roots *x509.CertPool) *http.Client {
	var tc *dispatch.TLSConfig
	if roots != nil {
		tc = &dispatch.TLSConfig{RootCAs: roots}
	}
	return dispatch.NewHTTPClient(dispatch.HTTPConfig{TLS: tc})
}

// ceiling sends every event with webpush-go alone: one shared HTTP client
// tuned like the processor's, conc sends at once, no Kafka.
func ceiling(ctx context.Context, evs []benchEvent, conc int, vapid vapidKeys, roots *x509.CertPool) (ceilingResult, error) {
	hc := loopClient(roots)
	defer hc.CloseIdleConnections()
	opts := webpush.Options{
		HTTPClient:      hc,
		Subscriber:      strings.TrimPrefix(vapid.subject, "mailto:"),
		VAPIDPublicKey:  vapid.pub,
		VAPIDPrivateKey: vapid.priv,
		TTL:             ttlSeconds,
		Urgency:         webpush.UrgencyNormal,
	}
	return loop(ctx, len(evs), conc, func(i int) (int, error) {
		e := &evs[i]
		sub := webpush.Subscription{Endpoint: e.sub.Endpoint, Keys: webpush.Keys{P256dh: e.sub.P256dh, Auth: e.sub.Auth}}
		msg := e.payload[:len(e.payload):len(e.payload)] // webpush-go pads into spare capacity
		resp, err := webpush.SendNotificationWithContext(ctx, msg, &sub, &opts)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	})
}

// loop runs send for events 0..n-1, conc at once, and times it.
func loop(ctx context.Context, n, conc int, send func(i int) (int, error)) (ceilingResult, error) {
	var next, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var mu sync.Mutex
	status := make(map[int]int64)
	var wg sync.WaitGroup
	cpu0 := selfCPUSeconds()
	start := time.Now()
	for range conc {
		wg.Go(func() {
			local := make(map[int]int64)
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					break
				}
				code, err := send(i)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				local[code]++
			}
			mu.Lock()
			for k, v := range local {
				status[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return ceilingResult{}, fmt.Errorf("send loop: %w", err)
	}
	r := ceilingResult{
		Concurrency: conc, Seconds: took.Seconds(), EventsPerSec: float64(n) / took.Seconds(),
		Status: status, Errors: errs.Load(),
		CPUSecPer1k: (selfCPUSeconds() - cpu0) / float64(n) * 1000,
	}
	if r.Errors > 0 || r.Status[201] != int64(n) {
		err := errors.New("none")
		if p := firstErr.Load(); p != nil {
			err = *p
		}
		return r, fmt.Errorf("send loop: not every send was answered 201: status %v, %d errors, first: %w", r.Status, r.Errors, err)
	}
	return r, nil
}
