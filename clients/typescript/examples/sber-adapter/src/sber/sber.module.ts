import { Module } from '@nestjs/common';
import { ConfigModule } from '@nestjs/config';
import { BallastModule } from '@ballast/nestjs';

import { CheckoutService } from '../checkout/checkout.service.js';
import { OrderStore } from '../checkout/order.store.js';
import { PAYMENT_EVENTS, PAYMENT_PORT } from '../payment/payment.port.js';
import { SberAdapter } from './sber.adapter.js';
import { SberCallbacks } from './sber.callbacks.js';

/**
 * Payments through Sber: the adapter as the domain's `PaymentPort`, its
 * callback handlers telling the checkout how deferred writes ended, and the
 * checkout. The adapter's client is bound to Sber
 * (`BallastModule.forFeature`, over the global `BallastModule` of
 * `AppModule`); the callback URL comes from `BALLAST_CALLBACK_URL`.
 */
@Module({
  imports: [ConfigModule, BallastModule.forFeature({ system: 'sber' })],
  providers: [
    { provide: PAYMENT_PORT, useClass: SberAdapter },
    OrderStore,
    CheckoutService,
    { provide: PAYMENT_EVENTS, useExisting: CheckoutService },
    SberCallbacks,
  ],
  exports: [PAYMENT_PORT, CheckoutService],
})
export class SberModule {}
