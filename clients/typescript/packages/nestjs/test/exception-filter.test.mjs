// The gateway's errors as the HTTP answers they mean, not Nest's
// `{"statusCode":500,"message":"Internal server error"}`: toHttpException's
// table for every reason the gateway gives, and BallastExceptionFilter over
// HTTP (a test platform on node:http) — the status, Retry-After, the body —
// registered through DI (APP_FILTER) or by hand, leaving other exceptions to
// Nest.

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Controller, Get, HttpException, HttpStatus, Module } from '@nestjs/common';
import { APP_FILTER, HttpAdapterHost, NestFactory } from '@nestjs/core';

import {
  BALLAST_HTTP_STATUS,
  BallastError,
  BallastExceptionFilter,
  BallastHttpException,
  GatewayUnreachableError,
  REASONS,
  SystemUnavailableError,
  isBallastError,
  toHttpException,
} from '@ballast/nestjs';

import { NodeHttpAdapter } from './node-http-adapter.mjs';

/** What each reason of the gateway becomes: the table the README gives. */
const EXPECTED = {
  breaker_open: 503,
  bulkhead_full: 503,
  budget_exhausted: 503,
  rate_limited: 503,
  queue_unavailable: 503,
  too_many_waiters: 503,
  token_throttled: 503,
  timeout: 504,
  transport: 502,
  internal: 502,
  tls_expired: 502,
  answer_too_large: 502,
  proxy_refused: 502,
  token_unavailable: 503,
  draining: 503,
  tls_untrusted: 500,
  tls_name_mismatch: 500,
  tls_client_cert_refused: 500,
  tls_protocol: 500,
  proxy_auth_required: 500,
  token_refused: 500,
  sequence_pending: 409,
  not_found: 404,
  unknown_system: 500,
  bad_key: 500,
  key_required: 500,
  key_reused: 422,
  unrouted: 500,
  method_not_allowed: 500,
  bad_path: 500,
  bad_request: 500,
  bad_callback: 500,
  seal_key_missing: 500,
  loop_detected: 500,
  body_timeout: 500,
  too_large: 500,
  cross_site: 500,
  unauthorized: 500,
  unknown_host: 500,
};

const UNAVAILABLE = new Set(['breaker_open', 'bulkhead_full', 'budget_exhausted', 'rate_limited']);

/** The error the client throws for `reason`, as the gateway would answer it. */
function problem(reason, options = {}) {
  const { rule, sent } = options;
  const retryAfter = 'retryAfter' in options ? options.retryAfter : 12;
  const document = { ballast: { reason, attempts: reason === 'transport' ? 3 : 0, ...(rule && { rule }), ...(sent !== undefined && { sent }) } };
  const Class = UNAVAILABLE.has(reason) ? SystemUnavailableError : BallastError;
  return new Class(503, document, retryAfter, { system: 'sber' });
}

describe('toHttpException', () => {
  test('maps every reason of the gateway, and no other', () => {
    assert.deepEqual([...REASONS].sort(), Object.keys(EXPECTED).sort(), 'the table covers every reason');
    for (const reason of REASONS) {
      const mapped = toHttpException(problem(reason));
      assert.ok(mapped instanceof BallastHttpException && mapped instanceof HttpException, reason);
      assert.equal(mapped.getStatus(), EXPECTED[reason], reason);
      assert.equal(BALLAST_HTTP_STATUS[reason], EXPECTED[reason], reason);
      assert.equal(mapped.reason, reason);
      assert.equal(mapped.programmingError, EXPECTED[reason] === 500, reason);
      const body = mapped.getResponse();
      assert.equal(body.statusCode, EXPECTED[reason]);
      assert.equal(body.reason, reason);
      assert.equal(body.system, 'sber');
      assert.match(body.message, new RegExp(`\\(${reason}`), `${reason}: the message names the reason`);
      assert.ok(isBallastError(mapped.cause), 'the error is its cause');
      // Retry-After: on the 503s that say when asking again helps.
      assert.deepEqual(mapped.headers, EXPECTED[reason] === 503 ? { 'Retry-After': '12' } : {}, reason);
    }
  });

  test('says what the programming error is, with its rule', () => {
    const missing = toHttpException(problem('key_required', { rule: 'R-RES-RE-1' })).getResponse();
    assert.match(missing.message, /without an Idempotency-Key: make it with write\(…, \{ key \}\) \(key_required, R-RES-RE-1\)/);
    assert.equal(missing.rule, 'R-RES-RE-1');
    assert.equal(missing.error, 'Internal Server Error');
    const misspelt = toHttpException(problem('unknown_system')).getResponse();
    assert.match(misspelt.message, /no system "sber" in ballast\.toml: a misspelt name/);
  });

  test('a system unavailable: 503, when to ask again', () => {
    const body = toHttpException(problem('breaker_open', { retryAfter: 30 })).getResponse();
    assert.deepEqual(body, {
      statusCode: 503,
      message: 'sber is unavailable now: ask again in 30 s (breaker_open)',
      error: 'Service Unavailable',
      reason: 'breaker_open',
      system: 'sber',
      retryAfter: 30,
    });
    assert.deepEqual(toHttpException(problem('bulkhead_full', { retryAfter: undefined })).headers, {});
  });

  test('a transport failure says whether the request may have arrived', () => {
    const maybe = toHttpException(problem('transport', { sent: true })).getResponse();
    const never = toHttpException(problem('transport', { sent: false })).getResponse();
    assert.deepEqual([maybe.statusCode, maybe.sent], [502, true]);
    assert.match(maybe.message, /may have arrived/);
    assert.deepEqual([never.statusCode, never.sent], [502, false]);
    assert.match(never.message, /nothing was sent/);
  });

  test('the gateway unreachable: 503, whether the outcome is unknown', () => {
    const cut = new GatewayUnreachableError(
      { method: 'POST', url: 'http://gw/call/sber/p', write: true, keyed: true, system: 'sber' },
      Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }),
    );
    const mapped = toHttpException(cut);
    assert.equal(mapped.getStatus(), 503);
    assert.equal(BALLAST_HTTP_STATUS.gateway_unreachable, 503);
    assert.deepEqual(mapped.getResponse(), {
      statusCode: 503,
      message: 'the ballast gateway did not answer: the outcome of the write is unknown',
      error: 'Service Unavailable',
      reason: 'gateway_unreachable',
      sent: true,
      outcomeUnknown: true,
      system: 'sber',
    });
  });

  test('anything else is not its business', () => {
    for (const other of [new Error('x'), new TypeError('a bug'), undefined, 'text', { reason: 'breaker_open' }]) {
      assert.equal(toHttpException(other), undefined);
    }
  });
});

