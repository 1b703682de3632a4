// The OpenAPI document `tern demo` serves at /v1/openapi.json validates against the OpenAPI
// 3.0 schema (swagger-parser: JSON-schema validation plus its semantic checks, e.g. path
// parameters declared, unique operation parameters). That every route is documented, and that
// every documented operation answers a documented status, is checked in
// crates/tern/tests/e2e/api.rs.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import { startServer } from './server.mjs';

describe('openapi', { timeout: 60_000 }, () => {
  let server;

  before(async () => {
    server = await startServer({ readyTimeoutMs: 20_000 });
  });

  after(async () => {
    await server?.stop();
  });

  it('validates against the OpenAPI 3.0 schema', async () => {
    const res = await fetch(`${server.base}/v1/openapi.json`);
    assert.equal(res.status, 200);
    const doc = await res.json();
    assert.equal(doc.openapi, '3.0.3');
    const paths = Object.keys(doc.paths).length;
    // Throws, naming the first violation, if the document is not valid.
    const api = await SwaggerParser.validate(structuredClone(doc));
    assert.equal(Object.keys(api.paths).length, paths);
    assert.ok(paths >= 15, `${paths} paths`);
  });

  it('a broken document is rejected (the validator is not a no-op)', async () => {
    const doc = await (await fetch(`${server.base}/v1/openapi.json`)).json();
    // A response without its required description.
    doc.paths['/v1/apps'].get.responses['200'] = { content: { 'application/json': {} } };
    await assert.rejects(SwaggerParser.validate(doc));
  });
});
