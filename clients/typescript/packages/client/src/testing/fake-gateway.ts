/**
 * A stand-in for `ballast serve`'s gateway, in the test's own process: a
 * `fetch` that answers as the gateway does — the system's answers, the
 * gateway's problems, 202 hand-overs, tasks, held waits, health — from a
 * script the test writes, and that sends the callbacks of the tasks the test
 * ends. A {@link BallastClient} on it runs its real code: headers, errors,
 * `Handover`s, `waitForTask`.
 */

import { randomBytes, randomUUID } from 'node:crypto';

import { signCallback, type CallbackType } from '../callback.js';
import {
  BallastClient,
  type Answer,
  type ClientOptions,
  type DeferReason,
  type SystemHealth,
  type SystemStatus,
  type Task,
  type TaskState,
} from '../client.js';
import type { Problem, Reason } from '../error.js';
import type { SystemName } from '../systems.js';

/** The status the gateway answers each problem with (ballast-server's `Reason::status`). */
const PROBLEM_STATUS: Readonly<Record<Reason, number>> = {
  breaker_open: 503,
  bulkhead_full: 503,
  budget_exhausted: 503,
  rate_limited: 503,
  timeout: 504,
  transport: 502,
  answer_too_large: 502,
  tls_untrusted: 502,
  tls_expired: 502,
  tls_name_mismatch: 502,
  tls_client_cert_refused: 502,
  tls_protocol: 502,
  proxy_refused: 502,
  proxy_auth_required: 502,
  token_unavailable: 503,
  token_refused: 502,
  unknown_system: 404,
  bad_key: 400,
  key_required: 400,
  key_reused: 422,
  sequence_pending: 409,
  unrouted: 400,
  method_not_allowed: 405,
  bad_path: 400,
  loop_detected: 508,
  body_timeout: 408,
  bad_callback: 400,
  cross_site: 403,
  seal_key_missing: 400,
  too_large: 413,
  bad_request: 400,
  unknown_host: 421,
  unauthorized: 401,
  token_throttled: 429,
  not_found: 404,
  queue_unavailable: 503,
  too_many_waiters: 503,
  internal: 500,
  draining: 503,
};

/** The problems the gateway sends a `Retry-After` with; the fake sends 1 s unless told. */
const WAIT_AFTER: ReadonlySet<Reason> = new Set<Reason>([
  'breaker_open',
  'bulkhead_full',
  'budget_exhausted',
  'rate_limited',
  'too_many_waiters',
  'token_throttled',
  'token_unavailable',
  'proxy_refused',
  'draining',
]);

/** The rule the gateway cites for a problem, when the test does not say. */
const RULE: Partial<Record<Reason, string>> = {
  bad_key: 'R-RES-RE-1',
  key_required: 'R-RES-RE-1',
  key_reused: 'R-RES-RE-1',
  unrouted: 'R-RES-RE-1',
  tls_untrusted: 'R-RES-RE-X2',
  tls_expired: 'R-RES-RE-X2',
  tls_name_mismatch: 'R-RES-RE-X2',
  tls_client_cert_refused: 'R-RES-RE-X2',
  tls_protocol: 'R-RES-RE-X2',
  proxy_auth_required: 'R-RES-RE-X2',
  token_refused: 'R-RES-RE-X2',
};

/** A call the fake gateway received. */
export interface FakeCall {
  /** The system called. */
  system: string;
  /** The request's method. */
  method: string;
  /** The path under the system, with its query, without a leading slash: `orders/42?expand=items`. */
  path: string;
  /** Its `Idempotency-Key`, or `null`. */
  key: string | null;
  /** Its headers, as sent to the gateway. */
  headers: Headers;
  /** Its body as text, if it had one. */
  body: string | undefined;
  /** Whether it asked to be deferred if it must be (`writeOrDefer`). */
  deferrable: boolean;
  /** Its `Ballast-Callback`, or `null`. */
  callback: string | null;
  /** How it was answered. */
  answered: 'reply' | 'problem' | 'deferred' | 'unreachable' | 'unscripted';
  /** The task it was deferred to, or joined. */
  taskId?: string;
  /** The body, parsed as JSON. */
  json(): unknown;
}