describe('BallastExceptionFilter over HTTP', () => {
  /** What the next request's handler throws. */
  let next;
  class Thrower {
    fail() {
      throw next;
    }
  }
  Get('fail')(Thrower.prototype, 'fail', Object.getOwnPropertyDescriptor(Thrower.prototype, 'fail'));
  Controller()(Thrower);

  const apps = [];
  async function serve(register) {
    class AppModule {}
    Module({ controllers: [Thrower], providers: register === 'di' ? [{ provide: APP_FILTER, useClass: BallastExceptionFilter }] : [] })(
      AppModule,
    );
    const app = await NestFactory.create(AppModule, new NodeHttpAdapter(), { logger: false, abortOnError: false });
    if (register === 'by hand') app.useGlobalFilters(new BallastExceptionFilter(app.get(HttpAdapterHost).httpAdapter));
    await app.listen(0, '127.0.0.1');
    apps.push(app);
    const url = `${await app.getUrl()}/fail`;
    return async (error) => {
      next = error;
      const response = await fetch(url);
      return { status: response.status, retryAfter: response.headers.get('retry-after'), body: await response.json() };
    };
  }
  after(async () => {
    while (apps.length) await apps.pop().close();
  });

  for (const register of ['di', 'by hand']) {
    describe(`registered ${register === 'di' ? 'as APP_FILTER' : 'with useGlobalFilters'}`, () => {
      let get;
      before(async () => {
        get = await serve(register);
      });

      test('an open breaker: 503 with Retry-After, not "Internal server error"', async () => {
        const answer = await get(problem('breaker_open', { retryAfter: 7 }));
        assert.deepEqual(answer, {
          status: 503,
          retryAfter: '7',
          body: {
            statusCode: 503,
            message: 'sber is unavailable now: ask again in 7 s (breaker_open)',
            error: 'Service Unavailable',
            reason: 'breaker_open',
            system: 'sber',
            retryAfter: 7,
          },
        });
      });

      test('every reason with its status', async () => {
        for (const reason of REASONS) {
          const { status, retryAfter } = await get(problem(reason, { retryAfter: 3 }));
          assert.equal(status, EXPECTED[reason], reason);
          assert.equal(retryAfter, status === 503 ? '3' : null, reason);
        }
      });

      test('the gateway unreachable: 503; other exceptions: Nest as usual', async () => {
        const down = await get(
          new GatewayUnreachableError(
            { method: 'GET', url: 'http://gw/call/sber/x', write: false },
            Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
          ),
        );
        assert.deepEqual([down.status, down.body.reason, down.body.sent], [503, 'gateway_unreachable', false]);

        const nest = await get(new HttpException('teapot', HttpStatus.I_AM_A_TEAPOT));
        assert.deepEqual([nest.status, nest.body], [418, { statusCode: 418, message: 'teapot' }]);
        const bug = await get(new TypeError('a bug'));
        assert.deepEqual([bug.status, bug.body], [500, { statusCode: 500, message: 'Internal server error' }]);
      });
    });
  }

  test('without an adapter to answer with, it says how to register it', () => {
    const filter = new BallastExceptionFilter();
    const host = { getType: () => 'http', switchToHttp: () => ({ getResponse: () => ({}) }) };
    assert.throws(() => filter.catch(problem('timeout'), host), /provide it as APP_FILTER/);
  });
});
