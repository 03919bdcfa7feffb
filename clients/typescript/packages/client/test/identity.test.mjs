// One implementation behind `import` and `require`: the ES module entry
// re-exports the CommonJS one, so a process that loads the package both ways
// (an ES module app on a CommonJS library, a test runner that transpiles)
// has one BallastClient, one BallastError — one Nest injection token. And an
// error made by another copy of the package (another version nested under a
// library) is still recognised, by its brand.

import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';

import * as esm from '@ballast/client';
import * as esmTesting from '@ballast/client/testing';

import { assertSameExports } from '../../../test-support/serve.mjs';

const require = createRequire(import.meta.url);
const cjs = require('@ballast/client');
const cjsTesting = require('@ballast/client/testing');

describe('import and require', () => {
  test('load different files: the ES module wrapper, the CommonJS implementation', () => {
    assert.match(import.meta.resolve('@ballast/client'), /dist\/esm\/index\.js$/);
    assert.match(require.resolve('@ballast/client'), /dist[\\/]cjs[\\/]index\.js$/);
  });

  test('give the same exports, every one the same object', () => {
    assertSameExports([esm, cjs], [esmTesting, cjsTesting]);
    assert.equal(esm.BallastClient, cjs.BallastClient, 'one class: one DI token');
  });

  test('an error thrown through one is an instance of the other', async () => {
    const client = new cjs.BallastClient({
      fetch: async () =>
        new Response('{"ballast":{"reason":"breaker_open","attempts":0}}', {
          status: 503,
          headers: { 'ballast-problem': 'breaker_open', 'retry-after': '3' },
        }),
    });
    const error = await client.read('sber', 'x').catch((e) => e);
    assert.ok(error instanceof esm.SystemUnavailableError);
    assert.ok(error instanceof esm.BallastError);
    assert.ok(client instanceof esm.BallastClient);
  });
});

describe('another copy of the package', () => {
  // A copy of the built package in a directory of its own: what npm leaves
  // when a library pins another version of @ballast/client.
  const root = mkdtempSync(join(tmpdir(), 'ballast-copy-'));
  const copy = join(root, 'node_modules', '@ballast', 'client');
  cpSync(dirname(dirname(dirname(require.resolve('@ballast/client')))), copy, {
    recursive: true,
    filter: (path) => !path.includes('node_modules'),
  });
  writeFileSync(join(root, 'package.json'), '{}');
  const other = createRequire(join(root, 'index.js'))('@ballast/client');
  after(() => rmSync(root, { recursive: true, force: true }));

  const problem = (reason) =>
    new other.BallastClient({
      fetch: async () =>
        new Response(JSON.stringify({ ballast: { reason, attempts: 0 } }), {
          status: 503,
          headers: { 'ballast-problem': reason },
        }),
    });

  test('has classes of its own', () => {
    assert.notEqual(other.BallastError, esm.BallastError);
  });

  test("its errors pass this copy's brand checks and instanceof", async () => {
    const unavailable = await problem('bulkhead_full').read('sber', 'x').catch((e) => e);
    assert.ok(esm.isBallastError(unavailable));
    assert.ok(esm.isSystemUnavailable(unavailable));
    assert.ok(unavailable instanceof esm.BallastError);
    assert.ok(unavailable instanceof esm.SystemUnavailableError);
    assert.ok(!esm.isGatewayUnreachable(unavailable));

    const queue = await problem('queue_unavailable').read('sber', 'x').catch((e) => e);
    assert.ok(esm.isBallastError(queue));
    assert.ok(!esm.isSystemUnavailable(queue));
    assert.ok(!(queue instanceof esm.SystemUnavailableError), 'a subclass is checked as itself');

    const refused = async () => {
      throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    };
    const down = await new other.BallastClient({ fetch: refused }).read('sber', 'x').catch((e) => e);
    assert.ok(esm.isGatewayUnreachable(down));
    assert.ok(down instanceof esm.GatewayUnreachableError);
    assert.ok(!esm.isBallastError(down));
  });

  test('a look-alike without the brand, and a subclass of your own, are checked the ordinary way', () => {
    const lookalike = Object.assign(new Error('x'), { name: 'BallastError', reason: 'breaker_open' });
    assert.ok(!esm.isBallastError(lookalike));
    assert.ok(!(lookalike instanceof esm.BallastError));

    class PaymentGatewayError extends esm.BallastError {}
    const ours = new PaymentGatewayError(503, { ballast: { reason: 'timeout', attempts: 1 } }, undefined);
    const theirs = new esm.BallastError(503, { ballast: { reason: 'timeout', attempts: 1 } }, undefined);
    assert.ok(ours instanceof PaymentGatewayError);
    assert.ok(ours instanceof esm.BallastError);
    assert.ok(!(theirs instanceof PaymentGatewayError), 'a BallastError is not every subclass of it');
  });
});