/** A callback the fake gateway sent when a task ended: what a receiver gets. */
export interface FakeCallback {
  /** The URL the write named. */
  url: string;
  /** The body, exactly as signed. */
  body: string;
  /** Its `Ballast-Signature`, made with the fake's {@link FakeBallastGateway.callbackSecret}. */
  signature: string;
  /** Its `Ballast-Delivery`. */
  delivery: string;
  /** The task it is about. */
  taskId: string;
  /** `task.completed`, `task.failed` or `task.cancelled`. */
  type: CallbackType;
}

/** What an upstream answered when a task ended, as a test gives it. */
export interface FakeResult {
  /** Its status (default 200 for a completed task, 422 for a failed one). */
  status?: number;
  /** A body sent as JSON. */
  json?: unknown;
  /** A body as is (text). */
  body?: string;
  /** Its headers. */
  headers?: Record<string, string>;
}

/** What the gateway's problem says, beyond its reason. */
export interface FakeProblem {
  /** `Retry-After`, in seconds (1 for the "unavailable" reasons unless given). */
  retryAfter?: number;
  /** Attempts made on the system (default 0, 1 for `transport` and `timeout`). */
  attempts?: number;
  /** The rule cited (default: the gateway's for key and route problems). */
  rule?: string;
  /** For `transport`: whether the request may have reached the system. */
  sent?: boolean;
  /** Its `detail`. */
  detail?: string;
  /** Its status, if not the gateway's for the reason. */
  status?: number;
}

/** How a deferral is answered. */
export interface FakeDeferral {
  /** Why the gateway deferred it (default `attempts_exhausted`). */
  because?: DeferReason;
  /** When the queue tries it next (default a second from now; `null`: unknown). */
  nextAttemptAt?: Date | null;
  /** In-memory attempts made before the hand-over (default 3). */
  attempts?: number;
}

type Step =
  | { kind: 'reply'; status: number; body: string | undefined; headers: Record<string, string> }
  | { kind: 'problem'; reason: Reason; problem: FakeProblem }
  | { kind: 'defer'; deferral: FakeDeferral }
  | { kind: 'unreachable'; sent: boolean };

/**
 * The answers scripted for one system, or one route of it: each method adds
 * the answer to the next call, and the last one stays for the calls after.
 *
 * @example
 * gateway.on('sber', 'POST payments/register')
 *   .problem('breaker_open', { retryAfter: 30 })      // the first call
 *   .reply(201, { paymentId: 'p-1' });                 // the second, and every one after
 */
export class FakeRoute {
  readonly #steps: Step[] = [];
  #next = 0;

  /** @internal */
  constructor(
    readonly system: string,
    readonly method: string | undefined,
    readonly path: string | undefined,
  ) {}

  /** The system's own answer: `body` as is when it is a string, else as JSON. */
  reply(status: number, body?: unknown, headers: Record<string, string> = {}): this {
    const text = body === undefined || typeof body === 'string' ? body : JSON.stringify(body);
    const typed = typeof body === 'string' || body === undefined ? {} : { 'content-type': 'application/json' };
    this.#steps.push({ kind: 'reply', status, body: text, headers: { ...typed, ...headers } });
    return this;
  }

  /** The gateway's own answer: a problem of `reason`, with its status, `Retry-After` and rule. */
  problem(reason: Reason, problem: FakeProblem = {}): this {
    this.#steps.push({ kind: 'problem', reason, problem });
    return this;
  }

  /**
   * A hand-over to the durable queue: a `writeOrDefer` gets 202 and a
   * pending task, which the test ends with {@link FakeBallastGateway.complete}
   * or {@link FakeBallastGateway.fail}. A call that cannot be deferred (a
   * read, `write`, `writeOnce`) gets the problem the gateway would have
   * answered instead: the deferral's reason when it is one, else `transport`.
   */
  defer(deferral: FakeDeferral = {}): this {
    this.#steps.push({ kind: 'defer', deferral });
    return this;
  }

