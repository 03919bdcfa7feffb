// The caller's trace context reaches the gateway as `traceparent` when
// @opentelemetry/api is installed and a span is active — and nothing is
// added, or needed, when it is not installed.

import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';

import { ROOT_CONTEXT, TraceFlags, context, propagation, trace } from '@opentelemetry/api';

import { createBallastClient } from '@ballast/client';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';

/** A local "gateway" that records the headers of every request and answers 200. */
async function recorder() {
  const seen = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume().on('end', () => res.end('{}'));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    stop: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** The smallest context manager there is: the active context in an AsyncLocalStorage. */
class StorageContextManager {
  #storage = new AsyncLocalStorage();
  active() {
    return this.#storage.getStore() ?? ROOT_CONTEXT;
  }
  with(ctx, fn, thisArg, ...args) {
    return this.#storage.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind(_ctx, target) {
    return target;
  }
  enable() {
    return this;
  }
  disable() {
    this.#storage.disable();
    return this;
  }
}

const spanContext = { traceId: TRACE_ID, spanId: SPAN_ID, traceFlags: TraceFlags.SAMPLED, isRemote: false };

describe('with @opentelemetry/api installed', () => {
  let gateway;
  before(async () => {
    gateway = await recorder();
    context.setGlobalContextManager(new StorageContextManager());
  });
  after(async () => {
    propagation.disable();
    context.disable();
    await gateway.stop();
  });

  test('no active span: no traceparent', async () => {
    await createBallastClient({ baseUrl: gateway.url }).read('pay', 'x');
    assert.equal(gateway.seen.at(-1).traceparent, undefined);
  });

  test('an active span goes as a W3C traceparent, without a propagator registered', async () => {
    const ballast = createBallastClient({ baseUrl: gateway.url });
    await context.with(trace.setSpanContext(ROOT_CONTEXT, spanContext), () => ballast.read('pay', 'x'));
    assert.equal(gateway.seen.at(-1).traceparent, `00-${TRACE_ID}-${SPAN_ID}-01`);
  });

  test("a registered propagator writes its headers, and a call's own traceparent wins", async () => {
    propagation.setGlobalPropagator({
      inject(ctx, carrier, setter) {
        const span = trace.getSpanContext(ctx);
        if (!span) return;
        setter.set(carrier, 'traceparent', `00-${span.traceId}-${span.spanId}-00`);
        setter.set(carrier, 'tracestate', 'vendor=1');
      },
      extract: (ctx) => ctx,
      fields: () => ['traceparent', 'tracestate'],
    });
    const ballast = createBallastClient({ baseUrl: gateway.url });
    await context.with(trace.setSpanContext(ROOT_CONTEXT, spanContext), async () => {
      await ballast.write('pay', 'x', { key: 'k', json: {} });
      await ballast.read('pay', 'x', {
        headers: { traceparent: '00-11111111111111111111111111111111-2222222222222222-01' },
      });
    });
    const [propagated, own] = gateway.seen.slice(-2);
    assert.equal(propagated.traceparent, `00-${TRACE_ID}-${SPAN_ID}-00`);
    assert.equal(propagated.tracestate, 'vendor=1');
    assert.equal(own.traceparent, '00-11111111111111111111111111111111-2222222222222222-01');
    assert.equal(own.tracestate, undefined);
  });
});

describe('without @opentelemetry/api', () => {
  // The built package alone in a directory of its own: nothing there, or
  // above it, can resolve @opentelemetry/api.
  let dir;
  let gateway;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ballast-client-alone-'));
    const home = join(dir, 'node_modules', '@ballast', 'client');
    mkdirSync(home, { recursive: true });
    cpSync(new URL('../package.json', import.meta.url), join(home, 'package.json'));
    cpSync(new URL('../dist', import.meta.url), join(home, 'dist'), { recursive: true });
    gateway = await recorder();
  });
  after(async () => {
    await gateway.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [format, file, load] of [
    ['ES module', 'call.mjs', "const { createBallastClient } = await import('@ballast/client');"],
    ['CommonJS', 'call.cjs', "const { createBallastClient } = require('@ballast/client');"],
  ]) {
    test(`the ${format} build calls as usual and sends no traceparent`, async () => {
      writeFileSync(
        join(dir, file),
        `${format === 'CommonJS' ? '(async () => {' : ''}
${load}
let missing = false;
try { ${format === 'CommonJS' ? 'require.resolve' : 'await import'}('@opentelemetry/api'); } catch { missing = true; }
if (!missing) throw new Error('@opentelemetry/api is reachable from here');
const response = await createBallastClient({ baseUrl: process.argv[2] }).read('pay', 'x');
process.stdout.write(String(response.status));
${format === 'CommonJS' ? '})().catch((e) => { console.error(e); process.exitCode = 1; });' : ''}`,
      );
      const { stdout } = await promisify(execFile)(process.execPath, [join(dir, file), gateway.url]);
      assert.equal(stdout, '200');
      assert.equal(gateway.seen.at(-1).traceparent, undefined);
    });
  }
});
