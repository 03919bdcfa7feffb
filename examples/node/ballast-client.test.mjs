// The client against a real `ballast serve` and a local upstream that fails
// on cue: what a service written for Node sees through the gateway.
//
//   BALLAST_BIN=target/debug/ballast node --test examples/node/
//
// (`cargo test -p ballast-cli --test node` builds the binary and runs this.)

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';

import { BallastError, attemptsOf, createBallastClient, keyFor } from './ballast-client.mjs';

/** How long anything in here may take before the test says what it waited for. */
const PATIENCE_MS = 20_000;

describe('keys', () => {
  test('keyFor gives the key the Rust IdempotencyKey::v5 gives', () => {
    // IdempotencyKey::v5("order-1", "pay") and ::v5("заказ-7", "pay") in Rust.
    assert.equal(keyFor('order-1', 'pay'), 'e1febc6a-55bf-585b-bbbb-1a63d108c586');
    assert.equal(keyFor('заказ-7', 'pay'), '9e1699bc-d10d-5dd1-a9fc-42c959a3b0ca');
    assert.equal(keyFor('order-1', 'pay'), keyFor('order-1', 'pay'), 'deterministic');
    assert.notEqual(keyFor('a/b', 'c'), keyFor('a', 'b/c'));
    assert.equal(keyFor(7, 'pay'), keyFor('7', 'pay'));
  });
});

describe('declaring a call', () => {
  const refuse = () => assert.fail('nothing may be sent');
  const ballast = createBallastClient({ fetch: refuse });

  test('a call that says one thing and does another is refused unsent', async () => {
    await assert.rejects(ballast.read('pay', 'x', { method: 'POST' }), /not a read/);
    await assert.rejects(ballast.write('pay', 'x', { json: {} }), /needs \{ key \}/);
    await assert.rejects(ballast.write('pay', 'x', { key: 'k', method: 'GET' }), /is a read/);
    await assert.rejects(ballast.writeOnce('pay', 'x', { headers: { 'Idempotency-Key': 'k' } }), /\{ key \}/);
    await assert.rejects(ballast.writeOrDefer('pay', 'x', { key: '' }), /needs \{ key \}/);
    await assert.rejects(ballast.write('pay', 'x', { key: 'k', body: 'a', json: {} }), /either body or json/);
  });
});

