import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService, type HealthCheckResult } from '@nestjs/terminus';
import { BallastHealthIndicator } from '@ballast/nestjs';

/**
 * Readiness from `ballast serve`: not ready while a critical system's
 * breaker is open (the guide's "Health checks"), which the gateway knows for
 * every process on the host. Served once the app has an HTTP platform
 * (`@nestjs/platform-express`); the test calls it directly.
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
    return this.health.check([() => this.ballast.isHealthy('ballast')]);
  }
}
