import { Module } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { APP_FILTER } from '@nestjs/core';
import { TerminusModule } from '@nestjs/terminus';
import { BallastExceptionFilter, BallastModule } from '@ballast/nestjs';

import { CheckoutController } from './checkout/checkout.controller.js';
import { HealthController } from './health.controller.js';
import { SberModule } from './sber/sber.module.js';

/**
 * The application: the gateway's address and token from the environment
 * (`BALLAST_GATEWAY_URL`, `BALLAST_GATEWAY_TOKEN`, `BALLAST_ADMIN_URL`), the
 * gateway's callbacks received at `POST /ballast/callbacks` and checked with
 * `BALLAST_CALLBACK_SECRET` (the variable `[gateway] callback_secret_env`
 * names), the Sber payments, readiness, and the gateway's errors that reach
 * a controller answered as what they mean (503 + `Retry-After` for Sber
 * unavailable) by `BallastExceptionFilter`.
 */
@Module({
  imports: [
    ConfigModule.forRoot({ ignoreEnvFile: true }),
    BallastModule.forRootAsync({
      isGlobal: true, // SberModule's BallastModule.forFeature binds this client to Sber
      imports: [ConfigModule],
      inject: [ConfigService],
      useFactory: (config: ConfigService) => ({
        baseUrl: config.get<string>('BALLAST_GATEWAY_URL', 'http://127.0.0.1:9465'),
        token: config.getOrThrow<string>('BALLAST_GATEWAY_TOKEN'),
        adminUrl: config.get<string>('BALLAST_ADMIN_URL', 'http://127.0.0.1:9464'),
      }),
      // The controller the gateway POSTs the ends of deferred writes to: 401 for a forged or stale signature.
      callbacks: { secretEnv: 'BALLAST_CALLBACK_SECRET' },
    }),
    TerminusModule,
    SberModule,
  ],
  controllers: [CheckoutController, HealthController],
  providers: [{ provide: APP_FILTER, useClass: BallastExceptionFilter }],
})
export class AppModule {}
