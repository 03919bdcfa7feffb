import { Inject, Injectable, Logger } from '@nestjs/common';
import { OnBallastTask, answerJson, type BallastTaskEvent } from '@ballast/nestjs';

import { PAYMENT_EVENTS, type PaymentEvents } from '../payment/payment.port.js';
import { toCompletion, type SberConfirmResponse, type SberRegisterResponse } from './sber.mappers.js';

/**
 * The guide's `OrderConfirmationPoller`, as handlers: no `@Interval`, no
 * `findDue(50)`, no asking the gateway how a write went. When a deferred
 * write to Sber ends, the gateway POSTs a signed callback to this app;
 * `BallastModule`'s controller checks the signature (401 for a forged or
 * stale one), drops a delivery it handled already, and calls these. The
 * answer Sber gave the queue's attempt comes with it (`task.result`), so a
 * deferred registration's callback carries the payment's id.
 *
 * A handler that throws answers the callback 500, and the gateway sends it
 * again: the domain's side ({@link PaymentEvents}) acts once however often
 * it is told.
 */
@Injectable()
export class SberCallbacks {
  readonly #logger = new Logger(SberCallbacks.name);

  constructor(@Inject(PAYMENT_EVENTS) private readonly events: PaymentEvents) {}

  @OnBallastTask('completed', { system: 'sber' })                   // another adapter's writes go to its own handlers
  async completed({ task }: BallastTaskEvent): Promise<void> {
    const done = toCompletion(answerJson<SberRegisterResponse | SberConfirmResponse>(task)); // Sber's 201/200, kept by the gateway
    if (done.kind === 'registered') await this.events.paymentRegistered(done.payment);
    else await this.events.paymentConfirmed(done.orderId);
  }

  @OnBallastTask('failed', 'cancelled', { system: 'sber' })
  async notDone({ task, outcome }: BallastTaskEvent): Promise<void> {
    // A 4xx (Sber refused it: its answer is in task.result) or the queue's last attempt; the gateway alerted too.
    const why = task.result ? `Sber answered ${task.result.status}` : (task.last_error ?? 'no answer');
    this.#logger.warn(`deferred write ${task.task_id} ${outcome} after ${task.attempts} attempts: ${why}`);
    await this.events.deferredWriteFailed(task.task_id, `${outcome}: ${why}`);
  }
}
