import type {
  BallastClient,
  Handover,
  ReadInit,
  Task,
  WaitForTaskOptions,
  WriteInit,
  WriteOnceInit,
  WriteOrDeferInit,
} from './client.js';
import type { SystemName } from './systems.js';

/**
 * A {@link BallastClient} bound to one system: the same calls, the system's
 * name given once. An adapter that talks to one external system takes one of
 * these — the guide's "one client per system" — and cannot call another by
 * mistake. Made by {@link BallastClient.system}; with `@ballast/nestjs`,
 * injected by `@InjectBallast('sber')`.
 *
 * @example
 * const sber = ballast.system('sber');
 * const resp = await sber.write('payments/register', { key, json: toApiRequest(cmd) });
 */
export class SystemClient<S extends SystemName = SystemName> {
  readonly #client: BallastClient;

  /** The system's name in `ballast.toml`. */
  readonly name: S;

  constructor(client: BallastClient, name: S) {
    this.#client = client;
    this.name = name;
  }

  /** {@link BallastClient.read} on this system: retried by the gateway on transient failures. */
  read(path: string, init?: ReadInit): Promise<Response> {
    return this.#client.read(this.name, path, init);
  }

  /** {@link BallastClient.write} on this system: retried with its key if the system deduplicates by it. */
  write(path: string, init: WriteInit): Promise<Response> {
    return this.#client.write(this.name, path, init);
  }

  /** {@link BallastClient.writeOrDefer} on this system: retried, then handed to the durable queue with its key. */
  writeOrDefer(path: string, init: WriteOrDeferInit): Promise<Handover> {
    return this.#client.writeOrDefer(this.name, path, init);
  }

  /** {@link BallastClient.writeOnce} on this system: no key, sent exactly once (R-RES-RE-X1). */
  writeOnce(path: string, init?: WriteOnceInit): Promise<Response> {
    return this.#client.writeOnce(this.name, path, init);
  }

  /** {@link BallastClient.task}: where a deferred write stands now. */
  task(taskId: string, init?: { signal?: AbortSignal }): Promise<Task> {
    return this.#client.task(taskId, init);
  }

  /** {@link BallastClient.waitForTask}: the deferred write once it has ended. */
  waitForTask(taskId: string, options?: WaitForTaskOptions): Promise<Task> {
    return this.#client.waitForTask(taskId, options);
  }
}
