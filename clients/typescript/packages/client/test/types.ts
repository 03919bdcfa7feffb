// What the compiler refuses: `tsc -p test` must pass, so every
// `@ts-expect-error` below must meet an error (R-RES-RE-1 at compile time, as
// ballast's Rust types refuse a write without a key). Never run. Without the
// `ballast codegen ts` augmentation, a system name is any string;
// systems/systems.ts checks them with it.

import {
  BallastClient,
  BallastError,
  CallbackSignatureError,
  GatewayUnreachableError,
  IdempotencyKey,
  SystemClient,
  SystemUnavailableError,
  TaskWaitTimeoutError,
  answerJson,
  isBallastError,
  isGatewayUnreachable,
  isSystemUnavailable,
  keyFor,
  newKey,
  verifyCallback,
  type CallbackEvent,
  type DeferReason,
  type FreshKey,
  type Handover,
  type Reason,
  type SystemName,
  type SystemStatus,
  type Task,
} from '@ballast/client';

declare const ballast: BallastClient;
declare const stored: string;

export async function refused(): Promise<void> {
  const key = keyFor('order-42', 'register-payment');

  // A write needs a key…
  // @ts-expect-error -- no init at all
  await ballast.write('sber', 'payments');
  // @ts-expect-error -- an init without `key`
  await ballast.write('sber', 'payments', { json: { amount: 100 } });
  // @ts-expect-error -- `key: undefined`
  await ballast.writeOrDefer('sber', 'payments', { key: undefined, json: {} });
  // …and a plain string is not one: it has to be made (keyFor, newKey) or checked (IdempotencyKey.from).
  // @ts-expect-error -- a string that was never checked
  await ballast.write('sber', 'payments', { key: stored });
  // @ts-expect-error -- made up on the spot
  await ballast.writeOrDefer('sber', 'payments', { key: `${Date.now()}` });

  // A fresh key is not a key until it is stored: made inside the call, it would be new on every attempt.
  // @ts-expect-error -- newKey() in the call: the guide's double charge
  await ballast.write('sber', 'payments', { key: newKey(), json: {} });
  const fresh: FreshKey = newKey();
  // @ts-expect-error -- nor kept in a variable and sent without storing it
  await ballast.writeOrDefer('sber', 'payments', { key: fresh, json: {} });
  // @ts-expect-error -- nor passed off as one read back from storage
  IdempotencyKey.from(newKey());
  // @ts-expect-error -- store() takes a fresh key, not any string
  IdempotencyKey.store(stored, () => {});
  // @ts-expect-error -- a scheme of your own names its namespace
  keyFor('order-42:pay', { ns: 'f35c9ecb-294e-5662-a13f-9edcadcaad03' });

  // A system client is bound to its system: no name to pass, none to get wrong.
  const sber = ballast.system('sber');
  // @ts-expect-error -- the path comes first: the system is bound already
  await sber.read('sber', 'orders/42');
  // @ts-expect-error -- its writes need a key too
  await sber.write('payments', { json: {} });

  // A read is a read: no body, no key, no write method.
  // @ts-expect-error -- POST is not a read
  await ballast.read('sber', 'orders/42', { method: 'POST' });
  // @ts-expect-error -- a read has no body
  await ballast.read('sber', 'orders/42', { body: 'x' });
  // @ts-expect-error -- nor a JSON one
  await ballast.read('sber', 'orders/42', { json: {} });
  // @ts-expect-error -- nor a key
  await ballast.read('sber', 'orders/42', { key });

  // A write is not a read.
  // @ts-expect-error -- GET on write()
  await ballast.write('sber', 'payments', { key, method: 'GET' });
  // @ts-expect-error -- HEAD on writeOnce()
  await ballast.writeOnce('sms', 'messages', { method: 'HEAD' });
  // @ts-expect-error -- writeOnce() sends no key: a keyed write is write()
  await ballast.writeOnce('sms', 'messages', { key });
  // @ts-expect-error -- body or json, not both
  await ballast.write('sber', 'payments', { key, body: '{}', json: {} });

  // A handover's task is there only once it is deferred.
  const handover: Handover = await ballast.writeOrDefer('sber', 'payments', { key, json: {} });
  // @ts-expect-error -- taskId exists on the deferred branch only
  handover.taskId;
  // @ts-expect-error -- and so does why it was deferred
  handover.deferredBecause;

  // Only a write that may be deferred has a callback.
  // @ts-expect-error -- write() is answered at once: nothing to call back
  await ballast.write('sber', 'payments', { key, callback: 'https://shop.example/cb' });
  // @ts-expect-error -- a callback is a URL string
  await ballast.writeOrDefer('sber', 'payments', { key, callback: new URL('https://shop.example/cb') });

  // Deferral reasons and statuses are closed sets.
  // @ts-expect-error -- not a reason to defer
  const because: DeferReason = 'unrouted';
  // @ts-expect-error -- not a status
  const status: SystemStatus = 'down';
  void because, status;

  // A callback's body is believed only through verifyCallback: it takes the raw body, not a parsed one.
  // @ts-expect-error -- a parsed body lost its bytes
  verifyCallback({ secret: 's', signature: 't=1,v1=00', body: { type: 'task.completed' } });
}