describe('through a real ballast serve', { timeout: 3 * PATIENCE_MS }, () => {
  /** @type {Awaited<ReturnType<typeof startUpstream>>} */
  let upstream;
  /** @type {Awaited<ReturnType<typeof startBallast>>} */
  let served;
  /** @type {ReturnType<typeof createBallastClient>} */
  let ballast;

  before(async () => {
    upstream = await startUpstream();
    served = await startBallast(upstream.port);
    ballast = createBallastClient({ baseUrl: served.gateway });
  });

  after(async () => {
    await served?.stop();
    await upstream?.stop();
  });

  test('a read is retried through a 503 and the answer comes back as is', async () => {
    upstream.on('/api/orders/7', (n) => (n === 1 ? busy() : reply(200, '{"id":7}', { 'x-up': '1' })));

    const response = await ballast.read('pay', 'orders/7?expand=items', { headers: { 'x-request-id': 'r-1' } });

    assert.equal(response.status, 200);
    assert.equal(attemptsOf(response), 2);
    assert.equal(response.headers.get('x-up'), '1');
    assert.deepEqual(await response.json(), { id: 7 });
    const seen = upstream.seen('/api/orders/7');
    assert.equal(seen.length, 2);
    for (const s of seen) {
      assert.equal(s.url, '/api/orders/7?expand=items');
      assert.equal(s.headers['x-request-id'], 'r-1');
    }
  });

  test('an unkeyed POST reaches the upstream once when its answer is lost', async () => {
    upstream.on('/api/notes', () => 'drop');

    const error = await rejection(ballast.writeOnce('pay', 'notes', { json: { text: 'hello' } }));

    assert.ok(error instanceof BallastError, String(error));
    assert.equal(error.reason, 'transport');
    assert.equal(error.status, 502);
    assert.equal(error.attempts, 1);
    assert.equal(error.rule, 'R-RES-RE-X1');
    const seen = upstream.seen('/api/notes');
    assert.equal(seen.length, 1, 'sent exactly once');
    assert.equal(seen[0].body, '{"text":"hello"}');
    assert.equal(seen[0].headers['idempotency-key'], undefined);
  });

  test('a keyed POST is retried with the same key through a 503 and a lost answer', async () => {
    const key = keyFor('order-1', 'pay');
    upstream.on('/api/payments/keyed', (n) => [busy(), 'drop'][n - 1] ?? reply(201, '{"paid":true}'));

    const response = await ballast.write('pay', 'payments/keyed', { key, json: { amount: 100 } });

    assert.equal(response.status, 201);
    assert.equal(attemptsOf(response), 3);
    const seen = upstream.seen('/api/payments/keyed');
    assert.deepEqual(
      seen.map((s) => [s.method, s.headers['idempotency-key'], s.body]),
      Array(3).fill(['POST', key, '{"amount":100}']),
    );
  });

  test('a deferred keyed write gets 202, and its task completes once the upstream recovers', async () => {
    const key = randomUUID(); // once per user action, stored with the order
    let down = true;
    upstream.on('/api/payments/deferred', () => (down ? busy() : reply(201, '{"paid":true}')));

    const handover = await ballast.writeOrDefer('pay', 'payments/deferred', { key, json: { amount: 250 } });

    assert.equal(handover.deferred, true, 'deferred after the in-memory attempts');
    assert.equal(handover.attempts, 3);
    assert.equal(handover.location, `/tasks/${handover.taskId}`);
    const pending = await ballast.task(handover.taskId);
    assert.equal(pending.system, 'pay');
    assert.ok(['pending', 'running'].includes(pending.state), JSON.stringify(pending));

    down = false;
    const done = await eventually('the deferred write is delivered', async () => {
      const task = await ballast.task(handover.taskId);
      return task.state === 'completed' && task;
    });
    assert.equal(done.task_id, handover.taskId);
    const seen = upstream.seen('/api/payments/deferred');
    assert.ok(seen.length >= 4, `3 attempts in memory, then the queue's: ${seen.length}`);
    assert.ok(seen.every((s) => s.headers['idempotency-key'] === key), 'the same key on every attempt');
    assert.equal(seen.filter((s) => s.status === 201).length, 1, 'applied once');
  });

  test("the gateway's own answers throw; the upstream's answers, problems included, do not", async () => {
    const unknown = await rejection(ballast.read('nope', 'orders/1'));
    assert.ok(unknown instanceof BallastError, String(unknown));
    assert.equal(unknown.reason, 'unknown_system');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.attempts, 0);
    assert.match(unknown.problem.detail, /pay/, 'names the systems there are');

    const badKey = await rejection(ballast.write('pay', 'payments/bad', { key: 'two words' }));
    assert.equal(badKey.reason, 'bad_key');
    assert.equal(badKey.rule, 'R-RES-RE-1');

    const noTask = await rejection(ballast.task(987654));
    assert.equal(noTask.reason, 'not_found');

    upstream.on('/api/payments/declined', () =>
      reply(422, '{"title":"card declined"}', { 'content-type': 'application/problem+json' }),
    );
    const declined = await ballast.write('pay', 'payments/declined', { key: randomUUID(), body: '{}' });
    assert.equal(declined.status, 422);
    assert.equal(attemptsOf(declined), 1, 'a 4xx is not retried');
    assert.deepEqual(await declined.json(), { title: 'card declined' });
    assert.equal(upstream.seen('/api/payments/bad').length, 0, 'a bad key sends nothing');
  });
});

/** An upstream answer: status, body, headers. */
function reply(status, body, headers = {}) {
  return { status, body, headers };
}

/** The upstream is busy: 503. */
function busy() {
  return reply(503, 'busy');
}

/**
 * An HTTP upstream on a free loopback port. Each path answers as the test
 * that uses it says: `on(path, answer)`, where `answer(n)` gets how many
 * requests to the path came so far, this one included, and returns a
 * `reply(…)` or `'drop'` (the request is read, then the connection closed
 * without an answer). Every request is recorded with the status it got.
 */
