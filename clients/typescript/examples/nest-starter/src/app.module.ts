import { Module } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { BallastExceptionFilter, BallastModule } from '@ballast/nestjs';
import { AppController } from './app.controller';
import { AppService } from './app.service';
import { PaymentsModule } from './payments/payments.module';

@Module({
  imports: [
    BallastModule.forRoot({
      isGlobal: true,
      baseUrl: process.env.BALLAST_GATEWAY_URL ?? 'http://127.0.0.1:9465',
      token: process.env.BALLAST_GATEWAY_TOKEN,
    }),
    PaymentsModule,
  ],
  controllers: [AppController],
  providers: [AppService, { provide: APP_FILTER, useClass: BallastExceptionFilter }],
})
export class AppModule {}
