package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/telemetry"
)

// TestKafkaClientMetrics: the kgo client's own metrics come out of kprom
// under tierpush_kafka_*, with Prometheus names (not the OTel exporter's
// messaging_kafka_fetch_bytes_count_by_total), labelled by topic.
func TestKafkaClientMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "push.tier1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := telemetry.NewMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(m.KafkaMeter()),
		kgo.ConsumeTopics("push.tier1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "push.tier1", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 1; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(err)
		}
		n += fs.NumRecords()
	}
	wants := []string{
		`tierpush_kafka_connects_total{`,
		`tierpush_kafka_produce_records_total{node_id="0",topic="push.tier1"} 1`,
		`tierpush_kafka_fetch_records_total{node_id="0",topic="push.tier1"} 1`,
		`tierpush_kafka_produce_uncompressed_bytes_total{`,
		`tierpush_kafka_write_bytes_total{`,
	}
	// kgo calls the batch hooks after it has finished the records'
	// promises: the counters may lag ProduceSync and PollFetches a little.
	var body []byte
	for {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ = io.ReadAll(rec.Result().Body)
		missing := slices.DeleteFunc(slices.Clone(wants), func(w string) bool { return strings.Contains(string(body), w) })
		if len(missing) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("/metrics lacks %q:\n%s", missing, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(string(body), "messaging_kafka_") {
		t.Error("/metrics still has messaging_kafka_* series")
	}
}