async function startUpstream() {
  /** @type {Map<string, (n: number) => ReturnType<typeof reply> | 'drop'>} */
  const answers = new Map();
  /** @type {Array<{ path: string, url: string, method: string, headers: import('node:http').IncomingHttpHeaders, body: string, status?: number }>} */
  const requests = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const path = new URL(req.url, 'http://upstream').pathname;
      const seen = { path, url: req.url, method: req.method, headers: req.headers, body: Buffer.concat(chunks).toString() };
      requests.push(seen);
      const answer = answers.get(path)?.(requests.filter((r) => r.path === path).length) ?? reply(404, 'no such path');
      if (answer === 'drop') {
        req.socket.destroy();
        return;
      }
      seen.status = answer.status;
      // One request per connection: no pooled connection the upstream might
      // close just as the gateway reuses it.
      res.writeHead(answer.status, { connection: 'close', ...answer.headers });
      res.end(answer.body);
    });
  });
  await new Promise((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  return {
    port: /** @type {import('node:net').AddressInfo} */ (server.address()).port,
    on: (path, answer) => answers.set(path, answer),
    seen: (path) => requests.filter((r) => r.path === path),
    stop: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * `ballast serve` from `BALLAST_BIN` on a configuration in a temp dir: a
 * SQLite queue there, both listeners on free loopback ports, and one system,
 * `pay`, at the upstream — keyed writes deduplicated, 3 attempts 100–200 ms
 * apart, an in-memory window under 5 s (R-RES-RE-4). Resolves once the
 * gateway's address is printed. The process is killed by `stop()` or, at the
 * latest, when this process exits; then the temp dir is removed, and its
 * stderr printed if a test failed.
 *
 * @param {number} upstreamPort
 */
async function startBallast(upstreamPort) {
  const bin = process.env.BALLAST_BIN;
  if (!bin) {
    throw new Error('BALLAST_BIN is not set: point it at the ballast binary (cargo build -p ballast-cli: target/debug/ballast)');
  }
  const dir = mkdtempSync(join(tmpdir(), 'ballast-node-'));
  const config = join(dir, 'ballast.toml');
  writeFileSync(
    config,
    `[queue]
url = "sqlite://${join(dir, 'queue.db')}"
poll_interval = "100ms"

[serve]
listen = "127.0.0.1:0"

[gateway]
listen = "127.0.0.1:0"

[systems.pay]
base_url = "http://127.0.0.1:${upstreamPort}/api/"
dedupes_by_key = true
key_ttl = "7d"

[systems.pay.retry]
max_attempts = 3
first_delay = "100ms"
max_delay = "200ms"

[systems.pay.timeout]
attempt = "1500ms"
`,
  );
  const child = spawn(bin, ['serve', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (text) => {
    stderr = (stderr + text).slice(-64 * 1024);
  });
  process.once('exit', (code) => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    if (code) process.stderr.write(`--- ballast serve's stderr:\n${stderr}\n`);
  });

  const gateway = await new Promise((resolve, reject) => {
    const fail = (why) => {
      clearTimeout(timer);
      reject(new Error(`ballast serve did not start: ${why}\n--- its stderr:\n${stderr}`));
    };
    const timer = setTimeout(() => fail(`no gateway address within ${PATIENCE_MS} ms`), PATIENCE_MS);
    child.once('error', (e) => fail(`${bin}: ${e.message}`));
    child.once('exit', (code, signal) => fail(`it exited (${signal ?? code})`));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const found = /^ballast serve: gateway on (http:\/\/\S+)/.exec(line);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    });
  });

  return {
    gateway,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
}

/**
 * What `check` returns once it is truthy, polling every 50 ms for up to
 * {@link PATIENCE_MS}.
 *
 * @template T
 * @param {string} what
 * @param {() => Promise<T>} check
 * @returns {Promise<T>}
 */
async function eventually(what, check) {
  const deadline = Date.now() + PATIENCE_MS;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * The error `promise` rejects with; fails if it resolves.
 *
 * @param {Promise<unknown>} promise
 * @returns {Promise<any>}
 */
async function rejection(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return assert.fail('expected the call to throw');
}
