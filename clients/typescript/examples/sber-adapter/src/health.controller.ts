import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService, type HealthCheckResult } from '@nestjs/terminus';
import { BallastHealthIndicator } from '@ballast/nestjs';

/**
 * Readiness from `ballast serve`: the gateway itself ready (it takes and
 * defers payments while Sber is down, so an outage of Sber does not make
 * the app unready), and each system's state named — `degraded: ['sber']`
 * while Sber's breaker is open. A system the app could not work without
 * would be `critical = true` in `ballast.toml`: then its unavailability
 * makes this 503. `GET /health/ready`: 200, or 503 with the report.
 */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly ballast: BallastHealthIndicator,
  ) {}

  @Get('ready')
  @HealthCheck()
  ready(): Promise<HealthCheckResult> {
    return this.health.check([
      () => this.ballast.isHealthy('ballast'),
      // Down only while a critical system is unavailable; Sber, whose payments defer, is named, not failed.
      () => this.ballast.systemsHealthy('systems'),
    ]);
  }
}
