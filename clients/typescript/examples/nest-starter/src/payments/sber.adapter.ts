import { BadGatewayException, Injectable, UnprocessableEntityException } from '@nestjs/common';
import { InjectBallast, type IdempotencyKey, type SystemClient } from '@ballast/nestjs';

export interface RegisterPayment {
  orderId: string;
  amount: number;
  currency: string;
  idempotencyKey: IdempotencyKey; // made once per user action and stored: never here, per attempt
}

@Injectable()
export class SberAdapter {
  constructor(@InjectBallast('sber') private readonly sber: SystemClient<'sber'>) {}

  async registerPayment(cmd: RegisterPayment): Promise<{ paymentId: string }> {
    // A keyed write: the gateway retries it with this key, breaker, bulkhead and timeout included (ballast.toml).
    const resp = await this.sber.write('payments/register', {
      key: cmd.idempotencyKey,
      json: { orderNumber: cmd.orderId, amount: cmd.amount, currency: cmd.currency },
    });
    if (resp.status === 422) throw new UnprocessableEntityException('Sber declined the payment'); // a 4xx is never retried
    if (!resp.ok) throw new BadGatewayException(`Sber answered ${resp.status}`);
    return (await resp.json()) as { paymentId: string };
  }
}