  /**
   * No answer: `fetch` fails as it does when the gateway is down — the
   * connection refused (`sent: false`, the default) or cut after the request
   * went out (`sent: true`).
   */
  unreachable(options: { sent?: boolean } = {}): this {
    this.#steps.push({ kind: 'unreachable', sent: options.sent ?? false });
    return this;
  }

  /** @internal The next answer, or none when nothing is scripted. */
  take(): Step | undefined {
    const step = this.#steps[Math.min(this.#next, this.#steps.length - 1)];
    if (this.#next < this.#steps.length) this.#next++;
    return step;
  }

  /** @internal How closely it names a call: the method, then an exact path, then a longer prefix. */
  specificity(): number {
    const exact = this.path !== undefined && !this.path.endsWith('*');
    return (this.method ? 1_000_000 : 0) + (exact ? 100_000 : 0) + (this.path?.length ?? 0);
  }

  /** @internal */
  matches(system: string, method: string, path: string): boolean {
    if (system !== this.system || (this.method !== undefined && this.method !== method)) return false;
    if (this.path === undefined) return true;
    const bare = path.split('?', 1)[0]!;
    return this.path.endsWith('*') ? bare.startsWith(this.path.slice(0, -1)) : bare === this.path;
  }
}

/** A deferred write the fake holds. */
interface Held {
  task: Task;
  /** The callback URLs of the writes deferred to it. */
  callbacks: Set<string>;
  /** Waits held until it ends. */
  waiters: Set<() => void>;
}

/** What {@link FakeBallastGateway} takes. */
export interface FakeGatewayOptions {
  /**
   * The systems it serves besides those scripted with `on()` or given a
   * status: a call to any other one gets `unknown_system`, as from the real
   * gateway.
   */
  systems?: readonly SystemName[];
  /** The secret it signs callbacks with (default a random one: {@link FakeBallastGateway.callbackSecret}). */
  callbackSecret?: string;
}

/**
 * The gateway, faked: script what each system answers, hand writes to a
 * pretend durable queue, end their tasks, set the systems' health — and
 * check what the code under test sent.
 *
 * Calls nothing scripted answers get the system's 404 (`answered:
 * 'unscripted'`), or `unknown_system` for a system it does not know.
 *
 * @example
 * const gateway = new FakeBallastGateway();
 * gateway.on('sber', 'POST payments/register').defer({ because: 'breaker_open' });
 * const adapter = new SberAdapter(gateway.client().system('sber'));
 *
 * const out = await adapter.registerPayment(cmd);                      // { state: 'deferred', task: '1.fake…' }
 * await gateway.complete(out.task, { status: 201, json: { paymentId: 'p-1' } }); // the callback, signed
 * assert.equal(gateway.calls[0].key, cmd.idempotencyKey);
 */
export class FakeBallastGateway {
  /** Where the client is pointed: no network behind it. */
  readonly baseUrl = 'http://ballast-gateway.fake';
  /** The admin listener's address, for `readiness()` and `systems()`. */
  readonly adminUrl = 'http://ballast-admin.fake';
  /** The secret callbacks are signed with: give it to the receiver (`verifyCallback`, `BallastModule`'s `callbacks`). */
  readonly callbackSecret: string;
  /** Every call received, in order. */
  readonly calls: FakeCall[] = [];
  /** Every callback sent, in order. */
  readonly callbacks: FakeCallback[] = [];

  readonly #routes: FakeRoute[] = [];
  readonly #known = new Set<string>();
  readonly #tasks = new Map<string, Held>();
  readonly #health = new Map<string, { status: SystemStatus; critical: boolean }>();
  readonly #receivers = new Set<(callback: FakeCallback) => unknown>();
  #ready = true;
  #taskCount = 0;

