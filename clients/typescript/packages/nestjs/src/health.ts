import { Inject, Injectable } from '@nestjs/common';
import { BallastClient, type SystemHealth, type SystemName } from '@ballast/client';

/**
 * A health indicator's result as `@nestjs/terminus` reads it (its
 * `HealthIndicatorResult`): `status` and details under the indicator's key.
 */
export type BallastHealthResult<Key extends string> = Record<
  Key,
  {
    status: 'up' | 'down';
    /**
     * Each system's status and breaker, ` *` after a critical one's:
     * `{ sber: 'unavailable (open) *', sms: 'up (closed)', crm: 'up' }` (no
     * breaker). For the record: they do not make it down.
     */
    systems?: Record<string, string>;
    /** Whether the queue database answers. */
    queue?: 'reachable' | 'unreachable';
    /** Why it is down, when it could not be asked or the queue cannot store. */
    message?: string;
  }
>;

/**
 * {@link BallastHealthIndicator.systemsHealthy}'s result, as terminus reads it.
 */
export type BallastSystemsResult<Key extends string> = Record<
  Key,
  {
    status: 'up' | 'down';
    /** Each system's status and breaker, as in {@link BallastHealthResult}. */
    systems?: Record<string, string>;
    /** The systems not `up` that do not make it down: calls to them fail fast or are deferred. */
    degraded?: string[];
    /** The required (or critical) systems that are `unavailable`: why it is down. */
    unavailable?: string[];
    /** Why it is down, when it could not be asked or a required system is not configured. */
    message?: string;
  }
>;

/**
 * `ballast serve`'s health as terminus health indicators:
 *
 * - {@link isHealthy}: the gateway's own readiness (`/health/ready`) — up
 *   while its queue database answers and stores, whatever the external
 *   systems do: the gateway still takes calls and defers keyed writes;
 * - {@link systemsHealthy}: the external systems (`/health/systems`) — down
 *   only while a system the app cannot work without is unavailable.
 *
 * It needs no import of `@nestjs/terminus`: it returns the results terminus
 * reads (terminus 11 and 12).
 *
 * @example
 * \@Get('health/ready')
 * \@HealthCheck()
 * ready() {
 *   return this.health.check([
 *     () => this.ballast.isHealthy('ballast'),
 *     () => this.ballast.systemsHealthy('systems', { require: ['sber'] }),
 *   ]);
 * }
 */
@Injectable()
export class BallastHealthIndicator {
  constructor(@Inject(BallastClient) private readonly ballast: BallastClient) {}

  /**
   * The gateway's readiness: up while `/health/ready` says ready (its queue
   * database answers and stores), down otherwise or when it cannot be asked.
   * Each system's status is in the details; none of them makes it down — an
   * app that needs a system to be ready asks {@link systemsHealthy} too.
   *
   * @param key the indicator's name in the health report
   * @param options.timeout how long to wait for the admin listener, in ms (default 2000)
   */
  async isHealthy<const Key extends string>(
    key: Key,
    options: { timeout?: number } = {},
  ): Promise<BallastHealthResult<Key>> {
    let detail: BallastHealthResult<Key>[Key];
    try {
      const readiness = await this.ballast.readiness(AbortSignal.timeout(options.timeout ?? 2000));
      const queue = readiness.queue.reachable ? 'reachable' : 'unreachable';
      detail = { status: readiness.ready ? 'up' : 'down', systems: described(readiness.systems), queue };
      const why = readiness.queue.storage_error ?? readiness.queue.error;
      if (!readiness.ready && why !== undefined) detail.message = why;
    } catch (error) {
      detail = { status: 'down', message: messageOf(error) };
    }
    return { [key]: detail } as BallastHealthResult<Key>;
  }

  /**
   * The external systems, from `/health/systems`: down while a system in
   * `require` — or one `ballast.toml` marks `critical = true` — is
   * `unavailable` (its breaker open or isolated); up otherwise, naming under
   * `degraded` the systems that are not `up` but do not make it down. Down,
   * with a message, when the listener cannot be asked or a required system
   * is not configured.
   *
   * Require only the systems the app cannot serve without, whose calls
   * cannot be deferred: every replica goes unready together while one is
   * unavailable, and the app stops serving what would still work.
   *
   * @param key the indicator's name in the health report
   * @param options.require the systems it is down without, besides the critical ones
   * @param options.timeout how long to wait for the admin listener, in ms (default 2000)
   */
  async systemsHealthy<const Key extends string>(
    key: Key,
    options: { require?: readonly SystemName[]; timeout?: number } = {},
  ): Promise<BallastSystemsResult<Key>> {
    let detail: BallastSystemsResult<Key>[Key];
    try {
      const report = await this.ballast.systems(AbortSignal.timeout(options.timeout ?? 2000));
      const names = new Set(report.systems.map((s) => s.system));
      const unknown = (options.require ?? []).filter((name) => !names.has(name));
      const required = new Set([...(options.require ?? []), ...report.systems.filter((s) => s.critical).map((s) => s.system)]);
      const unavailable = report.systems
        .filter((s) => s.status === 'unavailable' && required.has(s.system))
        .map((s) => s.system);
      const degraded = report.systems
        .filter((s) => s.status !== 'up' && !unavailable.includes(s.system))
        .map((s) => s.system);
      detail = { status: unavailable.length || unknown.length ? 'down' : 'up', systems: described(report.systems) };
      if (degraded.length) detail.degraded = degraded;
      if (unavailable.length) detail.unavailable = unavailable;
      if (unknown.length) detail.message = `required but not in ballast.toml: ${unknown.join(', ')}`;
    } catch (error) {
      detail = { status: 'down', message: messageOf(error) };
    }
    return { [key]: detail } as BallastSystemsResult<Key>;
  }
}

/** `{ sber: 'unavailable (open) *' }`: status, breaker if any, `*` if critical. */
function described(systems: SystemHealth[]): Record<string, string> {
  return Object.fromEntries(
    systems.map((s) => [s.system, `${s.status}${s.state ? ` (${s.state})` : ''}${s.critical ? ' *' : ''}`]),
  );
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
