// BallastHealthIndicator: `ballast serve`'s /health/ready and
// /health/systems as terminus health indicators, against a real `ballast
// serve` and against answers it cannot give on cue.

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
  // Needs a ballast whose /health/ready is the gateway's own and that serves /health/systems.
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

  test('up while ready, with each system; terminus says ok', async () => {
    const indicator = app.get(BallastHealthIndicator);
    const result = await eventually('ballast serve is ready', async () => {
      const r = await indicator.isHealthy('ballast');
      return r.ballast.status === 'up' && r;
    });
    assert.deepEqual(result, { ballast: { status: 'up', systems: { sber: 'up (closed) *' }, queue: 'reachable' } });
    assert.deepEqual(await indicator.systemsHealthy('systems'), {
      systems: { status: 'up', systems: { sber: 'up (closed) *' } },
    });

    const report = await app
      .get(HealthCheckService)
      .check([() => indicator.isHealthy('ballast'), () => indicator.systemsHealthy('systems')]);
    assert.equal(report.status, 'ok');
    assert.equal(report.info.ballast.status, 'up');
  });

  test("a critical system's breaker open: the gateway stays up, systemsHealthy goes down, terminus answers 503", async () => {
    upstream.on('/rates', () => busy());
    assert.equal((await app.get(BallastClient).read('sber', 'rates')).status, 503);
    const indicator = app.get(BallastHealthIndicator);

    assert.deepEqual(await indicator.isHealthy('ballast'), {
      ballast: { status: 'up', systems: { sber: 'unavailable (open) *' }, queue: 'reachable' },
    });
    assert.deepEqual(await indicator.systemsHealthy('systems'), {
      systems: { status: 'down', systems: { sber: 'unavailable (open) *' }, unavailable: ['sber'] },
    });

    const failed = await app
      .get(HealthCheckService)
      .check([() => indicator.isHealthy('ballast'), () => indicator.systemsHealthy('systems')])
      .then(
        () => assert.fail('expected the check to fail'),
        (e) => e,
      );
    assert.equal(failed.getStatus(), 503);
    assert.deepEqual(failed.getResponse().error.systems.unavailable, ['sber']);
    assert.equal(failed.getResponse().info.ballast.status, 'up');
  });
});

describe('systemsHealthy, on the reports /health/systems gives', () => {
  let admin;
  let report;
  before(async () => {
    const server = createServer((req, res) => {
      assert.equal(req.url, '/health/systems');
      const down = report.systems.some((s) => s.critical && s.status === 'unavailable');
      res.writeHead(down ? 503 : 200, { 'content-type': 'application/json' }).end(JSON.stringify(report));
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    admin = {
      url: `http://127.0.0.1:${server.address().port}`,
      stop: () => (server.closeAllConnections(), new Promise((r) => server.close(r))),
    };
  });
  after(() => admin.stop());

  const system = (name, status, critical = false) => ({
    system: name,
    critical,
    status,
    state: { up: 'closed', degraded: 'half_open', unavailable: 'open' }[status],
    since_secs: 1,
    next_probe_in_secs: status === 'unavailable' ? 20 : null,
  });

  /** systemsHealthy's detail, and whether terminus passes it, with `systems` reported. */
  async function check(systems, options) {
    report = { status: 'up', systems };
    const app = await healthApp({ adminUrl: admin.url });
    const indicator = app.get(BallastHealthIndicator);
    const detail = (await indicator.systemsHealthy('systems', options)).systems;
    const ok = await app
      .get(HealthCheckService)
      .check([() => indicator.systemsHealthy('systems', options)])
      .then(
        () => true,
        (e) => (assert.equal(e.getStatus(), 503), false),
      );
    await app.close();
    return { detail, ok };
  }

  test('every system up: up, nothing more to say', async () => {
    const { detail, ok } = await check([system('sber', 'up', true), system('sms', 'up')]);
    assert.deepEqual(detail, { status: 'up', systems: { sber: 'up (closed) *', sms: 'up (closed)' } });
    assert.equal(ok, true);
  });

  test('systems degraded or unavailable that are not required: up, naming them under degraded', async () => {
    const { detail, ok } = await check([system('sber', 'degraded', true), system('sms', 'unavailable'), system('crm', 'up')]);
    assert.equal(detail.status, 'up');
    assert.deepEqual(detail.degraded, ['sber', 'sms']);
    assert.equal(detail.unavailable, undefined);
    assert.equal(detail.systems.sms, 'unavailable (open)');
    assert.equal(ok, true);
  });

  test('a required system unavailable: down, naming it', async () => {
    const { detail, ok } = await check([system('sber', 'up', true), system('sms', 'unavailable'), system('crm', 'degraded')], {
      require: ['sms'],
    });
    assert.equal(detail.status, 'down');
    assert.deepEqual(detail.unavailable, ['sms']);
    assert.deepEqual(detail.degraded, ['crm']);
    assert.equal(ok, false);
  });

  test('a critical system unavailable is required without saying so', async () => {
    const { detail, ok } = await check([system('sber', 'unavailable', true), system('sms', 'up')]);
    assert.equal(detail.status, 'down');
    assert.deepEqual(detail.unavailable, ['sber']);
    assert.equal(ok, false);
  });

  test('a required system not in ballast.toml: down, saying so', async () => {
    const { detail, ok } = await check([system('sber', 'up', true)], { require: ['sbr'] });
    assert.equal(detail.status, 'down');
    assert.equal(detail.message, 'required but not in ballast.toml: sbr');
    assert.equal(ok, false);
  });

  test('a system without a breaker shows its status alone', async () => {
    const { detail } = await check([{ ...system('crm', 'up'), state: null, since_secs: null }]);
    assert.deepEqual(detail.systems, { crm: 'up' });
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
    const systems = await app.get(BallastHealthIndicator).systemsHealthy('systems');
    assert.equal(systems.systems.status, 'down');
    assert.match(systems.systems.message, /\/health\/systems answered 401/);
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