  constructor(options: FakeGatewayOptions = {}) {
    this.callbackSecret = options.callbackSecret ?? randomBytes(24).toString('hex');
    for (const system of options.systems ?? []) this.#known.add(system);
  }

  /** The gateway as a `fetch`: give it to a client's `fetch` option. */
  readonly fetch: typeof fetch = (input, init) => this.#answer(input, init);

  /** A client of this gateway; `options` as {@link BallastClient}'s, less where it is. */
  client(options: Omit<ClientOptions, 'baseUrl' | 'adminUrl' | 'fetch'> = {}): BallastClient {
    return new BallastClient({ ...options, ...this.clientOptions() });
  }

  /**
   * A client's options pointing at this gateway: for code that makes its
   * client itself, or for `BallastModule`'s options in a test
   * (`.overrideProvider(BALLAST_OPTIONS).useValue(gateway.clientOptions())`).
   */
  clientOptions(): { baseUrl: string; adminUrl: string; fetch: typeof fetch } {
    return { baseUrl: this.baseUrl, adminUrl: this.adminUrl, fetch: this.fetch };
  }

  /**
   * The script of `system`'s calls — all of them, or those of `route`:
   * `'POST payments/register'`, `'payments/register'` (any method),
   * `'orders/*'` (a prefix). The most specific route that matches a call
   * answers it; of equals, the last declared.
   */
  on(system: SystemName, route?: string): FakeRoute {
    const [method, path] = parseRoute(route);
    const scripted = new FakeRoute(system, method, path);
    this.#routes.push(scripted);
    this.#known.add(system);
    return scripted;
  }

  /** The calls to `system`, or to one route of it (as {@link on} names routes). */
  callsTo(system: SystemName, route?: string): FakeCall[] {
    const [method, path] = parseRoute(route);
    const probe = new FakeRoute(system, method, path);
    return this.calls.filter((call) => probe.matches(call.system, call.method, call.path));
  }

  /** A deferred write as `GET /tasks/{handle}` shows it now. */
  task(taskId: string): Task | undefined {
    const held = this.#tasks.get(taskId);
    return held && structuredClone(held.task);
  }

