// BallastHealthIndicator: `ballast serve`'s /health/ready as a terminus
// health indicator, against a real `ballast serve` and against answers it
// cannot give on cue.

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';

import { HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';

import { BallastClient, BallastHealthIndicator, BallastModule } from '@ballast/nestjs';

import { PATIENCE_MS, TOKEN, busy, eventually, startBallast, startUpstream } from '../../../test-support/serve.mjs';

/** The module with terminus, on `options`. */
async function healthApp(options) {
  return Test.createTestingModule({ imports: [TerminusModule, BallastModule.forRoot(options)] }).compile();
}

describe('against a real ballast serve', { timeout: 3 * PATIENCE_MS }, () => {
  let upstream;
  let served;
  let app;
  before(async () => {
    upstream = await startUpstream();
    served = await startBallast(new URL('ballast.toml', import.meta.url), { upstream: upstream.port });
    app = await healthApp({ baseUrl: served.gateway, token: TOKEN, adminUrl: served.admin });
  });
  after(async () => {
    await app?.close();
    await served?.stop();
    await upstream?.stop();
  });

  test('up while ready, with each breaker; terminus says ok', async () => {
    const indicator = app.get(BallastHealthIndicator);
    const result = await eventually('ballast serve is ready', async () => {
      const r = await indicator.isHealthy('ballast');
      return r.ballast.status === 'up' && r;
    });
    assert.deepEqual(result, { ballast: { status: 'up', systems: { sber: 'closed *' }, queue: 'reachable' } });

    const report = await app.get(HealthCheckService).check([() => indicator.isHealthy('ballast')]);
    assert.equal(report.status, 'ok');
    assert.equal(report.info.ballast.status, 'up');
  });

  test("down once a critical system's breaker opens; terminus answers 503", async () => {
    upstream.on('/rates', () => busy());
    assert.equal((await app.get(BallastClient).read('sber', 'rates')).status, 503);

    const result = await app.get(BallastHealthIndicator).isHealthy('ballast');
    assert.deepEqual(result, { ballast: { status: 'down', systems: { sber: 'open *' }, queue: 'reachable' } });

    const failed = await app
      .get(HealthCheckService)
      .check([() => app.get(BallastHealthIndicator).isHealthy('ballast')])
      .then(
        () => assert.fail('expected the check to fail'),
        (e) => e,
      );
    assert.equal(failed.getStatus(), 503);
    assert.equal(failed.getResponse().error.ballast.systems.sber, 'open *');
  });
});

describe('when the admin listener cannot say', () => {
  let admin;
  let status = 401;
  before(async () => {
    const server = createServer((req, res) => {
      if (status === 0) return; // never answers
      res.writeHead(status).end('this endpoint asks for `Authorization: Bearer <token>`\n');
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    admin = {
      url: `http://127.0.0.1:${server.address().port}`,
      stop: () => (server.closeAllConnections(), new Promise((r) => server.close(r))),
    };
  });
  after(() => admin.stop());

  test('down, saying why: an answer that is not a readiness report', async () => {
    const app = await healthApp({ adminUrl: admin.url });
    const result = await app.get(BallastHealthIndicator).isHealthy('gateway');
    assert.equal(result.gateway.status, 'down');
    assert.match(result.gateway.message, /answered 401: this endpoint asks for/);
    await app.close();
  });

  test('down, saying why: no answer within the timeout', async () => {
    status = 0;
    const app = await healthApp({ adminUrl: admin.url });
    const result = await app.get(BallastHealthIndicator).isHealthy('gateway', { timeout: 100 });
    assert.equal(result.gateway.status, 'down');
    assert.match(result.gateway.message, /timeout|aborted/i);
    await app.close();
  });
});
