'use strict';
// Streaming past the context (docs/streaming.md): stream() and sinkShares() at
// parity with `kvevict stream --format json` (the kvevict executable of the
// addon's build folder; those checks skip, with a message, when it is not
// there), keys at their index in the cache (positions 'cache') on Decoder,
// Batch and serveBench. Expected values come from the tool or are worked by
// hand.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { kv, repoRoot, noTool: toolMissing, toolJson: tool, withoutSeconds } = require('./support');

const modelDir = process.env.KVEVICT_MODEL_DIR ? path.resolve(process.env.KVEVICT_MODEL_DIR) : path.join(repoRoot, 'model');
const kvm = path.join(modelDir, 'kvevict-tiny.kvm');
const sampleFile = path.join(modelDir, 'heldout-sample.txt');
const skip = fs.existsSync(kvm) && fs.existsSync(sampleFile) ? false
  : `the model folder ${modelDir} lacks kvevict-tiny.kvm or heldout-sample.txt (set KVEVICT_MODEL_DIR)`;
const noTool = skip || toolMissing;

let model;
let sample;
function setup() {
  if (model === undefined) {
    model = new kv.Model(kvm);
    sample = fs.readFileSync(sampleFile);
  }
}
const caches = () => model.config.layers * model.config.kvHeads;


// ---- stream -------------------------------------------------------------------------

test('stream() equals the tool\'s JSON', { skip: noTool }, () => {
  setup();
  const got = kv.stream(model, sample, { policies: 'sliding-window,streaming-llm:sinks=4', budgets: [64], tokens: 1500,
    segment: 500 });
  const want = tool('stream', '--model', kvm, '--text', sampleFile, '--policy', 'sliding-window,streaming-llm:sinks=4',
    '--budget', 64, '--tokens', 1500, '--segment', 500);
  assert.deepEqual(Object.keys(got), ['command', 'model', 'rows']);
  assert.deepEqual([got.command, got.model, want.model], ['stream', kvm, kvm]);
  assert.deepEqual(withoutSeconds(got.rows), withoutSeconds(want.rows));
  // Worked by hand: the full cache stops at the context (tokens 1 ... 1023 predicted); each policy row
  // predicts tokens 1 ... 1499 and evicts one position a cache a step from its 65th token fed.
  const rows = got.rows;
  assert.deepEqual(rows.map((r) => [r.label, r.positions]), [['full cache', 'original'],
    ['sliding-window', 'original'], ['sliding-window', 'cache'], ['streaming-llm sinks=4', 'original'],
    ['streaming-llm sinks=4', 'cache']]);
  assert.equal(rows[0].policy, null);
  assert.deepEqual([rows[0].tokens, rows[0].predictions], [1024, 1023]);
  assert.deepEqual(rows[0].segments.map((s) => s.predictions), [499, 500, 24]);
  for (const r of rows.slice(1)) {
    assert.deepEqual([r.tokens, r.predictions, r.peakPositions], [1500, 1499, 65]);
    assert.equal(r.evicted, (1499 - 64) * caches());
    assert.deepEqual(r.segments.map((s) => [s.begin, s.end, s.predictions]), [[0, 500, 499], [500, 1000, 500],
      [1000, 1500, 500]]);
    assert.equal(r.pastTrainedContext, r.positions === 'original');
  }
});

test('stream({model, text, ...}) with arrays, overrides and the recomputed window', { skip: noTool }, () => {
  setup();
  const got = kv.stream({ model, text: sample, policies: ['streaming-llm'], budgets: [32], positions: ['cache'],
    tokens: 300, fullCache: false, recompute: 16, recomputeTokens: 40, overrides: { 'streaming-llm.sinks': 2 } });
  const want = tool('stream', '--model', kvm, '--text', sampleFile, '--policy', 'streaming-llm', '--budget', 32,
    '--positions', 'cache', '--tokens', 300, '--no-full-cache', '--recompute', 16, '--recompute-tokens', 40,
    '--set', 'streaming-llm.sinks=2');
  assert.deepEqual(withoutSeconds(got.rows), withoutSeconds(want.rows));
  assert.deepEqual(got.rows.map((r) => r.policy), ['streaming-llm', 'recompute']);
  assert.equal(got.rows[0].params.sinks, 2);
  assert.equal(got.rows[1].predictions, 39);  // tokens 1 ... 39 of the first 40
});

test('stream() refuses bad arguments before any work', { skip }, () => {
  setup();
  const one = { policies: 'sliding-window', budgets: [64] };
  assert.throws(() => kv.stream(model, sample, { ...one, positions: 'original,middle' }),
    { name: 'ParameterError', message: /^stream: options\.positions: positions 'middle': expected 'original'/ });
  assert.throws(() => kv.stream(model, sample, { ...one, positions: ['cache', 'rope'] }),
    { name: 'ParameterError', message: /options\.positions\[1\]: positions 'rope'/ });
  assert.throws(() => kv.stream(model, sample, { ...one, budgets: [1024] }),
    { name: 'ParameterError', message: /budget \(1024\) must be 1 \.\.\. 1023/ });
  assert.throws(() => kv.stream(model, sample, { policies: 'lru' }), { name: 'ParameterError', message: /unknown policy 'lru'/ });
  assert.throws(() => kv.stream(model, sample, { policies: null, fullCache: false }),
    { name: 'ParameterError', message: /nothing to run/ });
  assert.throws(() => kv.stream(model, sample, { ...one, tokens: 100000 }),
    { name: 'InputError', message: /the stream asks for 100000 tokens/ });
  assert.throws(() => kv.stream(model, sample, { ...one, fullCache: 1 }), { name: 'TypeError', message: /fullCache must be a boolean/ });
  assert.throws(() => kv.stream(model, sample, { ...one, segments: 5 }), { name: 'TypeError', message: /stream: unknown option 'segments'/ });
  assert.throws(() => kv.stream(model, 'text', one), { name: 'TypeError', message: /text must be a Buffer/ });
});