export async function accepted(error: unknown): Promise<Task | undefined> {
  const key = IdempotencyKey.from(stored);
  await ballast.read('sber', 'orders/42');
  await ballast.read('sber', 'orders/42', { method: 'HEAD', headers: { 'x-request-id': 'r' } });
  await ballast.write('sber', 'payments', { key, json: { amount: 100 } });
  const created = await IdempotencyKey.store(newKey(), async (made) => {
    await Promise.resolve(made); // the INSERT of the payment with its key
  });
  const kept: IdempotencyKey = IdempotencyKey.store(newKey(), (made) => void made);
  await ballast.write('sber', 'payments/1', { key: created, method: 'PUT', body: new URLSearchParams({ a: '1' }) });
  await ballast.write('sber', 'payments/2', { key: kept, json: {} });
  await ballast.write('sber', 'payments/3', { key: keyFor('order-42:pay', { namespace: 'f35c9ecb-294e-5662-a13f-9edcadcaad03' }) });
  // Without the codegen augmentation, any string names a system.
  const name: SystemName = 'anything';
  const sber: SystemClient<'sber'> = ballast.system('sber');
  const systemOf: 'sber' = sber.name;
  await sber.read('orders/42');
  await sber.write('payments', { key, json: {} });
  const deferredHere = await sber.writeOrDefer('payments', { key, json: {}, callback: 'https://shop.example/cb' });
  await sber.writeOnce('receipts', { json: {} });
  void name, systemOf, deferredHere;
  if (isBallastError(error)) {
    const reason: Reason = error.reason;
    void reason;
  }
  if (isSystemUnavailable(error)) {
    const reason: 'breaker_open' | 'bulkhead_full' | 'budget_exhausted' | 'rate_limited' = error.reason;
    void reason;
  }
  if (isGatewayUnreachable(error) || error instanceof GatewayUnreachableError) {
    const unknown: boolean = error.outcomeUnknown;
    const sent: boolean = error.sent;
    void unknown, sent;
  }
  await ballast.writeOnce('sms', 'messages', { json: { text: 'paid' } });
  await ballast.writeOnce('sms', 'messages');
  if (error instanceof SystemUnavailableError) {
    const reason: 'breaker_open' | 'bulkhead_full' | 'budget_exhausted' | 'rate_limited' = error.reason;
    const wait: number | undefined = error.retryAfter;
    void reason, wait;
  }
  if (error instanceof BallastError) {
    const reason: Reason = error.reason;
    // @ts-expect-error -- reasons are a closed set
    const made: Reason = 'breaker_half_open';
    void reason, made;
  }
  const handover = await ballast.writeOrDefer('sber', 'payments', { key, json: {}, callback: 'https://shop.example/cb' });
  if (handover.deferred) {
    const because: DeferReason | null = handover.deferredBecause;
    const next: Date | null = handover.nextAttemptAt;
    void because, next;
  }
  if (handover.deferred && handover.taskId !== null) return ballast.task(handover.taskId);
  if (!handover.deferred) void handover.response.status;
  return undefined;
}

export async function following(taskId: string, raw: Buffer, signature: string | undefined): Promise<number> {
  try {
    const task: Task = await ballast.waitForTask(taskId, { timeoutMs: 60_000, signal: AbortSignal.timeout(90_000) });
    if (task.state === 'completed' && task.result) {
      const status: number = task.result.status;
      const kept: boolean | undefined = task.result.body_kept;
      const confirmation = answerJson<{ confirmed: boolean }>(task);
      void status, kept, confirmation.confirmed;
    }
  } catch (error) {
    if (error instanceof TaskWaitTimeoutError) void error.lastSeen?.state;
  }
  let event: CallbackEvent;
  try {
    event = verifyCallback({ secret: 's3cret', signature, body: raw });
  } catch (error) {
    if (error instanceof CallbackSignatureError) return error.kind === 'stale' ? 401 : 401;
    throw error;
  }
  const type: 'task.completed' | 'task.failed' | 'task.cancelled' = event.type;
  void type;
  const { systems } = await ballast.systems();
  return systems.filter((s) => s.status === 'unavailable').length;
}
