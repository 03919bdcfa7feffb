// What the packages' suites share: a real `ballast serve` (the binary
// BALLAST_BIN names) on a test's fixture config, a local upstream that fails
// on cue, a port that refuses, patient waits, and the check that `import`
// and `require` of a package meet. (The example's end-to-end test starts its
// `ballast serve` with the launcher the packages ship, as a user's would.)

import assert from 'node:assert/strict';
import { createServer } from 'node:http';

import { startBallastServe } from '@ballast/client/testing';

/** How long anything in here may take before the test says what it waited for. */
export const PATIENCE_MS = 20_000;

/** A gateway token (`[gateway] token_env`): at least 16 bytes. */
export const TOKEN = 'test-token-0123456789abcdef';

/** An upstream answer: status, body, headers. */
export function reply(status, body = '', headers = {}) {
  return { status, body, headers };
}

/** The upstream is busy: 503. */
export function busy() {
  return reply(503, 'busy');
}

/**
 * An HTTP upstream on a free loopback port. Each path answers as the test
 * that uses it says: `on(path, answer)`, where `answer(n, request)` gets how
 * many requests to the path came so far, this one included, and returns a
 * `reply(…)` or `'drop'` (the request is read, then the connection closed
 * without an answer). Every request is recorded with the status it got.
 */
export async function startUpstream() {
  const answers = new Map();
  const requests = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const path = new URL(req.url, 'http://upstream').pathname;
      const seen = {
        path,
        url: req.url,
        method: req.method,
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      };
      requests.push(seen);
      const count = requests.filter((r) => r.path === path).length;
      const answer = answers.get(path)?.(count, seen) ?? reply(404, 'no such path');
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
    port: server.address().port,
    on: (path, answer) => answers.set(path, answer),
    seen: (path) => requests.filter((r) => r.path === path),
    stop: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * `ballast serve` from BALLAST_BIN on the config in `file` (a path or file
 * URL: the test's fixture), in which `{dir}` stands for a fresh temp dir (the
 * SQLite queue goes there) and any other `{name}` for `values[name]`: the
 * packages' own launcher (`startBallastServe` of `@ballast/client/testing`),
 * with the fixture's `[gateway] token_env`, `BALLAST_TEST_GATEWAY_TOKEN`,
 * given {@link TOKEN}. Resolves once both listeners' addresses are printed;
 * killed by `stop()` or, at the latest, when this process exits, and its
 * stderr printed if a test failed.
 */
export async function startBallast(file, values = {}) {
  if (!process.env.BALLAST_BIN) {
    throw new Error(
      'BALLAST_BIN is not set: point it at the ballast binary (cargo build -p ballast-cli: target/debug/ballast)',
    );
  }
  const served = await startBallastServe(file, {
    values,
    env: { BALLAST_TEST_GATEWAY_TOKEN: TOKEN },
    startupTimeoutMs: PATIENCE_MS,
  });
  return { admin: served.admin, gateway: served.gateway, stop: served.stop };
}

/** A port nothing listens on now, on the loopback: a receiver's, once it listens. */
export async function freePort() {
  const server = createServer();
  await new Promise((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A loopback port nothing listens on: BALLAST_TEST_REFUSING_PORT (a port the
 * Rust harness holds bound and never listens on, so no one else can be given
 * it), else a {@link freePort}, which a listener started afterwards may be
 * given.
 */
export async function refusingPort() {
  const held = Number(process.env.BALLAST_TEST_REFUSING_PORT);
  if (Number.isInteger(held) && held > 0) return held;
  return freePort();
}

/**
 * What `check` returns once it is truthy, polling every 50 ms for up to
 * {@link PATIENCE_MS}.
 */
export async function eventually(what, check) {
  const deadline = Date.now() + PATIENCE_MS;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The error `promise` rejects with; fails if it resolves. */
export async function rejection(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  return assert.fail('expected the call to throw');
}

/**
 * Fails unless each `[imported, required]` pair, one entry point of a package
 * as `import` and as `require` load it, has the same exports, every one the
 * same object: a process that loads the package both ways has one of each.
 */
export function assertSameExports(...pairs) {
  for (const [imported, required] of pairs) {
    const names = Object.keys(imported).sort();
    assert.deepEqual(names, Object.keys(required).sort());
    for (const name of names) assert.equal(imported[name], required[name], name);
  }
}