test('sinkShares() equals the tool\'s', { skip: noTool }, () => {
  setup();
  const got = kv.sinkShares(model, sample, { tokens: 128 });
  assert.deepEqual(got, tool('stream', '--model', kvm, '--text', sampleFile, '--sinks', '--tokens', 128).rows);
  assert.deepEqual(got.map((s) => s.layer), [...Array(model.config.layers).keys()]);
  for (const s of got) assert.ok(s.first >= 0 && s.first <= s.firstFour && s.firstFour <= 1);
  assert.deepEqual(kv.sinkShares({ model, text: sample, tokens: 128 }), got);
});

// ---- positions on Decoder, Batch, serveBench ----------------------------------------

test('cache positions without eviction give the original logits to the bit', { skip }, () => {
  setup();
  const original = new kv.Decoder(model, 256);
  const cache = new kv.Decoder(model, 256, { positions: 'cache' });
  const cacheToo = new kv.Decoder(model, { capacity: 256, positions: 'cache' });
  assert.equal(cacheToo.capacity, 256);
  for (const byte of sample.subarray(0, 200)) {
    const a = original.step(byte);
    const b = cache.step(byte);
    cacheToo.step(byte);
    assert.deepEqual(new Uint32Array(b.buffer, b.byteOffset, b.length), new Uint32Array(a.buffer, a.byteOffset, a.length));
  }
});

test('a sliding-window decoder runs past its capacity and the model\'s context', { skip }, () => {
  setup();
  const text = sample.subarray(0, 1500);
  assert.ok(text.length === 1500 && 1500 > model.config.context);
  for (const positions of ['original', 'cache']) {
    const d = new kv.Decoder(model, 17, { positions });
    for (let h = 0; h < d.headCount; ++h) d.setPolicy(h, kv.policy('sliding-window'), 16);
    let logits;
    for (const byte of text) logits = d.step(byte);
    assert.equal(d.position, 1500);
    assert.ok(logits.every(Number.isFinite));
    assert.deepEqual(d.held(0), Array.from({ length: 16 }, (_, i) => 1500 - 16 + i));
    assert.equal(d.evicted, (1500 - 16) * d.headCount);
  }
  const full = new kv.Decoder(model, 4, { positions: 'cache' });
  for (const byte of [97, 98, 99, 100]) full.step(byte);
  assert.throws(() => full.step(101), { name: 'InputError' });  // the full cache still stops at its capacity
});

test('a bad position mode is one clear error', { skip }, () => {
  setup();
  assert.throws(() => new kv.Decoder(model, 64, { positions: 'absolute' }),
    { name: 'ParameterError', message: /^Decoder: options\.positions: positions 'absolute': expected 'original'/ });
  assert.throws(() => new kv.Decoder(model, 64, { positions: 1 }), { name: 'TypeError', message: /positions must be 'original' or 'cache'/ });
  assert.throws(() => new kv.Decoder(model, 64, { position: 'cache' }), { name: 'TypeError', message: /unknown option 'position'/ });
  assert.throws(() => new kv.Batch(model, { poolBlocks: 64, positions: 'rope' }),
    { name: 'ParameterError', message: /Batch: options\.positions: positions 'rope'/ });
  assert.throws(() => kv.serveBench(model, sample, { positions: 'x' }),
    { name: 'ParameterError', message: /serveBench: options\.positions: positions 'x'/ });
});

test('Batch with cache positions', { skip }, () => {
  setup();
  const n = caches();
  const a = new kv.Batch(model, { poolBlocks: n * 8, capacity: 64, blockSize: 8, sharePrefix: false });
  const b = new kv.Batch(model, { poolBlocks: n * 8, capacity: 64, blockSize: 8, sharePrefix: false, positions: 'cache' });
  const sa = a.join();
  const sb = b.join();
  for (const byte of sample.subarray(0, 64)) assert.deepEqual(b.step(sb, byte), a.step(sa, byte));
  // A window of 16 in a capacity of 17 steps on past the context of 1024.
  const w = new kv.Batch(model, { poolBlocks: n * 3, capacity: 17, blockSize: 8, positions: 'cache' });
  const s = w.join('sliding-window', 16);
  for (const byte of sample.subarray(0, 1100)) w.step(s, byte);
  assert.deepEqual(w.held(s, 0), Array.from({ length: 16 }, (_, i) => 1100 - 16 + i));
});

test('serveBench() takes positions', { skip }, () => {
  setup();
  const rows = kv.serveBench(model, sample, { sequences: [2], policies: 'sliding-window', budget: 32, sharedPrefix: 16,
    tokens: 64, blockSize: 8, positions: 'cache' });
  assert.equal(rows.length, 1);
  assert.deepEqual([rows[0].tokens, rows[0].leakedBlocks, rows[0].evicted], [64, 0, 2 * (64 - 32) * caches()]);
});
