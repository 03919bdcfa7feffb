// serve.mjs's types, for the example's end-to-end test: TypeScript, type-checked
// by `tsc` in examples/sber-adapter, which has this directory as a dev dependency.

import type { IncomingHttpHeaders } from 'node:http';

export declare const PATIENCE_MS: number;
export declare const TOKEN: string;

/** An upstream answer. */
export interface Reply {
  status: number;
  body: string;
  headers: Record<string, string>;
}

/** A request the upstream got, with the status it answered (none when dropped). */
export interface Seen {
  path: string;
  url: string;
  method: string;
  headers: IncomingHttpHeaders;
  body: string;
  status?: number;
}

export interface Upstream {
  port: number;
  on(path: string, answer: (n: number, request: Seen) => Reply | 'drop'): void;
  seen(path: string): Seen[];
  stop(): Promise<void>;
}

export interface Served {
  admin: string;
  gateway: string;
  stop(): Promise<void>;
}

export declare function reply(status: number, body?: string, headers?: Record<string, string>): Reply;
export declare function busy(): Reply;
export declare function startUpstream(): Promise<Upstream>;
export declare function startBallast(file: string | URL, values?: Record<string, string | number>): Promise<Served>;
export declare function eventually<T>(
  what: string,
  check: () => T | false | undefined | Promise<T | false | undefined>,
): Promise<T>;
export declare function rejection(promise: Promise<unknown>): Promise<unknown>;
