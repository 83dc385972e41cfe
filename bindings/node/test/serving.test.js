'use strict';
// serveBench(): sequences over one block pool (docs/serving.md), rows shaped
// as `kvevict serve-bench --format json` prints them. Expectations come from
// the model's shape (caches = layers x KV heads) and the sizes asked for.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { kv, repoRoot } = require('./support');

const modelDir = process.env.KVEVICT_MODEL_DIR ? path.resolve(process.env.KVEVICT_MODEL_DIR) : path.join(repoRoot, 'model');
const kvm = path.join(modelDir, 'kvevict-tiny.kvm');
const heldout = path.join(modelDir, 'heldout-sample.txt');
const skip = fs.existsSync(kvm) && fs.existsSync(heldout) ? false : `the model folder ${modelDir} lacks the model or the sample`;
if (skip) console.log(`kvevict-node: skipping the serving suite: ${skip}`);

test('serveBench', { skip }, async (t) => {
  const model = new kv.Model(kvm);
  const text = fs.readFileSync(heldout);
  const caches = model.config.layers * model.config.kvHeads;

  await t.test('sharing saves the prefix blocks of the follower; nothing leaks', () => {
    const rows = kv.serveBench(model, text, {
      sequences: [2], policies: 'none,h2o', budget: 64, modes: ['token', 'block'], sharing: [true, false],
      sharedPrefix: 64, tokens: 128,
    });
    assert.deepEqual(rows.map((r) => [r.policy, r.mode, r.prefixSharing]), [
      [null, 'full', 'on'], [null, 'full', 'off'], ['h2o', 'token', 'on'], ['h2o', 'block', 'on'],
      ['h2o', 'token', 'off'], ['h2o', 'block', 'off']]);
    // 128 positions in blocks of 16: 8 per cache; the 64-byte prefix is 4 of them.
    assert.equal(rows[1].peakBlocks, 2 * caches * 8);
    assert.equal(rows[0].peakBlocks, 2 * caches * 8 - caches * 4);
    assert.equal(rows[0].blocksSavedBySharing, caches * 4);
    assert.equal(rows[2].evicted, 2 * caches * 64);
    assert.equal(rows[2].peakCachePositions, 65);
    for (const r of rows) assert.equal(r.leakedBlocks, 0);
  });

  await t.test('a chunked prompt holds at most budget + chunk positions per cache', () => {
    const [row] = kv.serveBench(model, text, {
      sequences: [1], policies: ['snapkv'], budget: 64, chunks: [32], window: 16, sharedPrefix: 0, tokens: 128,
    });
    assert.equal(row.mode, 'chunked');
    assert.equal(row.chunk, 32);
    assert.equal(row.peakCachePositions, 96);
  });

  await t.test('bad requests are one clear error', () => {
    assert.throws(() => kv.serveBench(model, text, { policies: 'h2o', budget: 64, chunks: [300], sharedPrefix: 0, tokens: 128 }),
      (e) => e instanceof kv.ParameterError && e.message.includes('a chunk of 300 positions is larger than the capacity of 128'));
    assert.throws(() => kv.serveBench(model, text, { sharing: 'yes' }),
      { name: 'TypeError', message: 'serveBench: options.sharing must be a boolean or an array of booleans, got a string' });
    assert.throws(() => kv.serveBench(model, text, { modes: 'pages' }),
      (e) => e instanceof kv.ParameterError && e.message.includes("serve-bench: mode 'pages' is not token or block"));
  });

  await t.test('Batch: two equal sequences share every full block and match a solo decoder', () => {
    const batch = new kv.Batch(model, { poolBlocks: 4 * caches * 8, capacity: 64, blockSize: 8 });
    const a = batch.join();
    const b = batch.join();
    const solo = new kv.Decoder(model, 64);
    for (let i = 0; i < 40; ++i) {
      const la = batch.step(a, text[i]);
      const lb = batch.step(b, text[i]);
      const want = solo.step(text[i]);
      assert.deepEqual(Buffer.from(la.buffer), Buffer.from(want.buffer));
      assert.deepEqual(Buffer.from(lb.buffer), Buffer.from(want.buffer));
    }
    const s = batch.poolStats();
    assert.equal(s.inUse, 5 * caches);
    assert.equal(s.references, 10 * caches);
    assert.equal(s.shared, 5 * caches);
    assert.deepEqual(batch.sequences, [a, b]);
    const w = batch.join('sliding-window', 16, null, 'block');
    for (let i = 0; i < 40; ++i) batch.step(w, text[i]);
    assert.deepEqual(batch.held(w, 0), Array.from({ length: 16 }, (_, k) => 24 + k));
    for (const id of [a, b, w]) batch.leave(id);
    assert.equal(batch.poolStats().freeBlocks, 4 * caches * 8);
    assert.throws(() => batch.step(a, 1), (e) => e instanceof kv.InputError && e.message.includes('it has left'));
    assert.throws(() => batch.join(null, null, null, 'block'), { name: 'RangeError', message: "Batch.join: mode 'block' needs a policy" });
    assert.throws(() => new kv.Batch(model, { poolBlocks: caches - 1 }),
      (e) => e instanceof kv.ParameterError && e.message.includes('cannot hold one sequence'));
  });
});