  /** Every deferred write, in the order they were deferred. */
  get tasks(): Task[] {
    return [...this.#tasks.values()].map((held) => structuredClone(held.task));
  }

  /**
   * Ends a deferred write as the queue does when the system accepts it:
   * `completed`, with the system's answer (default 200, no body). Held
   * waits return it, and each write deferred to it with a `callback` gets
   * its `task.completed` callback, signed.
   *
   * @returns the task, once every callback receiver has finished
   * @throws what a callback receiver threw (the task stays completed)
   */
  complete(taskId: string, result: FakeResult = {}): Promise<Task> {
    return this.#end(taskId, 'completed', { status: 200, ...result }, null);
  }

  /**
   * Ends a deferred write as failed for good: with the system's 4xx answer
   * (default 422), or with `error` and no answer — its attempts spent.
   */
  fail(taskId: string, result: FakeResult & { error?: string } = {}): Promise<Task> {
    const { error, ...answer } = result;
    const answered = error === undefined || answer.status !== undefined || answer.json !== undefined || answer.body !== undefined;
    return this.#end(taskId, 'failed', answered ? { status: 422, ...answer } : undefined, error ?? null);
  }

  /** Ends a deferred write as cancelled by an operator. */
  cancel(taskId: string): Promise<Task> {
    return this.#end(taskId, 'cancelled', undefined, 'cancelled by an operator');
  }

  /**
   * Sets how usable `system` is in the health reports: `degraded` while
   * its breaker half-opens or its writes are deferred, `unavailable` while
   * it is open. `critical` makes `/health/systems` answer 503 while it is
   * unavailable.
   */
  status(system: SystemName, status: SystemStatus, options: { critical?: boolean } = {}): this {
    this.#known.add(system);
    this.#health.set(system, { status, critical: options.critical ?? this.#health.get(system)?.critical ?? false });
    return this;
  }

  /** Whether `/health/ready` says the gateway itself is ready (its queue database answers). */
  ready(ready: boolean): this {
    this.#ready = ready;
    return this;
  }

  /**
   * Calls `receiver` with each callback sent, and waits for it:
   * `@ballast/nestjs/testing` hands them to the app's `@OnBallastTask`
   * handlers this way.
   *
   * @returns a function that removes it
   */
  onCallback(receiver: (callback: FakeCallback) => unknown): () => void {
    this.#receivers.add(receiver);
    return () => void this.#receivers.delete(receiver);
  }

  async #answer(input: string | URL | Request, init: RequestInit | undefined): Promise<Response> {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = (init?.method ?? 'GET').toUpperCase();
    const headers = new Headers(init?.headers);
    if (url.origin === this.adminUrl) return this.#admin(url);
    if (url.origin !== this.baseUrl) throw new TypeError(`the fake gateway serves ${this.baseUrl}, not ${url.origin}`);
    const task = /^\/tasks\/([^/]+)$/.exec(url.pathname);
    if (task) return this.#taskAnswer(decodeURIComponent(task[1]!), url, init?.signal ?? undefined);
    const call = /^\/call\/([^/]+)\/?(.*)$/.exec(url.pathname);
    if (!call) return problem('not_found', { detail: `no such path: ${url.pathname}` });

    const system = decodeURIComponent(call[1]!);
    const body = await bodyText(init?.body);
    const prefer = headers.get('prefer') ?? '';
    const seen: FakeCall = {
      system,
      method,
      path: `${call[2]}${url.search}`,
      key: headers.get('idempotency-key'),
      headers,
      body,
      deferrable: /(^|[\s,])respond-async\b/i.test(prefer),
      callback: headers.get('ballast-callback'),
      answered: 'unscripted',
      json: () => (body === undefined ? undefined : JSON.parse(body)),
    };
    this.calls.push(seen);

    if (!this.#known.has(system)) {
      seen.answered = 'problem';
      return problem('unknown_system', { detail: `no system ${JSON.stringify(system)} in the fake gateway` });
    }
    const route = this.#routes
      .filter((r) => r.matches(system, method, seen.path))
      .reduce<FakeRoute | undefined>((best, r) => (!best || r.specificity() >= best.specificity() ? r : best), undefined);
    const step = route?.take();
    if (!step) {
      return new Response(`no answer scripted for ${method} ${system}/${seen.path}: gateway.on(…)`, {
        status: 404,
        headers: { 'ballast-attempts': '1', 'content-type': 'text/plain' },
      });
    }
    switch (step.kind) {
      case 'reply':
        seen.answered = 'reply';
        return new Response(nullBody(step.status) ? null : (step.body ?? null), {
          status: step.status,
          headers: { 'ballast-attempts': '1', ...step.headers },
        });
      case 'problem':
        seen.answered = 'problem';
        return problem(step.reason, step.problem);
      case 'unreachable': {
        seen.answered = 'unreachable';
        const cause = Object.assign(new Error(step.sent ? 'other side closed' : `connect ECONNREFUSED ${url.host}`), {
          code: step.sent ? 'UND_ERR_SOCKET' : 'ECONNREFUSED',
        });
        throw new TypeError('fetch failed', { cause });
      }
      case 'defer':
        if (!seen.deferrable || seen.key === null) {
          const because = step.deferral.because ?? 'attempts_exhausted';
          const reason: Reason = because in PROBLEM_STATUS ? (because as Reason) : 'transport';
          seen.answered = 'problem';
          return problem(reason, reason === 'transport' ? { sent: true, attempts: 3 } : {});
        }
        seen.answered = 'deferred';
        return this.#defer(seen, step.deferral);
    }
  }

