import { isBallastError, isGatewayUnreachable, type SystemUnavailableError } from '@ballast/nestjs';

/** What went wrong, in the domain's words. */
export type PaymentPortErrorKind =
  /** Fail fast: the system's breaker is open or its bulkhead full; ask again after `retryAfter`. */
  | 'system_unavailable'
  /** The system refused the request (a 4xx): asking again will not help. */
  | 'rejected'
  /** No useful answer after the gateway's attempts: a write's outcome may be unknown; repeat it with its key. */
  | 'failed'
  /** The gateway did not answer at all: a write may have arrived; repeat it later with the same key. */
  | 'outcome_unknown';

/** The domain error of every {@link PaymentPort} call (the guide's `PaymentPortError`). */
export class PaymentPortError extends Error {
  override name = 'PaymentPortError';

  private constructor(
    readonly kind: PaymentPortErrorKind,
    /** The system that failed, when it is known. */
    readonly system: string | undefined,
    message: string,
    /** For `system_unavailable`: seconds until asking again may help. */
    readonly retryAfter?: number,
    options?: { cause: unknown },
  ) {
    super(message, options);
  }

  /** The system is unavailable now (was cockatiel's `BrokenCircuitError`, `BulkheadRejectedError`). */
  static systemUnavailable(system: string, cause: SystemUnavailableError): PaymentPortError {
    return new PaymentPortError(
      'system_unavailable',
      system,
      `${system} is unavailable (${cause.reason})`,
      cause.retryAfter,
      { cause },
    );
  }

  /** The system's own answer after the gateway's attempts, when it is not a success. */
  static fromStatus(system: string, status: number): PaymentPortError {
    const kind = status >= 400 && status < 500 ? 'rejected' : 'failed';
    return new PaymentPortError(kind, system, `${system} answered ${status}`);
  }

  /**
   * Anything else: the gateway's other answers, or the gateway unreachable —
   * `outcome_unknown` when a write may have arrived, `failed` otherwise.
   */
  static from(error: unknown): PaymentPortError {
    if (error instanceof PaymentPortError) return error;
    const message = error instanceof Error ? error.message : String(error);
    if (isGatewayUnreachable(error)) {
      const kind = error.outcomeUnknown ? 'outcome_unknown' : 'failed';
      return new PaymentPortError(kind, error.system, message, undefined, { cause: error });
    }
    const system = isBallastError(error) ? error.system : undefined;
    return new PaymentPortError('failed', system, message, undefined, { cause: error });
  }
}
