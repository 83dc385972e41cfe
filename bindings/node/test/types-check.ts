// Type-checked by `tsc --noEmit -p .` (never run): the declarations in
// index.d.ts accept what the binding accepts and refuse the obvious mistakes.
import * as kv from '..';

const s = new kv.Scissorhands({ budget: 512, recentWindow: 32 });
s.onDecodeStep(1, new Float32Array([1]));
s.onDecodeStep(2, [0.5, 0.5]);
s.onDecodeStep(3, null);
s.onDecodeStep(4);
const victims: number[] = s.evict(512);
const votes: number = s.votesOf(1);
const kept: number = s.keptCount() + s.memoryBytes();
const name: string = s.name;
const recent: number | undefined = s.params['recentWindow'];

const h: kv.H2O = kv.policy('h2o', { budget: 64, recentWindow: 8 });
const score: number = h.scoreOf(0);
const p: kv.PyramidKV = kv.policy('pyramidkv', { layer: 1, numLayers: 4 });
const share: number = p.effectiveBudget() + p.windowScoreOf(0) + kv.pyramidBudget(512, 1, 4, 4);
const any: kv.Policy = kv.policy(String('tova'), { budget: 8 });
const generic: number = any.query('lastAttentionOf', [0]);
const sinks: number = new kv.StreamingLLM({ sinks: 4 }).sinkCount();
const last: number = new kv.TOVA().lastAttentionOf(0);
const ws: number = new kv.SnapKV({ obsWindow: 8 }).windowScoreOf(0);
new kv.SlidingWindow({ budget: 1 });

let steps = 0;
for (const w of kv.trace('decode-4096', 10)) steps += w.length;
const hash: number = kv.traceHash() + kv.traceHash('decode-4096', 10);

const r: kv.RunResult = kv.run({ policy: 'scissorhands', budget: 256, params: { recentWindow: 64 }, steps: 100 });
const mass: number = r.metrics.retainedAttentionMass + r.metrics.heavyHitterRecall + r.metrics.evictionCalls;
const c: kv.CompareResult = kv.compare({
  policies: ['h2o', 'scissorhands'],
  budgets: [128, 256],
  overrides: { recentWindow: 64, 'h2o.recentWindow': 16, scissorhands: { recentWindow: 8 } },
  steps: 300,
});
const rows: number = c.rows.length + kv.compare().rows.length + kv.compare({ policies: 'all' }).rows.length;
// The envelope every command prints: {command, model, rows, ...}.
const envelope: ['compare', null, string] = [c.command, c.model, c.trace];
const described: kv.CommandSchema[] = kv.rowSchema().rows;
const described2: string = kv.rowSchema().envelope[0]!.name + described[0]!.variant;
const report: kv.VectorReport = kv.runVectors(['vectors']);
const firstFailure: string | undefined = report.failures[0]?.description;
const infos: kv.PolicyInfo[] = kv.policies();
const err: kv.KvevictError = new kv.ParameterError('x');
const cls: typeof kv.Scissorhands = kv.policyClasses.scissorhands;

// @ts-expect-error -- the generic base is not constructible
new kv.Policy('h2o');
// @ts-expect-error -- budgets are numbers
new kv.Scissorhands({ budget: '512' });
// @ts-expect-error -- H2O has no votes
h.votesOf(1);
// @ts-expect-error -- Scissorhands has no obsWindow
new kv.Scissorhands({ obsWindow: 4 });
// @ts-expect-error -- a Float64Array is not accepted
s.onDecodeStep(5, new Float64Array(4));
// @ts-expect-error -- run needs a policy
kv.run({ budget: 256 });

const model = new kv.Model('model/kvevict-tiny.kvm');
const int8Model = new kv.Model('model.gguf', { context: 1024, matmul: 'int8' });
const matmul: kv.MatmulMode = int8Model.matmul;
const ctx: number = model.config.context + model.parameterCount;
const bytes = new Uint8Array([72, 105, 33]);
const prows: kv.PerplexityRow[] = kv.perplexity(model, bytes, ['h2o', new kv.TOVA({ budget: 8 }), ['h2o', 64, { recentWindow: 8 }],
  { policy: 'scissorhands', budget: 128 }], { maxWindows: 1 });
