'use strict';
// BlockEvictor and LayerBudget (docs/paged.md) through Node, on cases worked
// out by hand; the paged options of run/compare/perplexity/compareModel.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { kv, repoRoot } = require('./support');

// docs/paged.md, "A worked case": H2O (recentWindow 0) in blocks of 2, one
// start block, one recent block, a budget of 4 blocks. Steps 1-7 pay no
// attention; step 8 pays [0, 0, 1/8, 1/8, 3/16, 0, 0, 0]. Blocks [0,1] [2,3]
// [4,5] [6,7] [8]: block 0 is the start area, block 3 the recent area, block 4
// partial; block 1 sums 1/4, block 2 3/16.
function workedCase(blockScore, attn = (w) => Float32Array.from(w)) {
  const ev = new kv.BlockEvictor('h2o', 4, { blockSize: 2, startBlocks: 1, recentBlocks: 1, blockScore }, { recentWindow: 0 });
  for (let pos = 1; pos <= 7; pos++) {
    ev.onDecodeStep(pos, attn(new Array(pos).fill(0)));
    assert.deepEqual(ev.evictBlocks(4), []);  // at most 4 blocks until position 8 arrives
  }
  ev.onDecodeStep(8, attn([0, 0, 1 / 8, 1 / 8, 3 / 16, 0, 0, 0]));
  return ev;
}

test('BlockEvictor: the worked case, each reduction (docs/paged.md)', () => {
  const table = {
    sum: { scores: [1 / 4, 3 / 16], gone: [2], positions: [4, 5], shift: [0, 0, 2, 2] },
    mean: { scores: [1 / 8, 3 / 32], gone: [2], positions: [4, 5], shift: [0, 0, 2, 2] },
    max: { scores: [1 / 8, 3 / 16], gone: [1], positions: [2, 3], shift: [0, 2, 2, 2] },
    // each score over the steps its position has been held: position p was admitted at step p
    normsum: { scores: [1 / 8 / 6 + 1 / 8 / 5, 3 / 16 / 4], gone: [1], positions: [2, 3], shift: [0, 2, 2, 2] },
  };
  for (const [reduction, want] of Object.entries(table)) {
    for (const attn of [(w) => Float32Array.from(w), (w) => w]) {
      const ev = workedCase(reduction, attn);
      assert.equal(ev.keptCount(), 9);
      assert.equal(ev.blockCount(), 5);
      assert.equal(ev.blockScoreOf(0), 'protected', reduction);
      assert.ok(Math.abs(ev.blockScoreOf(1) - want.scores[0]) < 1e-9, `${reduction}: block 1 ${ev.blockScoreOf(1)}`);
      assert.ok(Math.abs(ev.blockScoreOf(2) - want.scores[1]) < 1e-9, `${reduction}: block 2 ${ev.blockScoreOf(2)}`);
      assert.equal(ev.blockScoreOf(3), 'protected');
      assert.equal(ev.blockScoreOf(4), -1);  // the partial block is no full block
      assert.deepEqual(ev.evictBlocks(4), want.gone, reduction);
      assert.deepEqual(ev.evictedPositions(), want.positions);
      assert.deepEqual(ev.removedBefore(), want.shift);
      assert.equal(ev.keptCount(), 7);
      assert.deepEqual(ev.positions(), [0, 1, 2, 3, 4, 5, 6, 7, 8].filter((p) => !want.positions.includes(p)));
      // H2O's cumulative attention of a position still held
      if (want.positions.includes(2)) assert.equal(ev.query('scoreOf', [4]), 3 / 16);
      else assert.equal(ev.query('scoreOf', [2]), 1 / 8);
    }
  }
  assert.equal(workedCase('sum').policy, 'h2o');
  assert.equal(workedCase('sum').blockSize, 2);
  assert.ok(workedCase('sum').memoryBytes() > 0);
});

