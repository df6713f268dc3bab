package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// attrCache keeps the measurement option of each label set a hook records
// with, built once: building an attribute.Set per call (sorting, hashing,
// allocating) was 5% of the processor's CPU and 9% of its allocations in
// bench a. It holds at most MaxSeries sets, as many as the metric itself
// keeps apart; past that, sets are built per call. The key is a struct of
// strings: a map lookup with it allocates nothing.
type attrCache[K comparable] struct {
	build func(K) []attribute.KeyValue

	mu   sync.RWMutex
	opts map[K]attrOpts
}

// attrOpts are one label set's options as the variadic arguments of Add
// and Record: a slice built per call escapes to the heap through the
// instrument's interface.
type attrOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newAttrCache[K comparable](build func(K) []attribute.KeyValue) *attrCache[K] {
	return &attrCache[K]{build: build, opts: make(map[K]attrOpts)}
}

// get returns the options of k's label set.
func (c *attrCache[K]) get(k K) attrOpts {
	c.mu.RLock()
	o, ok := c.opts[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	set := metric.WithAttributeSet(attribute.NewSet(c.build(k)...))
	o = attrOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	c.mu.Lock()
	if len(c.opts) < MaxSeries {
		c.opts[k] = o
	}
	c.mu.Unlock()
	return o
}

// The label sets of the per-send and per-outcome metrics.
type (
	sendKey     struct{ origin, tier, step, class string }
	originKey   struct{ origin string }
	stepKey     struct{ tier, step string }
	outcomeKey  struct{ outcome, reason, tier string }
	deliveryKey struct{ tier, outcome string }
	tierKey     struct{ tier string }
)

// hotAttrs are the caches of Metrics' per-record hooks.
type hotAttrs struct {
	sends    *attrCache[sendKey]
	latency  *attrCache[originKey]
	lateness *attrCache[stepKey]
	outcomes *attrCache[outcomeKey]
	delivery *attrCache[deliveryKey]
	expired  *attrCache[tierKey]
}

func newHotAttrs() hotAttrs {
	return hotAttrs{
		sends: newAttrCache(func(k sendKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("origin", k.origin), attribute.String("tier", k.tier),
				attribute.String("step", k.step), attribute.String("class", k.class)}
		}),
		latency: newAttrCache(func(k originKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("origin", k.origin)}
		}),
		lateness: newAttrCache(func(k stepKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("tier", k.tier), attribute.String("step", k.step)}
		}),
		outcomes: newAttrCache(func(k outcomeKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("outcome", k.outcome), attribute.String("reason", k.reason), attribute.String("tier", k.tier)}
		}),
		delivery: newAttrCache(func(k deliveryKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("tier", k.tier), attribute.String("outcome", k.outcome)}
		}),
		expired: newAttrCache(func(k tierKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("tier", k.tier)}
		}),
	}
}
