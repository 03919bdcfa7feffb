import { createHash, randomBytes } from 'node:crypto';

declare const checked: unique symbol;
declare const fresh: unique symbol;

/**
 * The key an external system deduplicates a write by: 1 to 255 visible ASCII
 * characters, as ballast's Rust `IdempotencyKey` is.
 *
 * Make one **once per user action** and store it with the domain object —
 * never once per attempt — and hand it to a write only from there:
 *
 * - {@link keyFor}: deterministic, the same for every attempt, process and
 *   replica that derives it — nothing to store;
 * - {@link newKey}, then {@link IdempotencyKey.store}: a fresh UUID v7 is a
 *   {@link FreshKey}, which no write takes until it has been stored;
 * - {@link IdempotencyKey.from}: a stored key read back, checked.
 *
 * A plain `string` is not a key, nor is a fresh one: the compiler refuses
 * both where a write needs a key, so a key cannot be forgotten, made up on
 * the spot, or made anew on each attempt (R-RES-RE-1).
 */
export type IdempotencyKey = string & { readonly [checked]: true };

/**
 * A key just made by {@link newKey}, not stored yet. A write does not take
 * it: a key made inside the call is a new key on every attempt, every
 * retry of the user's action and every replica, and the system
 * deduplicates nothing — the guide's double charge. Store it with the
 * domain object first; {@link IdempotencyKey.store} then gives the
 * {@link IdempotencyKey} to write with.
 */
export type FreshKey = string & { readonly [fresh]: true };

/** What {@link IdempotencyKey.from} says when it is handed a key that was never stored. */
type StoreItFirst = 'a fresh key: store it with IdempotencyKey.store(key, save) first';

/** The longest key accepted, in bytes (as in Rust). */
export const MAX_KEY_LENGTH = 255;

/**
 * The namespace of {@link keyFor}'s UUIDs: Rust's `ballast::KEY_NAMESPACE`,
 * the UUID v5 of `https://docs.rs/ballast/idempotency-key` in the URL
 * namespace.
 */
export const KEY_NAMESPACE = 'f35c9ecb-294e-5662-a13f-9edcadcaad03';

/**
 * Keys that were stored: a fresh one stored ({@link IdempotencyKey.store}),
 * a stored one read back ({@link IdempotencyKey.from}), both checked with the
 * rules of Rust's `IdempotencyKey::parse`.
 */
export const IdempotencyKey = {
  /**
   * `text`, a key read back from where it was stored, as a key, if it is
   * one: 1 to 255 characters from `!` to `~`. A {@link FreshKey} is refused
   * by the compiler: store it first ({@link IdempotencyKey.store}).
   *
   * @throws TypeError naming what is wrong with it
   * @example
   * const key = IdempotencyKey.from(order.paymentKey); // a column of the orders table
   */
  from<const T extends string>(text: T extends FreshKey ? StoreItFirst : T): IdempotencyKey {
    return checkedKey(text);
  },

  /**
   * `key`, made by {@link newKey}, once `save` has stored it — with the
   * order, the payment, whatever the user's action made — as the
   * {@link IdempotencyKey} a write takes. Store it where the next attempt,
   * the next press of the button and the next replica find it; they read it
   * back with {@link IdempotencyKey.from}.
   *
   * @param save stores the key; when it returns a promise, the key is given once it resolves
   * @returns the key, or a promise of it when `save` returns one
   * @throws whatever `save` throws: a key that was not stored is not handed out
   * @example
   * const key = await IdempotencyKey.store(newKey(), (key) => orders.setPaymentKey(orderId, key));
   * await sber.write('payments/register', { key, json: toApiRequest(cmd) });
   */
  store: storeKey,
} as const;

function storeKey(key: FreshKey, save: (key: IdempotencyKey) => PromiseLike<unknown>): Promise<IdempotencyKey>;
function storeKey(key: FreshKey, save: (key: IdempotencyKey) => unknown): IdempotencyKey;
function storeKey(
  key: FreshKey,
  save: (key: IdempotencyKey) => unknown,
): IdempotencyKey | Promise<IdempotencyKey> {
  const checked = checkedKey(key);
  const saved = save(checked);
  if (typeof (saved as PromiseLike<unknown> | undefined)?.then === 'function') {
    return Promise.resolve(saved).then(() => checked);
  }
  return checked;
}

/** `text` as a key, if it is one. */
function checkedKey(text: string): IdempotencyKey {
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
}

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
 * @example
 * const key = keyFor(order.id, 'confirm-payment'); // every attempt, process and replica: the same key
 */
export function keyFor(entityId: string | number | bigint, operation: string): IdempotencyKey;
/**
 * A key from a scheme of your own: the UUID v5 of `name` (as UTF-8) in
 * `namespace` — what `uuid.v5(name, namespace)` gives — so that keys a
 * service already derives, and that systems already hold, stay the same.
 *
 * @param name what the key is made from, exactly as your scheme writes it
 * @param options.namespace the scheme's namespace, a UUID
 * @example
 * // uuid.v5(`${order.id}:${op}`, OUR_NS) until now:
 * const key = keyFor(`${order.id}:${op}`, { namespace: OUR_NS });
 */
export function keyFor(name: string, options: { namespace: string }): IdempotencyKey;
export function keyFor(entityId: string | number | bigint, operation: string | { namespace: string }): IdempotencyKey {
  if (typeof operation === 'object' && operation !== null) {
    if (typeof entityId !== 'string') {
      throw new TypeError(`keyFor(name, { namespace }): the name is a string, not ${typeof entityId}`);
    }
    const { namespace } = operation;
    if (typeof namespace !== 'string' || !UUID.test(namespace)) {
      throw new TypeError(`keyFor(name, { namespace }): ${JSON.stringify(namespace)} is not a UUID`);
    }
    return uuidV5(namespace, entityId) as IdempotencyKey;
  }
  if (typeof operation !== 'string') {
    throw new TypeError('keyFor(entityId, operation): name the operation, or pass { namespace } for a scheme of your own');
  }
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
 * A fresh, time-ordered UUID v7 (RFC 9562 §5.7), for an action that may
 * legitimately happen more than once per entity (a second payment with
 * another card). It is a {@link FreshKey}: no write takes it until
 * {@link IdempotencyKey.store} has stored it with the action, because a key
 * made inside the call is a new key on every attempt and deduplicates
 * nothing.
 *
 * @example
 * const key = await IdempotencyKey.store(newKey(), (key) => payments.create({ orderId, key }));
 */
export function newKey(): FreshKey {
  const bytes = randomBytes(16);
  // 48 bits of Unix milliseconds, then the version, 74 random bits and the variant.
  bytes.writeUIntBE(Date.now(), 0, 6);
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  return hyphenated(bytes) as FreshKey;
}

/** A UUID in its hyphenated form, any version, either case. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

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
