import { Inject, Injectable } from '@nestjs/common';
import { BallastClient } from '@ballast/client';

/**
 * A health indicator's result as `@nestjs/terminus` reads it (its
 * `HealthIndicatorResult`): `status` and details under the indicator's key.
 */
export type BallastHealthResult<Key extends string> = Record<
  Key,
  {
    status: 'up' | 'down';
    /**
     * Each system's breaker: `closed`, `half_open`, `open`, `isolated` (`none`
     * without one), and ` *` after a critical one's.
     */
    systems?: Record<string, string>;
    /** Whether the queue database answers. */
    queue?: 'reachable' | 'unreachable';
    /** Why it is down, when it could not be asked. */
    message?: string;
  }
>;

/**
 * `ballast serve`'s readiness as a terminus health indicator: up while its
 * `/health/ready` says ready — no critical system's breaker open, the queue
 * database answering — and down otherwise, or when it cannot be asked.
 *
 * It needs no import of `@nestjs/terminus`: it returns the results terminus
 * reads (terminus 11 and 12).
 *
 * @example
 * \@Get('health/ready')
 * \@HealthCheck()
 * ready() {
 *   return this.health.check([() => this.ballast.isHealthy('ballast')]);
 * }
 */
@Injectable()
export class BallastHealthIndicator {
  constructor(@Inject(BallastClient) private readonly ballast: BallastClient) {}

  /**
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
      const systems = Object.fromEntries(
        readiness.systems.map((s) => [s.system, `${s.state ?? 'none'}${s.critical ? ' *' : ''}`]),
      );
      const queue = readiness.queue.reachable ? 'reachable' : 'unreachable';
      detail = { status: readiness.ready ? 'up' : 'down', systems, queue };
    } catch (error) {
      detail = { status: 'down', message: error instanceof Error ? error.message : String(error) };
    }
    return { [key]: detail } as BallastHealthResult<Key>;
  }
}
