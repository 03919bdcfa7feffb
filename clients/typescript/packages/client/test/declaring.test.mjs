// A call that says one thing and does another is refused before anything is
// sent. TypeScript refuses most of these at compile time (types.ts); these
// are the checks a JavaScript caller meets at run time.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { createBallastClient } from '@ballast/client';

describe('declaring a call', () => {
  const refuse = () => assert.fail('nothing may be sent');
  const ballast = createBallastClient({ fetch: refuse });

  test('a call that says one thing and does another is refused unsent', async () => {
    await assert.rejects(ballast.read('pay', 'x', { method: 'POST' }), /not a read/);
    await assert.rejects(ballast.read('pay', 'x', { body: 'a' }), /sends no body/);
    await assert.rejects(ballast.write('pay', 'x', { json: {} }), /needs \{ key \}/);
    await assert.rejects(ballast.write('pay', 'x'), /needs \{ key \}/);
    await assert.rejects(ballast.write('pay', 'x', { key: 'k', method: 'GET' }), /is a read/);
    await assert.rejects(ballast.write('pay', 'x', { key: 'k', method: 'head' }), /HEAD is a read/);
    await assert.rejects(ballast.writeOnce('pay', 'x', { headers: { 'Idempotency-Key': 'k' } }), /\{ key \}/);
    await assert.rejects(ballast.writeOnce('pay', 'x', { key: 'k' }), /sends no key/);
    await assert.rejects(ballast.writeOrDefer('pay', 'x', { key: '' }), /needs \{ key \}/);
    await assert.rejects(ballast.write('pay', 'x', { key: 'k', body: 'a', json: {} }), /either body or json/);
    await assert.rejects(ballast.read('', 'x'), /name the system/);
  });

  test('a path cannot leave its system', async () => {
    for (const path of ['../sms/messages', 'orders/./1', 'orders/%2e%2E/admin', 'a\\..\\b', '..?x=1']) {
      await assert.rejects(ballast.read('pay', path), /dot segment/, path);
    }
  });

  test('what is sent: the URL, the method, the headers of the call and of the gateway', async () => {
    const sent = [];
    const recording = createBallastClient({
      baseUrl: 'http://gateway.test:9465/',
      token: 'gateway-token-0123456789',
      fetch: async (url, init) => {
        sent.push({ url, init });
        return new Response('{}', { status: 200 });
      },
    });

    await recording.write('sber bank', '/payments/register?x=1', {
      key: 'k-1',
      method: 'put',
      json: { amount: 1 },
      headers: { authorization: 'Bearer theirs', 'x-request-id': 'r' },
    });
    await recording.writeOrDefer('pay', 'p', { key: 'k-2', body: 'raw' });

    const [write, deferrable] = sent;
    assert.equal(write.url, 'http://gateway.test:9465/call/sber%20bank/payments/register?x=1');
    assert.equal(write.init.method, 'PUT');
    assert.equal(write.init.redirect, 'manual', 'a redirect is an answer, never followed');
    assert.equal(write.init.body, '{"amount":1}');
    const headers = write.init.headers;
    assert.equal(headers.get('idempotency-key'), 'k-1');
    assert.equal(headers.get('content-type'), 'application/json');
    assert.equal(
      headers.get('authorization'),
      'Bearer gateway-token-0123456789',
      "the gateway's token replaces the call's",
    );
    assert.equal(headers.get('x-request-id'), 'r');
    assert.equal(deferrable.init.method, 'POST');
    assert.equal(deferrable.init.headers.get('prefer'), 'respond-async');
    assert.equal(deferrable.init.headers.get('content-type'), null, 'a raw body keeps its own type');
  });

  test('a system client sends what the client sends, to its system only', async () => {
    const sent = [];
    const recording = createBallastClient({
      baseUrl: 'http://gateway.test',
      fetch: async (url, init) => {
        sent.push({ url, init });
        return new Response('{}', { status: 200 });
      },
    });
    const sber = recording.system('sber');

    await sber.read('orders/42', { headers: { 'x-request-id': 'r' } });
    await sber.write('payments', { key: 'k-1', json: {} });
    await sber.writeOrDefer('payments', { key: 'k-2', json: {}, callback: 'https://shop.example/cb' });
    await sber.writeOnce('receipts');

    assert.equal(sber.name, 'sber');
    assert.deepEqual(
      sent.map(({ url, init }) => [init.method, url, init.headers.get('idempotency-key')]),
      [
        ['GET', 'http://gateway.test/call/sber/orders/42', null],
        ['POST', 'http://gateway.test/call/sber/payments', 'k-1'],
        ['POST', 'http://gateway.test/call/sber/payments', 'k-2'],
        ['POST', 'http://gateway.test/call/sber/receipts', null],
      ],
    );
    assert.equal(sent[2].init.headers.get('ballast-callback'), 'https://shop.example/cb');
    await assert.rejects(sber.read('../sms/messages'), /dot segment/, 'bound to its system: no way out');
    assert.throws(() => recording.system(''), /name the system/);
  });

  test("an upstream's own 202 is its answer, not a hand-over", async () => {
    const upstream202 = createBallastClient({ fetch: async () => new Response('{"queued":true}', { status: 202 }) });

    const handover = await upstream202.writeOrDefer('pay', 'p', { key: 'k' });

    assert.equal(handover.deferred, false);
    assert.equal(handover.response.status, 202);
  });
});
