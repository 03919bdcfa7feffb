// A local Sber-like payment API that deduplicates by Idempotency-Key — each
// keyed write is applied once per key and its answer replayed — and fails on
// cue: answers lost after applying, connections reset, 503s, an outage.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What one request meets instead of a plain answer. */
export type Fault = 'lost' | 'reset' | '503';

/** The kinds of request the API serves. */
export type Kind = 'order' | 'register' | 'confirm' | 'receipt';

interface Answer {
  status: number;
  body: unknown;
}

export class SberUpstream {
  /** Payments applied, per order: more than one is a double charge. */
  readonly charges = new Map<string, number>();
  /** Confirmations applied, per order. */
  readonly confirmations = new Map<string, number>();
  /** Receipt requests that arrived, per order, applied or not. */
  readonly receipts = new Map<string, number>();
  /** The payment id each order's registration was answered with. */
  readonly paymentIds = new Map<string, string>();
  /** The distinct Idempotency-Keys each order's keyed writes came with, per kind (`register order-1`). */
  readonly keys = new Map<string, Set<string>>();
  /** Keyed writes that arrived, per key, applied, replayed or refused: the gateway's attempts. */
  readonly requestsPerKey = new Map<string, number>();
  /** Faults met so far, by kind; `outage` counts requests answered 503 while down. */
  readonly injected: Record<Fault | 'outage', number> = { lost: 0, reset: 0, '503': 0, outage: 0 };

  readonly #plans = new Map<string, Fault[]>();
  readonly #replays = new Map<string, Answer>();
  #down = false;

  private constructor(
    private readonly server: Server,
    /** The port it listens on, on 127.0.0.1. */
    readonly port: number,
  ) {}

  /** An upstream on a free loopback port. */
  static async start(): Promise<SberUpstream> {
    let upstream: SberUpstream | undefined;
    const server = createServer((req, res) => void upstream?.handle(req, res));
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
    upstream = new SberUpstream(server, (server.address() as AddressInfo).port);
    return upstream;
  }

  /** The faults the next requests of `kind` for `order` meet, one each, in order. */
  plan(kind: Kind, order: string, faults: Fault[]): void {
    this.#plans.set(`${kind} ${order}`, [...faults]);
  }

  /** Down (every request answered 503) or back up. */
  outage(down: boolean): void {
    this.#down = down;
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString();
    const body = (text ? JSON.parse(text) : {}) as { orderNumber?: string };
    const path = new URL(req.url ?? '/', 'http://sber').pathname;
    const key = req.headers['idempotency-key'] as string | undefined;

    const [kind, order] = route(req.method ?? 'GET', path, body);
    if (!kind || !order) return send(res, { status: 404, body: { error: `no route ${req.method} ${path}` } });
    if (kind === 'receipt') this.receipts.set(order, (this.receipts.get(order) ?? 0) + 1);
    if (key && (kind === 'register' || kind === 'confirm')) {
      const keys = this.keys.get(`${kind} ${order}`) ?? new Set<string>();
      this.keys.set(`${kind} ${order}`, keys.add(key));
      this.requestsPerKey.set(key, (this.requestsPerKey.get(key) ?? 0) + 1);
    }
    if (this.#down) {
      this.injected.outage++;
      return send(res, { status: 503, body: { error: 'down for maintenance' } });
    }
    const fault = this.#plans.get(`${kind} ${order}`)?.shift();
    if (fault === 'reset') {
      this.injected.reset++;
      req.socket.resetAndDestroy();
      return;
    }
    if (fault === '503') {
      this.injected['503']++;
      return send(res, { status: 503, body: { error: 'busy' } });
    }
    const answer = this.apply(kind, order, key);
    if (fault === 'lost') {
      // Applied; the answer never leaves.
      this.injected.lost++;
      req.socket.destroy();
      return;
    }
    send(res, answer);
  }

  /** The request's effect, once per key for keyed writes (the answer replayed after). */
  private apply(kind: Kind, order: string, key: string | undefined): Answer {
    if (kind === 'order')
      return { status: 200, body: { orderNumber: order, amount: 12_500, currency: 'RUB', status: 'CREATED' } };
    if (kind === 'receipt') return { status: 201, body: { receiptId: `receipt-${order}` } };
    if (!key) return { status: 400, body: { error: 'Idempotency-Key is required' } };
    const replay = this.#replays.get(key);
    if (replay) return replay;
    const applied = kind === 'register' ? this.charges : this.confirmations;
    applied.set(order, (applied.get(order) ?? 0) + 1);
    let answer: Answer;
    if (kind === 'register') {
      const paymentId = `payment-${order}-${applied.get(order)}`;
      this.paymentIds.set(order, paymentId);
      answer = { status: 201, body: { paymentId, orderNumber: order } };
    } else {
      answer = { status: 200, body: { orderNumber: order, status: 'CONFIRMED' } };
    }
    this.#replays.set(key, answer);
    return answer;
  }
}

function route(method: string, path: string, body: { orderNumber?: string }): [Kind?, string?] {
  const confirm = /^\/orders\/([^/]+)\/confirm$/.exec(path);
  const order = /^\/orders\/([^/]+)$/.exec(path);
  if (method === 'GET' && order) return ['order', order[1]];
  if (method === 'POST' && confirm) return ['confirm', confirm[1]];
  if (method === 'POST' && path === '/payments/register') return ['register', body.orderNumber];
  if (method === 'POST' && path === '/receipts') return ['receipt', body.orderNumber];
  return [];
}

function send(res: ServerResponse, { status, body }: Answer): void {
  // One request per connection: no pooled connection closed under the gateway.
  res.writeHead(status, { 'content-type': 'application/json', connection: 'close' }).end(JSON.stringify(body));
}
