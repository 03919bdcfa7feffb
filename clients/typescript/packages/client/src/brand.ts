/**
 * What makes an error of this package recognisable by something other than
 * its class: a list of kinds under a registered symbol, the same in every
 * copy of the package that is loaded — another version nested under a
 * library, a bundle that inlined one. `instanceof` the package's error
 * classes and the `is…` guards both read it, so a `catch` written against
 * one copy still knows an error thrown by another.
 */

/** The registered symbol every copy of `@ballast/client` brands its errors with. */
export const BRAND: unique symbol = Symbol.for('@ballast/client:error') as never;

/** The kinds of the error classes, most general first. */
export type Kind = 'BallastError' | 'SystemUnavailableError' | 'GatewayUnreachableError' | 'TaskWaitTimeoutError';

/** Marks `cls`'s instances as the `kinds` given (its own last). */
export function brand(cls: abstract new (...args: never[]) => unknown, kinds: readonly Kind[]): void {
  Object.defineProperty(cls.prototype, BRAND, { value: Object.freeze([...kinds]), enumerable: false });
}

/** Whether `value` carries the brand `kind`, whichever copy of the package made it. */
export function hasKind(value: unknown, kind: Kind): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const kinds: unknown = (value as { [BRAND]?: unknown })[BRAND];
  return Array.isArray(kinds) && kinds.includes(kind);
}

/**
 * `instanceof` for a branded class: `value` was made by this class in any
 * copy of the package. A subclass of your own, which adds no brand, is
 * checked the ordinary way.
 */
export function isInstance(cls: abstract new (...args: never[]) => unknown, value: unknown): boolean {
  if (Function.prototype[Symbol.hasInstance].call(cls, value)) return true;
  if (!Object.hasOwn(cls.prototype as object, BRAND)) return false;
  const own = (cls.prototype as { [BRAND]: readonly Kind[] })[BRAND];
  return hasKind(value, own[own.length - 1]!);
}
