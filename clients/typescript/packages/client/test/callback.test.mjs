// A callback is believed only once its signature is the gateway's and
// recent: verifyCallback against a vector computed elsewhere (Python's hmac),
// against forgeries, malformed headers and replays.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { CallbackSignatureError, answerJson, signCallback, verifyCallback } from '@ballast/client';

const SECRET = 'whsec-0123456789abcdef';
const T = 1_700_000_000;
// The bytes as the gateway sent them: non-ASCII text and escapes included.
const BODY = String.raw`{"type":"task.completed","task":{"task_id":"17.kM3p","system":"sber","state":"completed","attempts":2,"max_attempts":10,"last_error":null,"run_at":1700000000.5,"next_attempt_at":null,"deferred_because":"breaker_open","result":{"status":201,"headers":{"content-type":"application/json"},"body":"{\"confirmed\":true,\"note\":\"опл\u00e4\"}","body_size":33,"body_kept":true}}}`;
// hmac.new(SECRET, b"1700000000." + BODY.encode(), sha256).hexdigest()
const V1 = '3f6fa5c6df9f6a9e83cc336b2f6411f26fff6a05f92209a933748058de9c45f9';
const SIGNATURE = `t=${T},v1=${V1}`;
const NOW = new Date((T + 10) * 1000);

/** The CallbackSignatureError `f` throws. */
function refusal(f) {
  try {
    f();
  } catch (error) {
    assert.ok(error instanceof CallbackSignatureError, String(error));
    assert.equal(error.name, 'CallbackSignatureError');
    return error;
  }
  return assert.fail('expected a CallbackSignatureError');
}

describe('verifyCallback', () => {
  test('a genuine callback gives its event, from a string, a Buffer or a Uint8Array', () => {
    for (const body of [BODY, Buffer.from(BODY), new Uint8Array(Buffer.from(BODY))]) {
      const event = verifyCallback({ secret: SECRET, signature: SIGNATURE, body, now: NOW });
      assert.equal(event.type, 'task.completed');
      assert.equal(event.task.task_id, '17.kM3p');
      assert.equal(event.task.result.status, 201);
      assert.deepEqual(answerJson(event.task), { confirmed: true, note: 'оплä' });
    }
    // A Buffer secret, a `now` in ms, spaces around the parts.
    const event = verifyCallback({
      secret: Buffer.from(SECRET),
      signature: ` t=${T} , v1=${V1.toUpperCase()} `,
      body: BODY,
      now: (T - 60) * 1000,
    });
    assert.equal(event.task.state, 'completed');
  });

  test('a body changed by a byte, another secret or a signature of another body is forged', () => {
    const forgeries = [
      { body: BODY.replace('"attempts":2', '"attempts":3') },
      { body: BODY.replace('task.completed', 'task.failed') },
      { body: JSON.stringify(JSON.parse(BODY)) }, // parsed and written again: not the bytes signed
      { secret: 'whsec-0123456789abcdeF' },
      { signature: `t=${T + 1},v1=${V1}` }, // the timestamp is signed too
      { signature: signCallback(SECRET, '{}', T) },
    ];
    for (const forgery of forgeries) {
      const error = refusal(() => verifyCallback({ secret: SECRET, signature: SIGNATURE, body: BODY, now: NOW, ...forgery }));
      assert.equal(error.kind, 'forged', JSON.stringify(forgery));
      assert.match(error.message, /does not match the body/);
    }
  });

  test('a missing or malformed header is forged, and says what it expected', () => {
    const headers = [
      undefined,
      null,
      '',
      V1,
      `v1=${V1}`,
      `t=${T}`,
      `t=${T},v1=${V1.slice(2)}`,
      `t=${T},v1=${V1}zz`,
      `t=-${T},v1=${V1}`,
      `t=${T}.5,v1=${V1}`,
      `t=${T},t=${T},v1=${V1}`,
      `t=${T};v1=${V1}`,
    ];
    for (const signature of headers) {
      const error = refusal(() => verifyCallback({ secret: SECRET, signature, body: BODY, now: NOW }));
      assert.equal(error.kind, 'forged', String(signature));
      assert.match(error.message, /ballast-signature/i);
    }
  });

  test('a genuine signature older or newer than the tolerance is stale: a replay', () => {
    const old = refusal(() =>
      verifyCallback({ secret: SECRET, signature: SIGNATURE, body: BODY, now: new Date((T + 301) * 1000) }),
    );
    assert.equal(old.kind, 'stale');
    assert.equal(old.timestamp, T);
    assert.match(old.message, /301 s ago, more than the 300 s allowed/);

    const ahead = refusal(() =>
      verifyCallback({ secret: SECRET, signature: SIGNATURE, body: BODY, now: new Date((T - 400) * 1000) }),
    );
    assert.equal(ahead.kind, 'stale');
    assert.match(ahead.message, /400 s ahead/);

    // Within the tolerance, either side, and a tolerance of one's own.
    verifyCallback({ secret: SECRET, signature: SIGNATURE, body: BODY, now: new Date((T + 300) * 1000) });
    verifyCallback({ secret: SECRET, signature: SIGNATURE, body: BODY, now: new Date((T - 300) * 1000) });
    const strict = refusal(() =>
      verifyCallback({ secret: SECRET, signature: SIGNATURE, body: BODY, now: NOW, toleranceSec: 5 }),
    );
    assert.equal(strict.kind, 'stale');
    // A forgery is forged whatever its age: the signature is judged first.
    const both = refusal(() =>
      verifyCallback({ secret: 'other', signature: SIGNATURE, body: BODY, now: new Date(0) }),
    );
    assert.equal(both.kind, 'forged');
  });

  test('during a rotation a header may carry several v1: one matching is enough; other schemes are skipped', () => {
    const other = signCallback('the-old-secret', BODY, T).split(',v1=')[1];
    const rotated = `t=${T},v1=${other},v0=abc,v1=${V1}`;
    assert.equal(verifyCallback({ secret: SECRET, signature: rotated, body: BODY, now: NOW }).type, 'task.completed');
    assert.equal(refusal(() => verifyCallback({ secret: 'third', signature: rotated, body: BODY, now: NOW })).kind, 'forged');
  });

  test('the clock is the default now', () => {
    const body = JSON.stringify({ type: 'task.cancelled', task: { task_id: '3.x', state: 'cancelled' } });
    assert.equal(verifyCallback({ secret: SECRET, signature: signCallback(SECRET, body), body }).type, 'task.cancelled');
    const old = signCallback(SECRET, body, Math.floor(Date.now() / 1000) - 3600);
    assert.equal(refusal(() => verifyCallback({ secret: SECRET, signature: old, body })).kind, 'stale');
  });

  test('an empty secret is a mistake, not a key; a signed body that is no event is refused', () => {
    assert.throws(() => verifyCallback({ secret: '', signature: SIGNATURE, body: BODY }), /secret is empty/);
    assert.throws(() => signCallback(new Uint8Array(0), BODY), /secret is empty/);
    const body = '{"hello":"world"}';
    assert.throws(
      () => verifyCallback({ secret: SECRET, signature: signCallback(SECRET, body), body }),
      (e) => e instanceof TypeError && /not a callback event/.test(e.message),
    );
  });

  test('signCallback makes what the gateway sends', () => {
    assert.equal(signCallback(SECRET, BODY, T), SIGNATURE);
    assert.equal(signCallback(Buffer.from(SECRET), Buffer.from(BODY), T), SIGNATURE);
    assert.throws(() => signCallback(SECRET, BODY, 1.5), /whole seconds/);
  });
});
