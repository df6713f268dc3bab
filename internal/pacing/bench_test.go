package pacing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
)

// BenchmarkAcquireDone measures one Acquire and Done: alone, from
// 8×GOMAXPROCS goroutines under the limit, and from as many queueing for a
// limit of 4 (each Done hands the slot to a waiter).
func BenchmarkAcquireDone(b *testing.B) {
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		p, err := pacing.New(pacing.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		req := pacing.Request{Origin: origin, Sub: "sub", Tier: tiers.Tier1}
		b.ReportAllocs()
		for b.Loop() {
			sl, _ := p.Acquire(ctx, req)
			if sl == nil {
				b.Fatal("deferred")
			}
			sl.Done(ok)
		}
	})
	for _, limit := range []int{512, 4} {
		b.Run(fmt.Sprintf("parallel/limit=%d", limit), func(b *testing.B) {
			cfg := pacing.DefaultConfig()
			cfg.MaxLimit = limit
			p, err := pacing.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				i := n.Add(1)
				req := pacing.Request{Origin: origin, Sub: fmt.Sprint("sub-", i), Tier: tiers.Tier(1 + i%3)}
				for pb.Next() {
					sl, _ := p.Acquire(ctx, req)
					if sl == nil {
						b.Error("deferred")
						return
					}
					sl.Done(ok)
				}
			})
		})
	}
}
