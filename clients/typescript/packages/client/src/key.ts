import { createHash, randomBytes } from 'node:crypto';

declare const checked: unique symbol;

/**
 * The key an external system deduplicates a write by: 1 to 255 visible ASCII
 * characters, as ballast's Rust `IdempotencyKey` is.
 *
 * Make one **once per user action** and store it with the domain object —
 * never once per attempt — with {@link keyFor} (deterministic) or
 * {@link newKey} (a UUID v7 to store), and read a stored one back with
 * {@link IdempotencyKey.from}. A plain `string` is not a key: the compiler
 * refuses it where a write needs one, so a key cannot be forgotten or made
 * up on the spot (R-RES-RE-1).
 */
export type IdempotencyKey = string & { readonly [checked]: true };

/** The longest key accepted, in bytes (as in Rust). */
export const MAX_KEY_LENGTH = 255;

/**
 * The namespace of {@link keyFor}'s UUIDs: Rust's `ballast::KEY_NAMESPACE`,
 * the UUID v5 of `https://docs.rs/ballast/idempotency-key` in the URL
 * namespace.
 */
export const KEY_NAMESPACE = 'f35c9ecb-294e-5662-a13f-9edcadcaad03';

/** Reading a stored key back: the same rules as Rust's `IdempotencyKey::parse`. */
export const IdempotencyKey = {
  /**
   * `text` as a key, if it is one: 1 to 255 characters from `!` to `~`.
   *
   * @throws TypeError naming what is wrong with it
   */
  from(text: string): IdempotencyKey {
    if (typeof text !== 'string' || text === '') {
      throw new TypeError('idempotency key is empty: it needs 1 to 255 visible ASCII characters');
    }
    for (let i = 0; i < text.length; i++) {
      const code = text.codePointAt(i)!;
      if (code < 0x21 || code > 0x7e) {
        // Every character before it is ASCII: `i` is also its byte offset, as Rust reports it.
        const found = JSON.stringify(String.fromCodePoint(code));
        throw new TypeError(
          `idempotency key has ${found} at byte ${i}: ` +
            "only visible ASCII characters ('!' to '~') are allowed, no spaces or control characters",
        );
      }
    }
    if (text.length > MAX_KEY_LENGTH) {
      throw new TypeError(
        `idempotency key is ${text.length} bytes long: at most ${MAX_KEY_LENGTH} visible ASCII characters are allowed`,
      );
    }
    return text as IdempotencyKey;
  },
} as const;

/**
 * A deterministic key for one operation on one entity: the same UUID v5 as
 * Rust's `IdempotencyKey::v5(entityId, operation)`, so services in either
 * language derive the same key. Use it when the operation happens at most
 * once per entity ("confirm order 42"); when it may legitimately happen again
 * (a second payment with another card), store a {@link newKey} per user action
 * instead.
 *
 * @param entityId a string, or an integer (written as Rust's `Display` writes it)
 * @param operation what is done to it, e.g. `'register-payment'`
 */
export function keyFor(entityId: string | number | bigint, operation: string): IdempotencyKey {
  if (typeof entityId === 'number' && !Number.isSafeInteger(entityId)) {
    // JavaScript and Rust write other numbers differently (1e21, 0.1 + 0.2):
    // the same entity would get another key in each language.
    throw new TypeError(`keyFor(${entityId}, …): pass an entity id that is not a safe integer as a string`);
  }
  const entity = String(entityId);
  // The length prefix keeps ('a/b', 'c') and ('a', 'b/c') apart; Rust counts bytes.
  return uuidV5(KEY_NAMESPACE, `${Buffer.byteLength(entity)}:${entity}${operation}`) as IdempotencyKey;
}

/**
 * A fresh, time-ordered UUID v7 key (RFC 9562 §5.7). Make it once per user
 * action and store it: a new one on every attempt defeats deduplication.
 */
export function newKey(): IdempotencyKey {
  const bytes = randomBytes(16);
  // 48 bits of Unix milliseconds, then the version, 74 random bits and the variant.
  bytes.writeUIntBE(Date.now(), 0, 6);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  return hyphenated(bytes) as IdempotencyKey;
}

/** A name-based UUID, version 5 (SHA-1), as RFC 9562 §5.5 defines it; the name as UTF-8. */
function uuidV5(namespace: string, name: string): string {
  const hash = createHash('sha1')
    .update(Buffer.from(namespace.replaceAll('-', ''), 'hex'))
    .update(name, 'utf8')
    .digest()
    .subarray(0, 16);
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  return hyphenated(hash);
}

function hyphenated(bytes: Buffer): string {
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