  /** A 202 with a task: a new one, or the one this key was deferred to already. */
  #defer(call: FakeCall, deferral: FakeDeferral): Response {
    let held = [...this.#tasks.values()].find(
      (h) => h.task.system === call.system && keyOf(h) === call.key && !FINAL.has(h.task.state),
    );
    const joined = held !== undefined;
    if (!held) {
      this.#taskCount += 1;
      const next =
        deferral.nextAttemptAt === undefined ? new Date(Date.now() + 1000) : deferral.nextAttemptAt;
      const task: Task & { [KEY]?: string } = {
        task_id: `${this.#taskCount}.fake${randomBytes(6).toString('hex')}`,
        system: call.system as SystemName,
        method: call.method,
        path: call.path,
        state: 'pending',
        attempts: 0,
        max_attempts: 10,
        last_error: 'deferred by the fake gateway',
        run_at: Math.floor(Date.now() / 1000),
        next_attempt_at: next === null ? null : next.getTime() / 1000,
        deferred_because: deferral.because ?? 'attempts_exhausted',
      };
      Object.defineProperty(task, KEY, { value: call.key, enumerable: false });
      held = { task, callbacks: new Set(), waiters: new Set() };
      this.#tasks.set(task.task_id, held);
    }
    if (call.callback !== null) held.callbacks.add(call.callback);
    call.taskId = held.task.task_id;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'preference-applied': 'respond-async',
      location: `/tasks/${held.task.task_id}`,
      'ballast-attempts': String(joined ? 0 : (deferral.attempts ?? 3)),
    };
    if (held.task.next_attempt_at !== null) {
      headers['retry-after'] = String(Math.max(1, Math.ceil(held.task.next_attempt_at - Date.now() / 1000)));
    }
    return new Response(
      JSON.stringify({
        task_id: held.task.task_id,
        deferred_because: joined ? 'already_deferred' : held.task.deferred_because,
        next_attempt_at: held.task.next_attempt_at,
      }),
      { status: 202, headers },
    );
  }

  /** `GET /tasks/{handle}`, held until the task ends when it asks `?wait=`. */
  async #taskAnswer(taskId: string, url: URL, signal: AbortSignal | undefined): Promise<Response> {
    const held = this.#tasks.get(taskId);
    if (!held) return problem('not_found', { detail: 'no deferred write has this handle' });
    const wait = /^(\d+)ms$/.exec(url.searchParams.get('wait') ?? '');
    if (wait && !FINAL.has(held.task.state)) {
      await new Promise<void>((resolve, reject) => {
        const done = () => {
          clearTimeout(timer);
          held.waiters.delete(done);
          signal?.removeEventListener('abort', aborted);
          resolve();
        };
        const aborted = () => {
          done();
          reject(signal!.reason);
        };
        const timer = setTimeout(done, Number(wait[1]));
        held.waiters.add(done);
        signal?.addEventListener('abort', aborted, { once: true });
      });
    }
    return json(200, held.task);
  }

  #admin(url: URL): Response {
    const systems: SystemHealth[] = [...this.#known].sort().map((system) => {
      const { status, critical } = this.#health.get(system) ?? { status: 'up' as const, critical: false };
      const state = status === 'up' ? 'closed' : status === 'degraded' ? 'half_open' : 'open';
      return {
        system: system as SystemName,
        critical,
        status,
        state,
        since_secs: 0,
        next_probe_in_secs: status === 'unavailable' ? 30 : null,
      };
    });
    if (url.pathname === '/health/ready') {
      return json(this.#ready ? 200 : 503, { ready: this.#ready, systems, queue: { reachable: this.#ready } });
    }
    if (url.pathname === '/health/systems') {
      const rank: Record<SystemStatus, number> = { up: 0, degraded: 1, unavailable: 2 };
      const status = systems.reduce<SystemStatus>((worst, s) => (rank[s.status] > rank[worst] ? s.status : worst), 'up');
      const down = systems.some((s) => s.critical && s.status === 'unavailable');
      return json(down ? 503 : 200, { status, systems });
    }
    return new Response('not found', { status: 404 });
  }

  async #end(taskId: string, state: TaskState, result: FakeResult | undefined, error: string | null): Promise<Task> {
    const held = this.#tasks.get(taskId);
    if (!held) throw new TypeError(`no deferred write ${taskId} in the fake gateway`);
    if (FINAL.has(held.task.state)) throw new TypeError(`deferred write ${taskId} is ${held.task.state} already`);
    const task = held.task;
    task.state = state;
    task.attempts += state === 'cancelled' ? 0 : 1;
    task.next_attempt_at = null;
    task.last_error = error;
    if (result) task.result = answerOf(result);
    for (const done of [...held.waiters]) done();

    const type = `task.${state}` as CallbackType;
    const sent: FakeCallback[] = [...held.callbacks].map((url) => {
      const body = JSON.stringify({ type, task });
      return { url, body, signature: signCallback(this.callbackSecret, body), delivery: randomUUID(), taskId, type };
    });
    this.callbacks.push(...sent);
    const receivers = [...this.#receivers];
    for (const callback of sent) {
      for (const receiver of receivers) await receiver(callback);
    }
    return structuredClone(task);
  }
}

