// Command producer is an upstream service's side of tierpush in a page of
// Go: it turns browser push subscriptions into events (docs/schema/
// event.schema.json) and produces them to a tier topic with franz-go,
// keyed by subscription so one subscription's events stay in order.
//
//	producer --brokers 127.0.0.1:9092 --tier tier1 --id-prefix order- < subscriptions.jsonl
//
// Each line of stdin is a PushSubscription as the browser's toJSON() gives
// it: {"endpoint": "...", "keys": {"p256dh": "...", "auth": "..."}}.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Subscription is a browser's PushSubscription.
type Subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// Event is what tierpush reads from a tier topic; see
// docs/schema/event.schema.json for every field.
type Event struct {
	ID           string       `json:"id"`
	Subscription Subscription `json:"subscription"`
	Payload      string       `json:"payload,omitempty"`
	TTL          int          `json:"ttl,omitempty"`
	Urgency      string       `json:"urgency,omitempty"`
	Topic        string       `json:"topic,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka seed brokers, comma-separated")
	tier := flag.String("tier", "tier1", "tier1 (transactional), tier2 (promotional) or tier3 (engagement)")
	prefix := flag.String("id-prefix", "example-", "event ids are this prefix and the line number")
	payload := flag.String("payload", `{"title":"Hello from tierpush"}`, "notification payload, as the service worker reads it")
	flag.Parse()

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()

	in := bufio.NewScanner(os.Stdin)
	for n := 1; in.Scan(); n++ {
		var sub Subscription
		if err := json.Unmarshal(in.Bytes(), &sub); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		ev := Event{ID: fmt.Sprintf("%s%d", *prefix, n), Subscription: sub, Payload: *payload, TTL: 3600, Urgency: "high"}
		value, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		// The key keeps a subscription's events on one partition, in
		// order; a hash keeps the endpoint out of the key.
		key := sha256.Sum256([]byte(sub.Endpoint))
		rec := &kgo.Record{Topic: "push." + *tier, Key: []byte(hex.EncodeToString(key[:8])), Value: value}
		// ProduceSync waits for the broker's acknowledgement: once it
		// returns nil, tierpush will deliver the event or record why not.
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("produce %s: %w", ev.ID, err)
		}
		fmt.Printf("produced %s to %s/%d@%d\n", ev.ID, rec.Topic, rec.Partition, rec.Offset)
	}
	return in.Err()
}