test('BlockEvictor: bad construction is one clear error', () => {
  assert.throws(() => new kv.BlockEvictor('h2o', 4, { blockSize: 0 }), kv.ParameterError);
  assert.throws(() => new kv.BlockEvictor('h2o', 2, { blockSize: 2, startBlocks: 2, recentBlocks: 1 }, { recentWindow: 0 }),
    { name: 'ParameterError', message: /blockBudget \(2\) must be at least startBlocks \+ recentBlocks \(2 \+ 1\)/ });
  assert.throws(() => new kv.BlockEvictor('h2o', 4, { blockScore: 'median' }), { name: 'ParameterError', message: /median/ });
  assert.throws(() => new kv.BlockEvictor('h2o', 4, { blocksize: 2 }), { name: 'TypeError', message: /unknown option 'blocksize'/ });
  assert.throws(() => new kv.BlockEvictor('nope', 4), kv.ParameterError);
  const ev = new kv.BlockEvictor('tova', 4, { blockSize: 2 });
  assert.throws(() => ev.onDecodeStep(1, new Float64Array([1])), TypeError);
  assert.throws(() => ev.onDecodeStep(1, ['x']), TypeError);
});

// Sliding window (score = position) under one budget of 4 for 2 heads, floor
// 0: the lowest positions across the heads go, ties to the lower head.
test('LayerBudget: a sliding window shared by two heads', () => {
  const layer = new kv.LayerBudget('sliding-window', 2, 4, 0);
  assert.equal(layer.heads, 2);
  assert.equal(layer.headFloor, 0);
  assert.equal(layer.headBudget, 4);  // 4 - (2 - 1) x 0
  layer.onDecodeStep(0, 1, [1]);
  layer.onDecodeStep(1, 1, Float32Array.from([1]));
  assert.equal(layer.totalKept(), 4);  // {0, 1} in each head: at the budget
  assert.equal(layer.evict(4), 0);
  layer.onDecodeStep(0, 2, [0.5, 0.5]);
  layer.onDecodeStep(1, 2, [0.5, 0.5]);
  assert.equal(layer.evict(4), 2);  // 6 held: position 0 of head 0, then of head 1
  assert.deepEqual([layer.victims(0), layer.victims(1)], [[0], [0]]);
  assert.deepEqual([layer.keptCount(0), layer.keptCount(1)], [2, 2]);
  layer.onDecodeStep(0, 3, [0.5, 0.5]);
  layer.onDecodeStep(1, 3, null);  // head 1 absent this step: still admits position 3
  assert.equal(layer.evict(3), 3);  // 6 held, budget 3: 1 (h0), 1 (h1), 2 (h0)
  assert.deepEqual([layer.victims(0), layer.victims(1)], [[1, 2], [1]]);
  assert.equal(layer.totalKept(), 3);
  assert.throws(() => layer.query(1, 'scoreOf', [3]), { name: 'TypeError', message: /sliding-window has no query 'scoreOf'/ });
  assert.throws(() => layer.keptCount(2), RangeError);
  assert.throws(() => new kv.LayerBudget('tova', 0, 4), kv.ParameterError);
  assert.throws(() => new kv.LayerBudget('tova', 2, 4, 3), kv.ParameterError);  // 2 x 3 > 4
  // 1,024 heads of 2^18 positions (~15 GB) once met bad_alloc or the OOM killer.
  assert.throws(() => new kv.LayerBudget('h2o', 1024, 2 ** 18, 0), { name: 'ParameterError', message: /bytes one layer may hold/ });
  // The default floor: floor(layerBudget / (5 x heads)).
  assert.equal(new kv.LayerBudget('tova', 2, 100).headFloor, 10);
});

