// Keys: keyFor derives Rust's IdempotencyKey::v5 (the vectors in
// key-vectors.json are checked by crates/ballast-cli/tests/key_vectors.rs
// too) or a team's own UUID v5 scheme, newKey makes UUID v7s that
// IdempotencyKey.store hands out once stored, IdempotencyKey.from reads a
// stored key back.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';

import { IdempotencyKey, KEY_NAMESPACE, MAX_KEY_LENGTH, keyFor, newKey } from '@ballast/client';

const file = JSON.parse(readFileSync(new URL('./key-vectors.json', import.meta.url), 'utf8'));

describe('keyFor', () => {
  test('gives the keys of the shared vectors', () => {
    assert.equal(file.namespace, KEY_NAMESPACE);
    assert.ok(file.vectors.length >= 10);
    for (const { name, operation, key } of file.vectors) {
      assert.equal(keyFor(name, operation), key, `keyFor(${JSON.stringify(name)}, ${JSON.stringify(operation)})`);
    }
  });

  test('the namespace is the UUID v5 of its URL in the URL namespace', () => {
    const hash = createHash('sha1')
      .update(Buffer.from('6ba7b8119dad11d180b400c04fd430c8', 'hex'))
      .update('https://docs.rs/ballast/idempotency-key')
      .digest();
    hash[6] = (hash[6] & 0x0f) | 0x50;
    hash[8] = (hash[8] & 0x3f) | 0x80;
    assert.equal(hash.subarray(0, 16).toString('hex'), KEY_NAMESPACE.replaceAll('-', ''));
  });

  test('is deterministic and keeps apart what concatenation would not', () => {
    assert.equal(keyFor('order-1', 'pay'), keyFor('order-1', 'pay'));
    assert.notEqual(keyFor('a/b', 'c'), keyFor('a', 'b/c'));
    assert.notEqual(keyFor('order-1', 'pay'), keyFor('order-1', 'refund'));
  });

  test('writes integers as Rust does and refuses other numbers', () => {
    assert.equal(keyFor(7, 'pay'), keyFor('7', 'pay'));
    assert.equal(keyFor(42n, 'pay'), keyFor('42', 'pay'));
    assert.equal(keyFor(-3, 'pay'), keyFor('-3', 'pay'));
    for (const bad of [1.5, 1e21, Number.NaN, 2 ** 53]) {
      assert.throws(() => keyFor(bad, 'pay'), /as a string/, String(bad));
    }
  });
});

describe('keyFor(name, { namespace })', () => {
  test('is uuid.v5(name, namespace): the vectors of RFC 9562 and Python', () => {
    // Python: uuid.uuid5(uuid.NAMESPACE_DNS, 'python.org')
    assert.equal(keyFor('python.org', { namespace: '6ba7b810-9dad-11d1-80b4-00c04fd430c8' }), '886313e1-3b8a-5372-9b90-0c9aee199e5d');
    // RFC 9562 appendix A.4: "www.example.com" in the DNS namespace
    assert.equal(
      keyFor('www.example.com', { namespace: '6ba7b810-9dad-11d1-80b4-00c04fd430c8' }),
      '2ed6657d-e927-568b-95e1-2665a8aea6a2',
    );
    // ballast's own namespace is the v5 of its URL in the URL namespace
    assert.equal(
      keyFor('https://docs.rs/ballast/idempotency-key', { namespace: '6BA7B811-9DAD-11D1-80B4-00C04FD430C8' }),
      KEY_NAMESPACE,
    );
  });

  test("reproduces a team's `${id}:${op}` scheme, and is not ballast's", () => {
    const OUR_NS = '1b671a64-40d5-491e-99b0-da01ff1f3341';
    const key = keyFor('order-42:register-payment', { namespace: OUR_NS });
    assert.equal(key, keyFor('order-42:register-payment', { namespace: OUR_NS }));
    assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.notEqual(key, keyFor('order-42', 'register-payment'));
    assert.equal(key, keyFor('order-42:register-payment', { namespace: OUR_NS.toUpperCase() }), 'either case');
  });

  test('refuses a namespace that is not a UUID', () => {
    assert.throws(() => keyFor('x', { namespace: 'our-namespace' }), /not a UUID/);
    assert.throws(() => keyFor('x', {}), /not a UUID/);
    assert.throws(() => keyFor(42, { namespace: KEY_NAMESPACE }), /the name is a string/);
  });
});

describe('IdempotencyKey.store', () => {
  test('hands the fresh key out once a synchronous save returned', () => {
    const fresh = newKey();
    const saved = [];

    const key = IdempotencyKey.store(fresh, (k) => saved.push(k));

    assert.equal(key, fresh);
    assert.deepEqual(saved, [fresh]);
  });

  test('hands it out once an asynchronous save resolved, and not before', async () => {
    const fresh = newKey();
    let stored = false;

    const pending = IdempotencyKey.store(fresh, async () => {
      await new Promise((resolve) => setTimeout(resolve, 10));
      stored = true;
    });

    assert.ok(pending instanceof Promise);
    assert.equal(await pending, fresh);
    assert.ok(stored);
  });

  test('hands out nothing when the save fails', async () => {
    assert.throws(
      () =>
        IdempotencyKey.store(newKey(), () => {
          throw new Error('unique violation');
        }),
      /unique violation/,
    );
    await assert.rejects(
      IdempotencyKey.store(newKey(), async () => {
        throw new Error('database down');
      }),
      /database down/,
    );
  });
});

describe('newKey', () => {
  test('is a UUID v7: version 7, RFC 9562 variant, the time in its first 48 bits', () => {
    const before = Date.now();
    const key = newKey();
    const after = Date.now();
    assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const millis = Number.parseInt(key.replaceAll('-', '').slice(0, 12), 16);
    assert.ok(before <= millis && millis <= after, `${millis} in [${before}, ${after}]`);
  });

  test('is new every time', () => {
    const keys = new Set(Array.from({ length: 1000 }, newKey));
    assert.equal(keys.size, 1000);
  });
});

describe('IdempotencyKey.from', () => {
  test('takes what Rust IdempotencyKey::parse takes', () => {
    for (const good of ['k', 'order-42/register-payment', '!~', 'x'.repeat(MAX_KEY_LENGTH), keyFor('a', 'b')]) {
      assert.equal(IdempotencyKey.from(good), good);
    }
  });

  test('refuses what Rust refuses, saying why', () => {
    assert.throws(() => IdempotencyKey.from(''), /empty/);
    assert.throws(() => IdempotencyKey.from('has space'), /" " at byte 3/);
    assert.throws(() => IdempotencyKey.from('tab\there'), /visible ASCII/);
    assert.throws(() => IdempotencyKey.from('ключ'), /"к" at byte 0/);
    assert.throws(() => IdempotencyKey.from('k🧾'), /"🧾" at byte 1/);
    assert.throws(() => IdempotencyKey.from('x'.repeat(MAX_KEY_LENGTH + 1)), /256 bytes long/);
    assert.throws(() => IdempotencyKey.from(undefined), /empty/);
  });
});