const ppl: number = prows[0]!.perplexity + (prows[0]!.budget ?? 0);
const crows: kv.CompareModelRow[] = kv.compareModel(model, bytes, { policies: 'all', budgets: [64, 128], overrides: { recentWindow: 8 }, maxWindows: 2 });
const rank: number | null = crows[1]!.rank;
const swept: kv.PerplexityRow[] = kv.sweepModel(model, bytes, { policy: 'h2o', param: 'recentWindow', values: [8, 16], budgets: [64], kvPrecision: 'int8' });
const sweptBytes: number = swept[1]!.peakCacheBytes + swept[1]!.bytesPerPosition;
// @ts-expect-error -- kvPrecision is one of the four names
kv.perplexity(model, bytes, [], { kvPrecision: 'int3' });
const attnRec: kv.AttentionArray = kv.recordAttention(model, bytes, 64);
const baseRate: number = kv.persistence(attnRec, [1, 2])[0]!.baseRate;
const dec = new kv.Decoder(model, 64);
dec.setPolicy(0, new kv.H2O({ budget: 16, recentWindow: 4 }), 16);
dec.setPolicy(1, null);
const logits: Float32Array = dec.step(65);
const heldPos: number[] = dec.held(0).concat(dec.attended(0));
const headPolicy: kv.Policy | null = dec.policy(0);
const decState: number = dec.position + dec.evicted + dec.capacity + dec.headCount + dec.attention(0).length;

// @ts-expect-error -- text is bytes, not a string
kv.perplexity(model, 'text');
// @ts-expect-error -- a model, not a path
kv.compareModel('model/kvevict-tiny.kvm', bytes);
// @ts-expect-error -- maxWindows is a number
kv.perplexity(model, bytes, [], { maxWindows: '1' });

const prefilled: kv.Position[] = kv.prefill('snapkv', [new Float32Array([1, 0]), [0.5, 0.5]], 1, { poolKernel: 1 });
// @ts-expect-error the window is an array of rows, not one flat array
kv.prefill('tova', new Float32Array([1]), 1);

export const used = [ctx, ppl, rank, sweptBytes, baseRate, logits, heldPos, headPolicy, decState,
  victims, votes, kept, name, recent, score, share, generic, sinks, last, ws, steps, hash, mass, rows,
  firstFailure, infos, err, cls, kv.addonPath, prefilled];

// Paged caches (docs/paged.md).
const be = new kv.BlockEvictor('h2o', 4, { blockSize: 2, startBlocks: 1, blockScore: 'normsum' }, { recentWindow: 0 });
be.onDecodeStep(1, [1]);
const goneBlocks: number[] = be.evictBlocks(4);
const bs: number | 'protected' = be.blockScoreOf(0);
const moved: number[] = be.removedBefore().concat(be.evictedPositions(), be.positions());
const lb = new kv.LayerBudget('tova', 2, 64);
lb.onDecodeStep(0, 1, new Float32Array([1]));
const wentN: number = lb.evict(64) + lb.keptCount(0) + lb.totalKept() + lb.headFloor + lb.headBudget;
const lbVictims: number[] = lb.victims(1);
const pagedRun: number = kv.run({ policy: 'h2o', budget: 64, blockSize: 16, blockScore: 'max' }).budget;
// @ts-expect-error: not a block score
new kv.BlockEvictor('h2o', 4, { blockScore: 'median' });
export const pagedUsed = [goneBlocks, bs, moved, wentN, lbVictims, pagedRun];

// Parity with the tool: tasks, bench --model, replay with recorded signals, skipRefused, stepAll, signals.
const taskRows: kv.TaskRow[] = kv.tasks(model, bytes, { lengths: [256], depths: 1, samples: 2, policies: 'h2o', budgets: [64],
  moments: ['decode', 'prefill-query'], kvPrecision: 'int8' });
const taskAccuracy: number = taskRows[0]!.accuracy + taskRows[0]!.accuracy_low;
const taskRowsToo: kv.TaskRow[] = kv.tasks({ model, text: bytes, tasks: 'all', policies: null });
// @ts-expect-error -- not a moment
kv.tasks(model, bytes, { moments: ['later'] });
const benchRows: kv.DecodeBenchRow[] = kv.benchModel(model, bytes, { tokens: 64, rounds: 1, policies: ['h2o'], budgets: [32] });
const benchShare: number = benchRows[0]!.shares.attention + benchRows[0]!.tokensPerSecondSpread.median;
const benchDefault: kv.DecodeBenchRow[] = kv.benchModel({ model, rounds: 1 });
const benchLast: kv.DecodeBenchRow[] = kv.benchModel(model, bytes, { prompt: 64, prefillChunk: 32, promptLogits: 'last' });
const replayed: kv.RunResult = kv.run({ policy: 'knorm', budget: 32, trace: 'a.npy', keys: 'k.npy' });
const replayedAll: kv.CompareResult = kv.compare({ trace: 'a.npy', keys: 'k.npy', values: 'v.npy', queries: 'q.npy' });
const sweptSkipping: kv.SweepRows = kv.sweepModel(model, bytes, { policy: 'h2o', param: 'recentWindow', values: [8, 96],
  budgets: [64], skipRefused: true });
