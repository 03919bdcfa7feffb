import { Module } from '@nestjs/common';

import { CheckoutService } from '../checkout/checkout.service.js';
import { OrderStore } from '../checkout/order.store.js';
import { PAYMENT_PORT } from '../payment/payment.port.js';
import { SberAdapter } from './sber.adapter.js';

/**
 * Payments through Sber: the adapter as the domain's `PaymentPort`, and the
 * checkout that uses it. `BallastClient` comes from a global
 * `BallastModule` (see `AppModule`).
 */
@Module({
  providers: [{ provide: PAYMENT_PORT, useClass: SberAdapter }, OrderStore, CheckoutService],
  exports: [PAYMENT_PORT, CheckoutService],
})
export class SberModule {}