test('run and compare take the paged options', () => {
  const tokens = kv.run({ policy: 'h2o', budget: 64, steps: 400 });
  const blocks = kv.run({ policy: 'h2o', budget: 64, steps: 400, blockSize: 1 });
  assert.equal(blocks.metrics.retainedAttentionMass, tokens.metrics.retainedAttentionMass);  // blocks of 1: the token policy
  const sixteen = kv.run({ policy: 'h2o', budget: 64, steps: 400, blockSize: 16, params: { recentWindow: 0 } });
  assert.equal(sixteen.evicted % 16, 0);
  const layer = kv.compare({ policies: ['tova'], budgets: [64], steps: 300, layerBudget: true });
  assert.equal(layer.rows.length, 1);
  assert.throws(() => kv.run({ policy: 'h2o', budget: 100, steps: 10, blockSize: 16 }),
    { name: 'ParameterError', message: 'budget (100) must be a whole number of blocks (--block-size 16)' });
  assert.throws(() => kv.run({ policy: 'h2o', steps: 10, headFloor: 2 }), kv.ParameterError);
  assert.throws(() => kv.run({ policy: 'h2o', steps: 10, layerBudget: 1 }), TypeError);
  // A given block size of 0 once ran token-level eviction silently.
  assert.throws(() => kv.run({ policy: 'h2o', budget: 64, steps: 10, blockSize: 0 }),
    { name: 'ParameterError', message: /blockSize \(0\) must be at least 1/ });
  assert.throws(() => kv.run({ policy: 'h2o', budget: 64, steps: 10, layerBudget: true, headFloor: 2 ** 52 }),
    { name: 'ParameterError', message: /--head-floor \(4503599627370496\) must be at most --budget \(64\)/ });
});

const modelDir = process.env.KVEVICT_MODEL_DIR ? path.resolve(process.env.KVEVICT_MODEL_DIR) : path.join(repoRoot, 'model');
const kvm = path.join(modelDir, 'kvevict-tiny.kvm');
const sampleFile = path.join(modelDir, 'heldout-sample.txt');
const noModel = fs.existsSync(kvm) && fs.existsSync(sampleFile) ? false : `${modelDir} lacks the model or its sample`;

test('perplexity and compareModel on a paged store', { skip: noModel }, () => {
  const model = new kv.Model(kvm);
  const text = fs.readFileSync(sampleFile).subarray(0, 200);
  const c = model.config;
  const caches = c.layers * c.kvHeads;
  const runs = [{ policy: 'tova', budget: 64 }, { policy: 'sliding-window', budget: 64 }];
  const tokens = kv.perplexity(model, text, runs);
  const ones = kv.perplexity(model, text, runs, { blockSize: 1 });
  assert.equal('peakBlocks' in tokens[0], false);
  for (let i = 0; i < tokens.length; i++) assert.equal(ones[i].perplexity, tokens[i].perplexity);
  const sixteen = kv.perplexity(model, text, runs, { blockSize: 16 });
  // 199 bytes fed: the full cache holds 199 per cache in ceil(199 / 16) = 13 blocks;
  // a policy at 4 blocks holds 4 per cache and one cache takes a fifth at a time.
  assert.deepEqual(sixteen.map((r) => [r.blockSize, r.peakBlocks, r.peakPositions]),
    [[16, caches * 13, caches * 199], [16, caches * 4 + 1, caches * 64 + 1], [16, caches * 4 + 1, caches * 64 + 1]]);
  const layer = kv.compareModel(model, text, { policies: ['sliding-window'], budgets: [48], layerBudget: true });
  assert.equal(layer[1].peakPositions, c.layers * c.kvHeads * 48 + c.kvHeads);
  // Layer mode keeps the contiguous store: no block fields, as `kvevict compare --model --layer-budget` prints.
  assert.equal('peakBlocks' in layer[1], false);
  assert.equal('blockSize' in layer[1], false);
  assert.throws(() => kv.perplexity(model, text, [{ policy: 'tova', budget: 100 }], { blockSize: 16 }), kv.ParameterError);
  assert.throws(() => kv.perplexity(model, text, [], { blockSize: 16, layerBudget: true }), kv.ParameterError);
});
