// An upstream service's other side of tierpush with kafkajs: it reads the
// ledger (push.outcomes, one terminal record per event) and the unsubscribe
// events (push.gone), checks each against docs/schema, and prints it. A real
// service marks its notification sent or failed by the outcome's id, and
// deletes the subscription of every push.gone record.
//
//   BROKERS=127.0.0.1:9092 GROUP=my-service COUNT=10 node consumer.js
'use strict';
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs');

// The processor compresses what it writes with snappy (franz-go's default);
// kafkajs reads it with this codec.
CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy');

const brokers = (process.env.BROKERS || '127.0.0.1:9092').split(',');
const group = process.env.GROUP || 'example-outcomes-node';
const idPrefix = process.env.ID_PREFIX || '';
const count = Number(process.env.COUNT || 0); // 0: until interrupted
const timeoutMs = Number(process.env.TIMEOUT_MS || 0);

const OUTCOMES = ['delivered', 'gone', 'dead', 'expired'];

// outcomeError returns why a push.outcomes value breaks
// docs/schema/outcome.schema.json, naming the field, or null.
function outcomeError(o) {
  if (o === null || typeof o !== 'object' || Array.isArray(o)) return 'want a JSON object';
  if (typeof o.id !== 'string' || o.id === '') return 'id: want a non-empty string';
  if (!OUTCOMES.includes(o.outcome)) return `outcome: want one of ${OUTCOMES.join(', ')}`;
  if (typeof o.reason !== 'string') return 'reason: want a string';
  for (const f of ['status', 'attempts', 'latency_ms', 'first_seen', 'at']) {
    if (!Number.isInteger(o[f])) return `${f}: want a whole number`;
  }
  return null;
}

async function main() {
  const kafka = new Kafka({ clientId: 'example-consumer', brokers, logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topics: ['push.outcomes', 'push.gone'], fromBeginning: true });
  let seen = 0;
  let timer;
  const done = new Promise((resolve, reject) => {
    if (timeoutMs > 0) timer = setTimeout(() => reject(new Error(`${seen} of ${count} outcomes after ${timeoutMs} ms`)), timeoutMs);
    consumer.run({
      eachMessage: async ({ topic, partition, message }) => {
        let v;
        try {
          v = JSON.parse(message.value.toString());
        } catch {
          console.error(`skip ${topic}/${partition}@${message.offset}: malformed JSON`);
          return;
        }
        if (topic === 'push.gone') {
          console.log(`gone ${v.endpoint_hash} (event ${v.event_id}, status ${v.status}): delete this subscription`);
          return;
        }
        const err = outcomeError(v);
        if (err) {
          console.error(`skip ${topic}/${partition}@${message.offset}: ${err}`);
          return;
        }
        if (!v.id.startsWith(idPrefix)) return;
        seen++;
        console.log(`outcome ${v.id} ${v.outcome} reason=${v.reason} status=${v.status} attempts=${v.attempts} latency=${v.latency_ms}ms`);
        if (count > 0 && seen >= count) resolve();
      },
    }).catch(reject);
  });
  try {
    await done;
  } finally {
    clearTimeout(timer);
    await consumer.disconnect();
  }
}

main().catch((err) => {
  console.error('consumer:', err.message);
  process.exit(1);
});
