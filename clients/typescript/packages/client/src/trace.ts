/**
 * The caller's trace context on every call, when `@opentelemetry/api` is
 * installed: the gateway continues the trace over its attempts and over a
 * deferred write's delivery. Without the package nothing is added, and
 * nothing is required.
 */

/** The part of `@opentelemetry/api` used here, typed locally so that it stays optional. */
interface OtelApi {
  context: { active(): unknown };
  propagation: { inject(context: unknown, carrier: Record<string, string>): void };
  trace: {
    getSpanContext(context: unknown): { traceId: string; spanId: string; traceFlags: number } | undefined;
    isSpanContextValid(spanContext: { traceId: string; spanId: string; traceFlags: number }): boolean;
  };
}

// Looked up once per process: a missing package stays missing.
let api: Promise<OtelApi | undefined> | undefined;

function loadApi(): Promise<OtelApi | undefined> {
  // A variable, so that neither TypeScript nor a bundler insists on the package.
  const name = '@opentelemetry/api';
  api ??= import(name).then(
    (module: { default?: OtelApi } & Partial<OtelApi>) => (module.propagation ? (module as OtelApi) : module.default),
    () => undefined,
  );
  return api;
}

/**
 * The active context's `traceparent` (and whatever else the registered
 * propagator writes, `tracestate` say) for `headers` that do not carry one.
 * With no propagator registered, the active span's context is still sent as
 * a W3C `traceparent`, which is what the gateway reads.
 */
export async function traceHeaders(headers: Headers): Promise<void> {
  if (headers.has('traceparent')) return;
  const otel = await loadApi();
  if (!otel) return;
  const active = otel.context.active();
  const carrier: Record<string, string> = {};
  otel.propagation.inject(active, carrier);
  if (carrier['traceparent'] === undefined) {
    const span = otel.trace.getSpanContext(active);
    if (!span || !otel.trace.isSpanContextValid(span)) return;
    const flags = (span.traceFlags & 0xff).toString(16).padStart(2, '0');
    carrier['traceparent'] = `00-${span.traceId}-${span.spanId}-${flags}`;
  }
  for (const [name, value] of Object.entries(carrier)) headers.set(name, value);
}
