// What the packages' suites and the example's end-to-end test share: a real
// `ballast serve` (the binary BALLAST_BIN names) on a test's fixture config,
// a local upstream that fails on cue, and patient waits.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

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
 * SQLite queue goes there) and any other `{name}` for `values[name]`. The
 * fixture's `[gateway] token_env` is to be `BALLAST_TEST_GATEWAY_TOKEN`, which
 * is given {@link TOKEN}. Resolves once both listeners' addresses are printed.
 * The process is killed by `stop()` or, at the latest, when this process
 * exits; then the temp dir is removed, and its stderr printed if a test
 * failed.
 */
export async function startBallast(file, values = {}) {
  const bin = process.env.BALLAST_BIN;
  if (!bin) {
    throw new Error(
      'BALLAST_BIN is not set: point it at the ballast binary (cargo build -p ballast-cli: target/debug/ballast)',
    );
  }
  const dir = mkdtempSync(join(tmpdir(), 'ballast-ts-'));
  const config = join(dir, 'ballast.toml');
  writeFileSync(config, fillIn(readFileSync(file, 'utf8'), { ...values, dir }, file));
  const child = spawn(bin, ['serve', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, BALLAST_TEST_GATEWAY_TOKEN: TOKEN },
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (text) => {
    stderr = (stderr + text).slice(-64 * 1024);
  });
  process.once('exit', (code) => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    if (code) process.stderr.write(`--- ballast serve's stderr:\n${stderr}\n`);
  });

  const { admin, gateway } = await new Promise((resolve, reject) => {
    const found = {};
    const fail = (why) => {
      clearTimeout(timer);
      reject(new Error(`ballast serve did not start: ${why}\n--- its stderr:\n${stderr}`));
    };
    const timer = setTimeout(() => fail(`no addresses within ${PATIENCE_MS} ms`), PATIENCE_MS);
    child.once('error', (e) => fail(`${bin}: ${e.message}`));
    child.once('exit', (code, signal) => fail(`it exited (${signal ?? code})`));
    createInterface({ input: child.stdout }).on('line', (line) => {
      found.admin ??= /^ballast serve: listening on (http:\/\/\S+)/.exec(line)?.[1];
      found.gateway ??= /^ballast serve: gateway on (http:\/\/\S+)/.exec(line)?.[1];
      if (found.admin && found.gateway) {
        clearTimeout(timer);
        resolve(found);
      }
    });
  });

  return {
    admin,
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

/** `text` with each `{name}` in it replaced by `values[name]`; `file` is named if one has no value. */
function fillIn(text, values, file) {
  return text.replace(/\{(\w+)\}/g, (_, name) => {
    if (!Object.hasOwn(values, name)) throw new Error(`${file}: no value for {${name}}`);
    return String(values[name]);
  });
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
