// An upstream service's side of tierpush with kafkajs: each line of stdin is
// a browser PushSubscription ({"endpoint", "keys": {"p256dh", "auth"}});
// each becomes an event (docs/schema/event.schema.json) produced to a tier
// topic, keyed by a hash of the endpoint so a subscription's events stay in
// order.
//
//   BROKERS=127.0.0.1:9092 TIER=tier1 ID_PREFIX=order- node producer.js < subscriptions.jsonl
'use strict';
const crypto = require('node:crypto');
const readline = require('node:readline');
const { Kafka, logLevel, Partitioners } = require('kafkajs');

const brokers = (process.env.BROKERS || '127.0.0.1:9092').split(',');
const tier = process.env.TIER || 'tier1';
const idPrefix = process.env.ID_PREFIX || 'node-';

async function main() {
  const kafka = new Kafka({ clientId: 'example-producer', brokers, logLevel: logLevel.WARN });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    let n = 0;
    for await (const line of readline.createInterface({ input: process.stdin })) {
      if (!line.trim()) continue;
      n++;
      const subscription = JSON.parse(line);
      const event = {
        id: `${idPrefix}${n}`,
        subscription: { endpoint: subscription.endpoint, keys: subscription.keys },
        payload: JSON.stringify({ title: 'Hello from tierpush' }),
        ttl: 3600,
        urgency: 'high',
      };
      const key = crypto.createHash('sha256').update(subscription.endpoint).digest('hex').slice(0, 16);
      // acks: -1 waits for every in-sync replica: once send resolves,
      // tierpush will deliver the event or record why not.
      const [meta] = await producer.send({ topic: `push.${tier}`, acks: -1, messages: [{ key, value: JSON.stringify(event) }] });
      console.log(`produced ${event.id} to push.${tier}/${meta.partition}@${meta.baseOffset}`);
    }
  } finally {
    await producer.disconnect();
  }
}

main().catch((err) => {
  console.error('producer:', err.message);
  process.exit(1);
});