const FINAL: ReadonlySet<TaskState> = new Set<TaskState>(['completed', 'failed', 'cancelled']);

/** Where a task keeps the key it was deferred with, out of its JSON. */
const KEY = Symbol('key');

function keyOf(held: Held): string | undefined {
  return (held.task as { [KEY]?: string })[KEY];
}

/** `'POST payments/register'` → `['POST', 'payments/register']`; a leading slash dropped. */
function parseRoute(route: string | undefined): [string | undefined, string | undefined] {
  if (route === undefined) return [undefined, undefined];
  const match = /^\s*(?:([A-Za-z]+)\s+)?\/*(\S*)\s*$/.exec(route);
  if (!match) throw new TypeError(`a route is "[METHOD ]path", e.g. "POST payments/register": not ${JSON.stringify(route)}`);
  return [match[1]?.toUpperCase(), match[2] === '' ? undefined : match[2]];
}

function problem(reason: Reason, options: FakeProblem): Response {
  const status = options.status ?? PROBLEM_STATUS[reason];
  const document: Problem = {
    title: reason,
    status,
    detail: options.detail ?? `${reason} (scripted in the fake gateway)`,
    ballast: {
      reason,
      attempts: options.attempts ?? (reason === 'transport' || reason === 'timeout' ? 1 : 0),
      ...((options.rule ?? RULE[reason]) !== undefined && { rule: (options.rule ?? RULE[reason])! }),
      ...(options.sent !== undefined && { sent: options.sent }),
      ...(reason === 'transport' && options.sent === undefined && { sent: true }),
    },
  };
  const headers: Record<string, string> = {
    'content-type': 'application/problem+json',
    'ballast-problem': reason,
    'ballast-attempts': String(document.ballast.attempts),
  };
  const wait = options.retryAfter ?? (WAIT_AFTER.has(reason) ? 1 : undefined);
  if (wait !== undefined) headers['retry-after'] = String(wait);
  return new Response(JSON.stringify(document), { status, headers });
}

function answerOf(result: FakeResult): Answer {
  const body = result.json !== undefined ? JSON.stringify(result.json) : result.body;
  const headers = { ...(result.json !== undefined && { 'content-type': 'application/json' }), ...result.headers };
  return {
    status: result.status ?? 200,
    headers,
    ...(body !== undefined && body !== '' && { body }),
    body_size: body === undefined ? 0 : Buffer.byteLength(body),
    body_kept: true,
  };
}

function json(status: number, value: unknown): Response {
  return new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json' } });
}

/** Statuses whose response has no body (`new Response` refuses one). */
function nullBody(status: number): boolean {
  return status === 101 || status === 204 || status === 205 || status === 304;
}

/** A request body as text: what a client of this package sends (strings, bytes, form parameters). */
async function bodyText(body: RequestInit['body'] | undefined): Promise<string | undefined> {
  if (body === undefined || body === null) return undefined;
  return new Response(body).text();
}
