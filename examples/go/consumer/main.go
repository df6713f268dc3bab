// Command consumer is an upstream service's other side of tierpush: it
// reads the ledger (push.outcomes, one terminal record per event) and the
// unsubscribe events (push.gone) with franz-go, and decodes them with
// topology.ParseOutcome and ParseGone, which check every field against
// docs/schema.
//
//	consumer --brokers 127.0.0.1:9092 --group my-service --count 10
//
// A real service would mark its notification sent or failed by the
// outcome's id, and delete the subscription of every push.gone record.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/topology"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka seed brokers, comma-separated")
	group := flag.String("group", "example-outcomes", "consumer group: the service's own, never the processor's")
	prefix := flag.String("id-prefix", "", "only count outcomes whose id starts so")
	count := flag.Int("count", 0, "stop after this many outcomes (0: until interrupted)")
	timeout := flag.Duration("timeout", 0, "give up after this long (0: never)")
	flag.Parse()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics("push.outcomes", "push.gone"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	seen := 0
	for *count == 0 || seen < *count {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d outcomes: %w", seen, *count, err)
		}
		if err := fs.Err(); err != nil {
			return err
		}
		for _, r := range fs.Records() {
			switch r.Topic {
			case "push.outcomes":
				o, err := topology.ParseOutcome(r.Value)
				if err != nil {
					// Log and go on: one bad record must not stop the ledger.
					fmt.Fprintf(os.Stderr, "skip %s/%d@%d: %v\n", r.Topic, r.Partition, r.Offset, err)
					continue
				}
				if !strings.HasPrefix(o.ID, *prefix) {
					continue
				}
				seen++
				latency := time.Duration(o.LatencyMS) * time.Millisecond
				fmt.Printf("outcome %s %s reason=%s status=%d attempts=%d latency=%s\n", o.ID, o.Outcome, o.Reason, o.Status, o.Attempts, latency)
			case "push.gone":
				g, err := topology.ParseGone(r.Value)
				if err != nil {
					fmt.Fprintf(os.Stderr, "skip %s/%d@%d: %v\n", r.Topic, r.Partition, r.Offset, err)
					continue
				}
				fmt.Printf("gone %s (event %s, status %d): delete this subscription\n", g.EndpointHash, g.EventID, g.Status)
			}
		}
		// Commit what was handled: a restart resumes after it.
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return err
		}
	}
	return nil
}
