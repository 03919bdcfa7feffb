// One implementation behind `import` and `require` of @ballast/nestjs (and
// of @ballast/client under it): a Nest app whose modules load it both ways
// — an ES module app on a CommonJS library, say — has one BallastModule,
// one BallastClient token, one BallastTaskEvents.

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

import { Inject, Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';

import * as esm from '@ballast/nestjs';
import * as esmTesting from '@ballast/nestjs/testing';
import * as esmClient from '@ballast/client';

import { assertSameExports } from '../../../test-support/serve.mjs';

const require = createRequire(import.meta.url);
const cjs = require('@ballast/nestjs');
const cjsTesting = require('@ballast/nestjs/testing');

test('import and require give the same exports, every one the same object', () => {
  assert.match(import.meta.resolve('@ballast/nestjs'), /dist\/esm\/index\.js$/);
  assert.match(require.resolve('@ballast/nestjs'), /dist[\\/]cjs[\\/]index\.js$/);
  assertSameExports([esm, cjs], [esmTesting, cjsTesting]);
  for (const name of Object.keys(esmClient)) assert.equal(esm[name], esmClient[name], `${name}: the client's own`);
});

test('a module set up through one and a provider injecting through the other meet', async () => {
  class Adapter {
    constructor(client, sber) {
      Object.assign(this, { client, sber });
    }
  }
  Inject(cjs.BallastClient)(Adapter, undefined, 0);
  cjs.InjectBallast('sber')(Adapter, undefined, 1);
  Injectable()(Adapter);
  class Feature {}
  Module({ imports: [esm.BallastModule.forFeature({ system: 'sber' })], providers: [Adapter] })(Feature);

  const moduleRef = await Test.createTestingModule({
    imports: [esm.BallastModule.forRoot({ isGlobal: true, baseUrl: 'http://127.0.0.1:9465' }), Feature],
  }).compile();

  const adapter = moduleRef.get(Adapter);
  assert.ok(adapter.client instanceof esm.BallastClient);
  assert.equal(adapter.client, moduleRef.get(esmClient.BallastClient));
  assert.equal(adapter.sber.name, 'sber');
  await moduleRef.close();
});
