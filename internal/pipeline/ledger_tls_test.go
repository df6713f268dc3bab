package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tierpush/tierpush/internal/broker"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// TestLedgerTLSSCRAM is the ledger test with every Kafka connection over
// mutual TLS and SCRAM-SHA-512: the broker requires a client certificate
// from the test CA and a SCRAM login, and the processor, its producer and
// the test's clients use both. The failure mix and the ledger invariants are
// TestLedger's, on fewer events. Clients without the password or without
// TLS are refused.
func TestLedgerTLSSCRAM(t *testing.T) {
	const n = 400
	user := &broker.User{Method: "SCRAM-SHA-512", Name: "tierpush", Password: "ledger-scram-password"}
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, KafkaTLS: true, SASL: user})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()

		cases := make(map[string]mixCase, n)
		payloads := make(map[string][]byte, n)
		var recs []*kgo.Record
		for i := range n {
			c := ledgerMix(i)
			id := fmt.Sprintf("evt-%04d", i)
			sub := env.Sim.Subscribe(c.Script...)
			if c.Malformed {
				sub.Auth = sub.Auth[:16] // 12 bytes
			}
			payload := fmt.Sprintf(`{"n":%d,"id":%q}`, i, id)
			cases[id], payloads[sub.ID] = c, []byte(payload)
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.All[i%3]), Key: []byte(sub.ID), Value: testenv.Event(id, sub, payload, nil)})
		}
		env.Produce(ctx, recs...)

		got, err := env.ReadOutcomes(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		checkLedger(t, env, n, cases, payloads, got)

		// The broker really demands both: a wrong password and a
		// plaintext client get nowhere.
		login := func(pass string) kgo.Opt {
			return kgo.SASL(scram.Auth{User: user.Name, Pass: pass}.AsSha512Mechanism())
		}
		seed := kgo.SeedBrokers(env.Brokers...)
		refused := map[string][]kgo.Opt{
			"wrong password": {seed, kgo.Dialer(env.DialTLS), login("guess")},
			"no login":       {seed, kgo.Dialer(env.DialTLS)},
			"plaintext":      {seed, kgo.Dialer(env.VN.DialContext), login(user.Password)},
		}
		// The same dialer with the right password works, so the refusals
		// above are the broker's doing.
		refused["control"] = []kgo.Opt{seed, kgo.Dialer(env.DialTLS), login(user.Password)}
		for name, opts := range refused {
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			err = cl.Ping(pctx)
			if name == "control" && err != nil {
				t.Errorf("control: %v", err)
			}
			if name != "control" && err == nil {
				t.Errorf("%s: the broker answered", name)
			}
			pcancel()
			cl.Close()
		}
	})
}
