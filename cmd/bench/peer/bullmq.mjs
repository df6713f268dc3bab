// The BullMQ peer of the bench (cmd/bench, --peer bullmq): the events in a
// BullMQ queue on Redis, one worker sending each with web-push, as a Node
// service built on the usual stack would. It prints one JSON line of
// figures. Usage: node bullmq.mjs config.json
import { readFileSync } from 'node:fs';
import { Queue, Worker } from 'bullmq';
import webpush from 'web-push';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const connection = { host: '127.0.0.1', port: cfg.redis_port, maxRetriesPerRequest: null };
webpush.setVapidDetails(cfg.subject, cfg.public_key, cfg.private_key);

const events = cfg.events;
const n = events.length;
const queue = new Queue('push', { connection });
let completed = 0;
let failed = 0;
let firstError = '';
let finish;
const done = new Promise((resolve) => { finish = resolve; });
const worker = new Worker('push', async (job) => {
  const e = job.data;
  const res = await webpush.sendNotification(
    { endpoint: e.endpoint, keys: { p256dh: e.p256dh, auth: e.auth } },
    e.payload,
    { TTL: cfg.ttl, urgency: 'normal' },
  );
  return res.statusCode;
}, { connection, concurrency: cfg.concurrency, autorun: false });
worker.on('completed', () => {
  completed++;
  if (completed + failed === n) finish();
});
worker.on('failed', (_job, err) => {
  failed++;
  if (!firstError) firstError = String((err && (err.statusCode || err.message)) || err);
  if (completed + failed === n) finish();
});
await worker.waitUntilReady();

// Produced while the worker runs, as the bench produces to Kafka while
// the processor consumes.
const cpu0 = process.cpuUsage();
const start = process.hrtime.bigint();
worker.run();
const opts = { removeOnComplete: true, removeOnFail: true, attempts: 1 };
for (let i = 0; i < n; i += 1000) {
  await queue.addBulk(events.slice(i, i + 1000).map((e) => ({ name: 'push', data: e, opts })));
}
await done;
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({
  seconds, completed, failed, first_error: firstError,
  cpu_seconds: (cpu.user + cpu.system) / 1e6,
}));
await worker.close();
await queue.close();
process.exit(0);
