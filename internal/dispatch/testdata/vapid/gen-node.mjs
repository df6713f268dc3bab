// Writes node.json: VAPID key pairs as Node's crypto ECDH and the web-push
// package write them, with 32-, 31- and 30-byte scalars (a scalar's
// leading zero bytes are dropped by ECDH's getPrivateKey, one key in 256
// and one in 65,536; web-push pads them back to 32).
//
//   npm install --prefix /tmp/wp web-push@3.6.7
//   node gen-node.mjs /tmp/wp/node_modules/web-push > node.json
//
// Keys are searched for at random until one of each scalar length turns
// up, as they would in a fleet of apps; none is made up.
import crypto from 'node:crypto';
import { createRequire } from 'node:module';

const webpushPath = process.argv[2];
if (!webpushPath) {
  console.error('usage: node gen-node.mjs <path to the web-push package>');
  process.exit(2);
}
const require = createRequire(import.meta.url);
const webpush = require(webpushPath);
const version = require(webpushPath + '/package.json').version;

// significant is the scalar's length without its leading zero bytes.
function significant(buf) {
  let i = 0;
  while (i < buf.length && buf[i] === 0) i++;
  return buf.length - i;
}

// search calls gen until each of lengths has turned up once.
function search(lengths, gen, scalarOf) {
  const found = new Map();
  while (found.size < lengths.length) {
    const k = gen();
    const n = significant(scalarOf(k));
    if (lengths.includes(n) && !found.has(n)) found.set(n, k);
  }
  return lengths.map((n) => [n, found.get(n)]);
}

const rows = [];
const b64url = (s) => Buffer.from(s, 'base64url');

for (const [n, ecdh] of search([32, 31, 30], () => {
  const e = crypto.createECDH('prime256v1');
  e.generateKeys();
  return e;
}, (e) => e.getPrivateKey())) {
  rows.push({
    tool: `node ${process.version} crypto ECDH`,
    how: "ecdh.getPublicKey('base64url'), ecdh.getPrivateKey('base64url')",
    scalar_bytes: n,
    public_key: ecdh.getPublicKey('base64url'),
    private_key: ecdh.getPrivateKey('base64url'),
  });
  rows.push({
    tool: `node ${process.version} crypto ECDH`,
    how: "ecdh.getPublicKey('base64'), ecdh.getPrivateKey('base64')",
    scalar_bytes: n,
    public_key: ecdh.getPublicKey('base64'),
    private_key: ecdh.getPrivateKey('base64'),
  });
}

for (const [n, k] of search([32, 31, 30], () => webpush.generateVAPIDKeys(), (k) => b64url(k.privateKey))) {
  rows.push({
    tool: `web-push ${version}`,
    how: 'webpush.generateVAPIDKeys()',
    scalar_bytes: n,
    public_key: k.publicKey,
    private_key: k.privateKey,
  });
}

process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