const skippedLines: string[] = sweptSkipping.skipped;
const batch = new kv.Batch(model, { poolBlocks: 64 });
const tick: Float32Array[] = batch.stepAll([batch.join(), batch.join('h2o', 32)], [65, 66]);
const weights: Float32Array = kv.attentionFromKeys(new Float32Array(8), [1, 2, 3, 4], 4, 0.5);
const rotated: Float32Array = kv.ropeNeox([1, 2, 3, 4], 7, model.config.ropeBase);
// @ts-expect-error -- stepAll takes the ids and the tokens
batch.stepAll([0]);
export const parityUsed = [taskAccuracy, taskRowsToo, benchShare, benchDefault, benchLast, matmul, replayed, replayedAll, skippedLines, tick,
  weights, rotated];

// Streaming past the context (docs/streaming.md): stream, sinkShares, positions.
const streamed: kv.StreamResult = kv.stream(model, bytes, { policies: 'sliding-window,streaming-llm:sinks=4', budgets: [64],
  positions: ['original', 'cache'], tokens: 1500, segment: 500, fullCache: false, recompute: 16, recomputeTokens: 40,
  kvPrecision: 'int8', overrides: { 'streaming-llm.sinks': 2 } });
const streamBits: number = streamed.rows[0]!.segments[0]!.bitsPerByte + streamed.rows[0]!.bitsPerByte;
const streamLabel: string | null = streamed.rows[0]!.policy;
const streamMode: kv.PositionMode = streamed.rows[0]!.positions;
const streamedToo: kv.StreamResult = kv.stream({ model, text: bytes, policies: null, positions: 'original,cache' });
const sinkRows: kv.SinkShare[] = kv.sinkShares(model, bytes, { tokens: 128 });
const sinkFirst: number = sinkRows[0]!.firstFour + kv.sinkShares({ model, text: bytes })[0]!.evenFirst;
const cacheDecoder = new kv.Decoder(model, 17, { positions: 'cache' });
const cacheDecoderToo = new kv.Decoder(model, { capacity: 17, positions: 'original' });
const cacheBatch = new kv.Batch(model, { poolBlocks: 64, positions: 'cache' });
const cacheServe: kv.ServeRow[] = kv.serveBench(model, bytes, { policies: 'sliding-window', positions: 'cache' });
// @ts-expect-error -- not a position mode
new kv.Decoder(model, 17, { positions: 'absolute' });
// @ts-expect-error -- fullCache is a boolean
kv.stream(model, bytes, { fullCache: 1 });
export const streamUsed = [streamBits, streamLabel, streamMode, streamedToo, sinkFirst, cacheDecoder, cacheDecoderToo,
  cacheBatch, cacheServe];

// Granularity (docs/paged.md): which caches share a budget.
const seqRows: kv.PerplexityRow[] = kv.perplexity(model, bytes, [['h2o', 64]], { maxWindows: 1, granularity: 'sequence' });
const seqField: 'layer' | 'sequence' | undefined = seqRows[1]!.granularity;
const layerRows: kv.CompareModelRow[] = kv.compareModel(model, bytes, { budgets: [64], granularity: 'layer', headFloor: 4 });
const seqStream: 'sequence' | undefined = kv.stream(model, bytes, { budgets: [64], granularity: 'sequence' }).rows[0]!.granularity;
const seqTasks: kv.TaskRow[] = kv.tasks(model, bytes, { policies: 'h2o', budgets: [64], granularity: 'sequence' });
const seqServe: kv.ServeRow[] = kv.serveBench(model, bytes, { policies: 'h2o', modes: 'token', granularity: 'sequence' });
const granularity: kv.Granularity = 'head';
// @ts-expect-error -- not a granularity
kv.perplexity(model, bytes, [], { granularity: 'cells' });
// @ts-expect-error -- a stream's caches hold budget + 1 positions: no layer granularity
kv.stream(model, bytes, { granularity: 'layer' });
export const granularityUsed = [seqField, layerRows, seqStream, seqTasks, seqServe, granularity];

// Which policy at a budget (docs/choosing.md): choose.
const chosen: kv.ChooseResult = kv.choose(model, bytes, { budget: 128, policies: 'h2o,tova', windows: 2, samples: 1,
  granularity: 'sequence' });
const chosenRank: number = chosen.rows[0]!.rank + chosen.rows[0]!.extraBitsPerByte + chosen.plan.windows;
const chosenLow: number | null = chosen.rows[0]!.extraLow;
const chosenLine: string = chosen.recommendation + chosen.narrow.join('\n');
const chosenModel: string = chosen.model + streamed.model;
const chosenToo: kv.ChooseResult = kv.choose({ model, text: bytes, policies: null, minutes: 1, windows: null });
// @ts-expect-error -- a shared layer budget is no choose granularity
kv.choose(model, bytes, { granularity: 'layer' });
// @ts-expect-error -- minutes is a number
kv.choose(model, bytes, { minutes: '15' });
export const chooseUsed = [chosenRank, chosenLow, chosenLine, chosenToo, chosenModel];
export const envelopeUsed = [envelope, described2];
