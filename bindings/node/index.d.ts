// Type declarations of the kvevict Node.js binding (index.js over the N-API
// addon). Integers are JavaScript numbers: a fraction, NaN or an infinity where
// an integer is expected throws RangeError; a value of the wrong type throws
// TypeError; what the C++ core refuses throws ParameterError, ContractError or
// InputError with the core's message unchanged (a negative budget or position:
// RangeError, with the core's message).

/** Absolute token index (0, 1, 2, ...). */
export type Position = number;

/**
 * The weights the new token paid to the held positions, ascending. A
 * Float32Array is read in place; a number array is converted to float32.
 * `null` (or omitted) means "no information", never "all zeros".
 */
export type Attention = Float32Array | readonly number[] | null | undefined;

/** A step signal other than attention (a key, value or queries): read like Attention. */
export type Signal = Float32Array | readonly number[] | null | undefined;

/** What a step can carry (docs/signals.md); a missing field is not given. */
export interface StepSignals {
  /** As onDecodeStep's attn: null (or omitted) is "no information". */
  attention?: Attention;
  /** The admitted token's key as the cache stores it (after RoPE): headDim floats. */
  key?: Signal;
  /** The admitted token's value: headDim floats. */
  value?: Signal;
  /** Its queries before RoPE, every query head of the group, head-major: groups x headDim floats. */
  queries?: Signal;
}
/** Position 0's signals (onOrigin): no attention, since no step admits it. */
export type OriginSignals = Omit<StepSignals, 'attention'>;
/** The signals a policy's steps read. */
export type SignalName = 'attention' | 'key' | 'value' | 'queries';

/** Named integer parameters, camelCase; omitted ones take their defaults. */
export type Params = { readonly [name: string]: number | undefined };

export interface ScissorhandsParams {
  budget?: number;
  recentWindow?: number;
  /** Votes count over the last `historyWindow` observed steps (0 = all). At most 4096, and the vote
   *  bits, 8 * ceil(historyWindow / 64) * (budget + 1) bytes, at most 256 MiB. */
  historyWindow?: number;
  /** An eviction drops max(needed, dropAmount) positions. */
  dropAmount?: number;
  /** Positions < sinks are never evicted. */
  sinks?: number;
  /** 1: rank by the vote rate, votes / the steps that scored the position (needs historyWindow 0). */
  normalize?: number;
}
export interface H2OParams {
  budget?: number;
  recentWindow?: number;
  sinks?: number;
  /** 1: rank by the cumulative score / the steps that scored the position (kvpress ObservedAttention). */
  normalize?: number;
}
export interface StreamingLLMParams { budget?: number; sinks?: number }
export interface SlidingWindowParams { budget?: number }
export interface TOVAParams { budget?: number }
export interface SnapKVParams { budget?: number; recentWindow?: number; obsWindow?: number; poolKernel?: number }
export interface PyramidKVParams {
  budget?: number;
  layer?: number;
  numLayers?: number;
  pyramidRatio?: number;
  recentWindow?: number;
  obsWindow?: number;
  poolKernel?: number;
}
export interface KNormParams {
  budget?: number;
  /** Floats in a key (the model's head size). */
  headDim?: number;
  /** Positions < sinks are never evicted. */
  sinks?: number;
  /** The newest held positions that are never evicted. */
  recentWindow?: number;
}
export interface KeyDiffParams {
  budget?: number;
  /** Floats in a key (the model's head size). */
  headDim?: number;
  /** Positions < sinks are never evicted. */
  sinks?: number;
  /** The newest held positions that are never evicted. */
  recentWindow?: number;
}
export interface ExpectedAttentionParams {
  budget?: number;
  /** Floats in a key, a value and one query head (the model's head size). */
  headDim?: number;
  /** Query heads sharing the cache (grouped-query attention). */
  groups?: number;
  /** Positions < sinks are never evicted and their queries are not modelled (default 4). */
  sinks?: number;
  /** The newest held positions that are never evicted. */
  recentWindow?: number;
  /** The last queries (of positions >= sinks) the Gaussian is fitted to (default 128). */
  queryWindow?: number;
  /** Next positions RoPE is averaged over (default 512). */
  futurePositions?: number;
  /** The model's RoPE base; 0: no RoPE. */
  ropeBase?: number;
  /** 1: the logit's covariance term. */
  covariance?: number;
  /** 1: scores scaled by the value's norm. */
  valueNorm?: number;
  /** Refit the Gaussian every k-th scoring call, 1 ... 65536 (default 1: every eviction, as published). */
  evictEvery?: number;
}

/** Base of every policy; not constructed directly. */
export abstract class Policy {
  protected constructor(name: string, params?: Params);
  /** Registry name, e.g. "scissorhands". */
  readonly name: string;
  /** Every parameter with its effective value (a fresh object on each read). */
  readonly params: Record<string, number>;
  /**
   * One decode step: fold `attn` into the held positions, then admit `pos`.
   * Reads min(attn.length, keptCount()) weights; extra ones are ignored.
   * Throws ContractError (before changing anything) when `pos` is not above
   * every held position, when holding it would exceed the capacity, or for a
   * NaN, infinite or negative weight.
   */
  onDecodeStep(pos: Position, attn?: Attention): void;
  /**
   * One decode step with every signal the caller has, then admits `pos`. For
   * an attention or positional policy exactly onDecodeStep(pos, attention):
   * the other signals are not read. A key-aware policy throws ContractError,
   * naming itself and the signal, before changing anything, when a signal it
   * reads is missing or of the wrong length. An unknown field is a TypeError.
   */
  onStep(pos: Position, signals?: StepSignals | null): void;
  /** Position 0's key, value and queries, once, before step 1 (ignored by policies that read no keys). */
  onOrigin(signals?: OriginSignals | null): void;
  /** What onStep reads: ["attention"] for the scoring policies, [] for the positional ones, e.g. ["key"]. */
  readonly signals: SignalName[];
  /** Drops positions so that at most `budget` remain; the victims, ascending (a copy). */
  evict(budget: number): Position[];
  keptCount(): number;
  /** Bytes of per-slot state, allocated at construction. */
  memoryBytes(): number;
  /** Any registry query by name, e.g. query("votesOf", [3]); TypeError if the policy lacks it. */
  query(name: string, args?: readonly number[]): number;
}

export class Scissorhands extends Policy {
  constructor(params?: ScissorhandsParams);
  static readonly policyName: 'scissorhands';
  /** Votes of a held position (within the history window), -1 when it is not held. */
  votesOf(pos: Position): number;
  /** What the eviction ranks a held position by: the vote rate with normalize=1, else the votes; -1 when not held. */
  rankOf(pos: Position): number;
}
export class H2O extends Policy {
  constructor(params?: H2OParams);
  static readonly policyName: 'h2o';
  /** Cumulative attention of a held position (with normalize=1 divided by the steps that scored it), -1 when it is not held. */
  scoreOf(pos: Position): number;
}
export class StreamingLLM extends Policy {
  constructor(params?: StreamingLLMParams);
  static readonly policyName: 'streaming-llm';
  /** Number of sink positions held. */
  sinkCount(): number;
}
export class SlidingWindow extends Policy {
  constructor(params?: SlidingWindowParams);
  static readonly policyName: 'sliding-window';
}
export class TOVA extends Policy {
  constructor(params?: TOVAParams);
  static readonly policyName: 'tova';
  /** Last observed weight, -1 when not held or never observed. */
  lastAttentionOf(pos: Position): number;
}
export class SnapKV extends Policy {
  constructor(params?: SnapKVParams);
  static readonly policyName: 'snapkv';
  /** Unpooled sum of the position's remembered weights, -1 when not held. */
  windowScoreOf(pos: Position): number;
}
export class PyramidKV extends Policy {
  constructor(params?: PyramidKVParams);
  static readonly policyName: 'pyramidkv';
  /** max(pyramidBudget(budget, layer, numLayers, pyramidRatio), recentWindow + 1). */
  effectiveBudget(): number;
  windowScoreOf(pos: Position): number;
}

export class KNorm extends Policy {
  constructor(params?: KNormParams);
  static readonly policyName: 'knorm';
  /** L2 norm of a held position's key, -1 when it is not held or its key was never given. */
  keyNormOf(pos: Position): number;
}
export class KeyDiff extends Policy {
  constructor(params?: KeyDiffParams);
  static readonly policyName: 'keydiff';
  /** Cosine of a held position's key with the held keys' mean direction; -2 when not held or never given. */
  cosineOf(pos: Position): number;
  /** L2 norm of a held position's key, -1 when it is not held or its key was never given. */
  keyNormOf(pos: Position): number;
}
export class ExpectedAttention extends Policy {
  constructor(params?: ExpectedAttentionParams);
  static readonly policyName: 'expected-attention';
  /** Expected logit query head `head` pays a held position's key; NaN when not held or never given. */
  logitOf(pos: Position, head: number): number;
  /** The score evict() would use (softmax averaged over the heads, times the value's norm); -1 when not scored. */
  scoreOf(pos: Position): number;
  /** Queries the Gaussian is fitted to now (at most queryWindow). */
  modelledQueries(): number;
}

export interface PolicyClasses {
  scissorhands: typeof Scissorhands;
  h2o: typeof H2O;
  'streaming-llm': typeof StreamingLLM;
  'sliding-window': typeof SlidingWindow;
  tova: typeof TOVA;
  snapkv: typeof SnapKV;
  pyramidkv: typeof PyramidKV;
  knorm: typeof KNorm;
  keydiff: typeof KeyDiff;
  'expected-attention': typeof ExpectedAttention;
}
/** Registry name -> class, for every registered policy. */
export const policyClasses: PolicyClasses & { readonly [name: string]: (new (params?: Params) => Policy) | undefined };

/** Builds any registered policy by name (ParameterError for an unknown one). */
export function policy<N extends keyof PolicyClasses>(
  name: N,
  params?: ConstructorParameters<PolicyClasses[N]>[0],
): InstanceType<PolicyClasses[N]>;
export function policy(name: string, params?: Params): Policy;

export interface ParamInfo { name: string; default: number; help: string }
export interface QueryInfo { name: string; arity: number }
export interface PolicyInfo {
  name: string;
  title: string;
  summary: string;
  params: ParamInfo[];
  queries: QueryInfo[];
  /** What its steps read (a trace supplies only "attention"). */
  signals: SignalName[];
}
/** Every registered policy, in catalogue order. */
export function policies(): PolicyInfo[];

/** The kernels' SIMD targets, lowest first ("baseline", "sse4", "avx2", "avx512"). */
export interface SimdInfo {
  compiled: string[];
  supported: string[];
  active: string;
}
export function simd(): SimdInfo;
/** Runs every kernel at `target` ("best": the CPU's best); throws ParameterError if unknown or unsupported. */
export function selectSimd(target: string): void;

/** PyramidKV's share of `layer` in a stack of `numLayers` with average share `budget`. */
export function pyramidBudget(budget: number, layer: number, numLayers: number, ratio: number): number;

/**
 * The steps of a generated trace (default "decode-4096"): step t is a new
 * Float32Array of t weights over positions 0 ... t-1. `steps` truncates to a
 * prefix. InputError for an unknown id or steps out of range, thrown at once.
 */
export function trace(id?: string, steps?: number): TraceSteps;
export interface TraceSteps extends Generator<Float32Array, void, undefined> {
  readonly id: string;
  /** Positions in the trace (it has length - 1 decode steps). */
  readonly length: number;
  /** Steps this iterator yields. */
  readonly steps: number;
}

/** FNV-1a 32 parity hash of the first `steps` steps (all when omitted). */
export function traceHash(id?: string, steps?: number): number;

export interface Metrics {
  /** Mean share of each step's attention on held positions (a proxy, not model quality). */
  retainedAttentionMass: number;
  /** Pooled share of each step's 32 most-attended positions still held (a proxy). */
  heavyHitterRecall: number;
  evictionCalls: number;
}
/** One run, exactly the object `kvevict run --format json` prints. */
export interface RunResult {
  policy: string;
  trace: string;
  budget: number;
  /** Every effective parameter. */
  params: Record<string, number>;
  steps: number;
  metrics: Metrics;
  evicted: number;
  memoryBytes: number;
  seconds: number;
}
/**
 * The first three members of every command's JSON (the envelope): the command
 * as typed, the model as given (null on a trace or no model), the rows.
 */
export interface Envelope<Command extends string, Row> {
  command: Command;
  model: string | null;
  rows: Row[];
}
/** Exactly the object `kvevict compare --format json` prints: the envelope, then the trace. */
export interface CompareResult extends Envelope<'compare', RunResult> {
  model: null;
  trace: string;
}

/**
 * Which caches share a budget (docs/paged.md, "Granularity"): 'head' (each its
 * own), 'layer' (a layer's heads share budget x heads positions) or 'sequence'
 * (every cache -- with a model all layers and KV heads -- holds the same
 * `budget` positions, one victim set for all: llama.cpp's cells).
 */
export type Granularity = 'head' | 'layer' | 'sequence';

/**
 * Paged evaluation (docs/paged.md), as the tool's --block-size ... --head-floor:
 * block mode (blockSize >= 1: each policy driven by a BlockEvictor, budgets a
 * whole number of blocks; with a model, the decoder on a paged store) or a
 * shared budget (granularity 'layer' or 'sequence'). Not both.
 */
export interface PagedOptions {
  blockSize?: number;
  startBlocks?: number;
  recentBlocks?: number;
  blockScore?: BlockScore;
  /**
   * Default 'head'. 'sequence' refuses pyramidkv (its budget differs by layer).
   * A model's rows then carry `granularity`.
   */
  granularity?: Granularity;
  /** The older spelling of granularity 'layer'; given with granularity, the two must agree. */
  layerBudget?: boolean;
  /** With granularity 'layer'; default -1: a fifth of the fair share. */
  headFloor?: number;
}

export interface RunOptions extends PagedOptions {
  policy: string;
  /** Default: params.budget, else the policy's default (512). */
  budget?: number;
  params?: Params;
  /** Default "decode-4096". */
  trace?: string;
  /** Replay only the first N decode steps. */
  steps?: number;
  /**
   * With trace 'FILE.npy': the keys recorded beside it, [H, N, headDim]
   * (kvevict record --keys), as the tool's run --keys: the key-aware policies
   * (knorm, keydiff) replay; with values and queries too, expected-attention.
   */
  keys?: string | null;
  /** The values recorded beside the trace, [H, N, headDim] (kvevict record --values). */
  values?: string | null;
  /** The queries (before RoPE) recorded beside the trace, [H, N, groups x headDim] (kvevict record --queries). */
  queries?: string | null;
}
export function run(options: RunOptions): RunResult;

export interface CompareOptions extends PagedOptions {
  /** Names, or "all" / "a,b" (default: every policy). */
  policies?: readonly string[] | string;
  /** Default [256, 512, 1024]; rows are ranked by retained mass at the middle one. */
  budgets?: readonly number[];
  /**
   * "policy.param" or "param" (every compared policy that has it) -> value;
   * a nested { policy: { param: value } } means "policy.param".
   */
  overrides?: { readonly [key: string]: number | Params | undefined };
  trace?: string;
  steps?: number;
  /** As for run(); "all" is then every policy the files can feed. */
  keys?: string | null;
  values?: string | null;
  queries?: string | null;
}
export function compare(options?: CompareOptions): CompareResult;

/** One field of a result row; `fields` lists an object's members or each array element's. */
export interface SchemaField {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'object' | 'array';
  unit?: string;
  description: string;
  /** Absent when the field is always present. */
  presentWhen?: string;
  fields?: SchemaField[];
}
/** One command's JSON described (a variant where a flag changes its rows: compare with '--model'). */
export interface CommandSchema {
  command: string;
  /** '' or the flag whose rows these are ('--model', '--sinks'). */
  variant: string;
  /** What the envelope's model holds: 'path' (the model as given) or 'null'. */
  model: 'path' | 'null';
  /** A row's fields, in output order. */
  rows: SchemaField[];
  /** The members after rows, in order. */
  extra: SchemaField[];
}
/** `kvevict schema`: itself an envelope, a row per command, then the envelope's own fields. */
export interface RowSchema extends Envelope<'schema', CommandSchema> {
  model: null;
  envelope: SchemaField[];
}
/** The schema as `kvevict schema` prints it; a fresh copy on each call. */
export function rowSchema(): RowSchema;

export interface VectorFailure {
  file: string;
  caseName: string;
  /** Index into the case's steps; -1 for the case itself. */
  step: number;
  /** JSON text, empty when not applicable. */
  expected: string;
  /** JSON text, or the error that ended the case. */
  actual: string;
  message: string;
  /** The runner's one-line report of it. */
  description: string;
}
export interface VectorReport {
  /** Cases. */
  passed: number;
  failed: number;
  failures: VectorFailure[];
}
/** Replays vector files, or every *.vectors.json under folders, through the C++ runner. */
export function runVectors(paths: string | readonly string[]): VectorReport;

// ---- paged caches (docs/paged.md) ------------------------------------------------

export type BlockScore = 'sum' | 'mean' | 'max' | 'normsum';

export interface BlockEvictorOptions {
  /** Default 16. */
  blockSize?: number;
  /** The first blocks, never evicted. Default 0. */
  startBlocks?: number;
  /** The last full blocks, never evicted (the partial block never is). Default 0. */
  recentBlocks?: number;
  /** Default "sum". */
  blockScore?: BlockScore;
}

/** Whole-block eviction over any policy; the policy's budget is blockBudget x blockSize. */
export class BlockEvictor {
  constructor(policy: string, blockBudget: number, options?: BlockEvictorOptions | null, params?: Params | null);
  readonly policy: string;
  readonly blockSize: number;
  onDecodeStep(pos: number, attn: Attention): void;
  /** As Policy.onStep / Policy.onOrigin. */
  onStep(pos: number, signals?: StepSignals | null): void;
  onOrigin(signals?: OriginSignals | null): void;
  /** The evicted logical block indices (numbered before the call), ascending. */
  evictBlocks(blockBudget: number): number[];
  evictedPositions(): number[];
  /** For each surviving block, the positions removed before it in the last call. */
  removedBefore(): number[];
  positions(): number[];
  /** The reduced score; "protected" for a full block that is not a candidate; -1 for no such full block. */
  blockScoreOf(block: number): number | 'protected';
  keptCount(): number;
  blockCount(): number;
  memoryBytes(): number;
  /** The policy's registry queries, e.g. query("scoreOf", [pos]). */
  query(name: string, args?: readonly number[]): number;
}

/** One budget per layer shared by its KV heads (AdaKV-style). */
export class LayerBudget {
  constructor(policy: string, heads: number, layerBudget: number, headFloor?: number | null, params?: Params | null);
  readonly heads: number;
  readonly headFloor: number;
  readonly headBudget: number;
  onDecodeStep(head: number, pos: number, attn: Attention): void;
  /** As Policy.onStep / Policy.onOrigin, for one head. */
  onStep(head: number, pos: number, signals?: StepSignals | null): void;
  onOrigin(head: number, signals?: OriginSignals | null): void;
  /** How many positions went, all heads together. */
  evict(layerBudget: number): number;
  victims(head: number): number[];
  keptCount(head: number): number;
  totalKept(): number;
  memoryBytes(): number;
  query(head: number, name: string, args?: readonly number[]): number;
}

// ---- the real model -------------------------------------------------------------
// Every call below is synchronous: it blocks the calling thread until done
// (run it in a worker thread to keep an event loop free).

/** The text a model reads: bytes. A Buffer is a Uint8Array. A string is refused (TypeError). */
export type Text = Uint8Array;

export interface ModelConfig {
  vocab: number;
  layers: number;
  /** Query heads per layer. */
  heads: number;
  /** KV heads per layer (grouped-query attention): layers x kvHeads caches, one policy each. */
  kvHeads: number;
  width: number;
  ff: number;
  /** Positions the model was trained on: the window length. */
  context: number;
  ropeBase: number;
  normEps: number;
}

/**
 * A small byte-level transformer read from a .kvm file (model/FORMAT.md). The
 * whole file is read and checked at construction: InputError naming the file
 * and what is wrong (missing, truncated, corrupt). Immutable.
 */
/** How the weight products are computed (`--matmul`; docs/performance.md, "8-bit products"). */
export type MatmulMode = 'exact' | 'int8';

/** Options of new Model(), as the tool's model flags take them. */
export interface ModelOptions {
  /** Positions to run at (0, the default: the trained context, at most 4096; over it throws). */
  context?: number;
  /** 'exact' (default) or 'int8': against activations rounded to 8-bit blocks as llama.cpp rounds them; a kvevict-tiny .kvm refuses it. */
  matmul?: MatmulMode;
}

/** A model file kvevict reads (.kvm, .gguf, safetensors), loaded and checked. */
export class Model {
  constructor(path: string, options?: ModelOptions);
  /** A fresh object on each read. */
  readonly config: ModelConfig;
  readonly parameterCount: number;
  readonly path: string;
  readonly matmul: MatmulMode;
}

/**
 * Where kept keys sit in rotary space (docs/streaming.md): 'original' at their tokens' positions (the
 * default), 'cache' at their index among the positions their cache holds (StreamingLLM); with nothing
 * evicted the two give the same logits to the bit.
 */
export type PositionMode = 'original' | 'cache';

export interface DecoderOptions {
  /** Positions a cache holds (0 or omitted: the model's context). */
  capacity?: number;
  /** Default 'original'. */
  positions?: PositionMode;
}

/**
 * One sequence through a Model, token by token, with a real KV cache per (layer, head). With a policy on
 * every cache it steps on past the capacity and the model's context; a cache without one stops at the
 * capacity (InputError).
 */
export class Decoder {
  /** Room for `capacity` positions a cache (0 or omitted: the model's context). */
  constructor(model: Model, capacity?: number, options?: { positions?: PositionMode });
  constructor(model: Model, options: DecoderOptions);
  /** Feeds a byte; the next byte's logits, a new Float32Array of `vocab` values. */
  step(token: number): Float32Array;
  /**
   * Gives cache `head` (= layer * kvHeads + KV head) a fresh policy held to `budget`
   * (omitted: the policy's own budget parameter); null removes it. Before the
   * first token only. The decoder keeps the policy alive and drives it: one
   * head per policy, and stepping or evicting it by hand meanwhile throws
   * ContractError (until reset() or the decoder is collected).
   */
  setPolicy(head: number, policy: Policy | null, budget?: number): void;
  /** The policy of a head, or null. */
  policy(head: number): Policy | null;
  /** Back to an empty cache, every policy detached (give new ones). */
  reset(): void;
  /** Positions the head holds, ascending. */
  held(head: number): Position[];
  /** Positions the head attended over on the last step, the new token last. */
  attended(head: number): Position[];
  /** The softmax weights of the last step over attended(head) (a copy). */
  attention(head: number): Float32Array;
  /** Tokens fed so far. */
  readonly position: number;
  /** Positions removed so far, all heads together. */
  readonly evicted: number;
  readonly capacity: number;
  /** layers x kvHeads: the caches, one policy each. */
  readonly headCount: number;
}

/**
 * A run of perplexity(): a policy name or a Policy (its parameters are the
 * base), [policy, budget?, params?], or {policy, budget?, params?}. The budget
 * defaults to params.budget, else the policy's own.
 */
export type ModelRun =
  | string
  | Policy
  | readonly [string | Policy, number?, Params?]
  | { policy: string | Policy; budget?: number; params?: Params };

export interface ModelRunOptions extends PagedOptions {
  /** Windows of the text to use (0 or omitted: all); samples a long text. */
  maxWindows?: number;
  /**
   * The prefill moment (docs/tasks.md): each window's first `prefill` bytes are
   * read with the full cache and every cache is compressed once to its budget
   * (prefill(), scored from the attention rows of the last `prefillWindow` of
   * them, default 32); the rest runs without eviction and only it is scored,
   * the full cache's too. 0 or omitted: evict while decoding. Not with the
   * paged options.
   */
  prefill?: number;
  prefillWindow?: number;
  /**
   * The precision every decoder stores keys and values at (docs/paged.md,
   * "Fewer bits a position"): fp32 (the default), fp16, int8 (per token) or
   * int4 (KIVI: keys per channel over groups of `kvResidual` tokens, values
   * per token). With a quantized precision the rows start with the fp32 full
   * cache (every row's extra bits are measured from it), then the full cache
   * at that precision.
   */
  kvPrecision?: 'fp32' | 'fp16' | 'int8' | 'int4';
  /** Newest positions kept at fp32 until this many arrive (default 32 for int4, 0 otherwise). */
  kvResidual?: number;
}

/**
 * A row of `kvevict perplexity --format json`. A text is read as the model's
 * tokens (bytes for kvevict-tiny) and cut into windows of the model's context,
 * each from an empty cache: T tokens in W windows make T - W predictions (a
 * model whose tokenizer adds BOS starts each window with it and predicts every
 * text token; docs/models.md).
 */
export interface PerplexityRow {
  /** null for the full cache. */
  policy: string | null;
  /** null for the full cache. */
  budget: number | null;
  /** Every effective parameter (layer 0's for pyramidkv); {} for the full cache. */
  params: Record<string, number>;
  /** With a prefill only: the bytes of each window read before compressing. */
  prefill?: number;
  /** exp(mean negative log-likelihood, nats). */
  perplexity: number;
  bitsPerByte: number;
  /** bitsPerByte minus the full cache's on the same windows; null for the full cache. */
  extraBitsPerByte: number | null;
  /** The 95 % interval of extraBitsPerByte, paired by window; null for the full cache or a single window. */
  extraLow: number | null;
  extraHigh: number | null;
  /** Tokens predicted (bytes for kvevict-tiny). */
  predictions: number;
  /** The bytes of text the predicted tokens stand for. */
  predictedBytes: number;
  /** The model's tokenizer (docs/models.md). */
  tokenizer: string;
  /** Positions removed, all heads and windows together. */
  evicted: number;
  /** With granularity 'layer' or 'sequence' only (a policy's rows): which caches shared a budget. */
  granularity?: 'layer' | 'sequence';
  /** In block mode only: the store's block size. */
  blockSize?: number;
  /** In block mode only: the most blocks in use at once over every cache (measured). */
  peakBlocks?: number;
  /** With paged options only: the most positions held at once over every cache (measured). */
  peakPositions?: number;
  /** perplexity_at_memory (the tool's --kv-memory): the bytes a cache the budget was chosen to fit. */
  kvMemory?: number;
  /** The store's precision, its residual window, the bytes a stored position costs, and the most bytes any one cache held at once (measured). */
  kvPrecision: 'fp32' | 'fp16' | 'int8' | 'int4';
  kvResidual: number;
  bytesPerPosition: number;
  /** bytesPerPosition x layers x KV heads: one position of the whole model. */
  modelBytesPerPosition: number;
  peakCacheBytes: number;
  seconds: number;
}
/**
 * A compareModel() row: the proxies measured on the model's own full-cache
 * attention; null for the full cache, absent with a prefill.
 */
export interface CompareModelRow extends PerplexityRow {
  /** 1 = lowest perplexity at the ranking budget (ties share a rank). */
  rank: number | null;
  retainedAttentionMass?: number | null;
  heavyHitterRecall?: number | null;
  evictionCalls?: number | null;
}

/** The full cache first, then one row per run, in order. Synchronous. */
export function perplexity(model: Model, text: Text, runs?: readonly ModelRun[] | null, options?: ModelRunOptions): PerplexityRow[];

export interface BatchOptions {
  /** Blocks in the pool: at least layers x kvHeads (one block per cache of one sequence). */
  poolBlocks: number;
  /** Positions per cache of each sequence (0: the model's context). */
  capacity?: number;
  /** Positions per pool block (default 16). */
  blockSize?: number;
  /** Equal full blocks held once (default true). */
  sharePrefix?: boolean;
  /** Where every sequence's kept keys sit in rotary space (default 'original'). */
  positions?: PositionMode;
}

export interface PoolStats {
  blocks: number;
  freeBlocks: number;
  inUse: number;
  peakInUse: number;
  references: number;
  peakSaved: number;
  shared: number;
  copies: number;
}

/** Sequences decoding together over one block pool (docs/serving.md). */
export class Batch {
  constructor(model: Model, options: BatchOptions);
  /** A new sequence's id: the full cache (policy null) or a policy per cache, evicting positions or whole blocks. */
  join(policy?: string | Policy | null, budget?: number | null, params?: Params | null, mode?: 'token' | 'block'): number;
  /** The sequence's next byte; its logits. A failed step removes the sequence (InputError); the others go on. */
  step(id: number, token: number): Float32Array;
  /**
   * One tick in one call: sequence ids[i] gets tokens[i], in order; one Float32Array of logits per listed
   * sequence, each equal to step(ids[i], tokens[i])'s (views of one buffer). Every id and token is checked
   * before any sequence steps.
   */
  stepAll(ids: readonly number[], tokens: readonly number[]): Float32Array[];
  leave(id: number): void;
  /** Positions cache `cache` (layer * kvHeads + KV head) of sequence `id` holds, ascending. */
  held(id: number, cache: number): number[];
  poolStats(): PoolStats;
  readonly sequences: number[];
}

/** Options of serveBench(): the grid of runs and the sizes (docs/serving.md). */
export interface ServeBenchOptions {
  /** Sequence counts, one run each (default [4]). */
  sequences?: readonly number[];
  /** Policy names, "all", or "none" for the full cache (default "none"). */
  policies?: readonly string[] | string;
  /** Positions each cache keeps (default 128). */
  budget?: number;
  /** "token" and/or "block" (default "token"). */
  modes?: readonly string[] | string;
  /** Prefix sharing on (true) and/or off (default true). */
  sharing?: boolean | readonly boolean[];
  /** 0: evict while decoding; C: read the prompt in chunks of C, compressing after each (default [0]). */
  chunks?: readonly number[];
  /** Tokens every sequence starts with (bytes for kvevict-tiny; default 512). */
  sharedPrefix?: number;
  /** Tokens each sequence reads (bytes for kvevict-tiny; 0: the model's context). */
  tokens?: number;
  /** Chunked runs: tokens read as the prompt (0: all). */
  prompt?: number;
  /** Chunked runs: attention rows each compression scores from (default 32). */
  window?: number;
  /** Positions per pool block (default 16). */
  blockSize?: number;
  /** Blocks in the pool (0: every cache of every sequence at capacity). */
  poolBlocks?: number;
  /** Where kept keys sit in rotary space (default 'original'); tokens may then pass the context when every run evicts while decoding. */
  positions?: PositionMode;
  /**
   * Which caches of a sequence share its budget (default 'head'); 'layer' and
   * 'sequence' are for token-mode runs that evict while decoding (a 'block'
   * mode or a chunk above 0 throws ParameterError).
   */
  granularity?: Granularity;
}

/** A row of `kvevict serve-bench --format json`. */
export interface ServeRow {
  /** null for the full cache. */
  policy: string | null;
  budget: number | null;
  mode: 'full' | 'token' | 'block' | 'chunked';
  /** A policy's rows with granularity 'layer' or 'sequence' only. */
  granularity?: 'layer' | 'sequence';
  prefixSharing: 'on' | 'off';
  sequences: number;
  sharedPrefix: number;
  tokens: number;
  chunk?: number;
  prompt?: number;
  blockSize: number;
  poolBlocks: number;
  /** Pool blocks in use at once, the most (measured). */
  peakBlocks: number;
  /** Block references beyond the blocks in use, the most at once. */
  blocksSavedBySharing: number;
  sharedBlocks: number;
  copiedBlocks: number;
  peakPositions: number;
  peakCachePositions: number;
  positionsHeld: number;
  evicted: number;
  /** Blocks in use after every sequence left: 0. */
  leakedBlocks: number;
  tokensPerSecond: number;
  seconds: number;
}

/** Sequences decoding together over one block pool; synchronous (blocks the thread). */
export function serveBench(model: Model, text: Text, options?: ServeBenchOptions): ServeRow[];

export interface CompareModelOptions extends ModelRunOptions {
  /** Names, or "all" / "a,b" (default: every policy). */
  policies?: readonly string[] | string;
  /** Default [64, 128, 256, 512]; ranked by perplexity at the middle one. */
  budgets?: readonly number[];
  /** As for compare(). */
  overrides?: { readonly [key: string]: number | Params | undefined };
}
/** Every policy x budget by perplexity: the full cache first (rank null), then ranked. Synchronous. */
export function compareModel(model: Model, text: Text, options?: CompareModelOptions): CompareModelRow[];

export interface SweepModelOptions extends ModelRunOptions {
  /** The policy whose parameter is swept. */
  policy: string;
  /** The parameter (camelCase, e.g. "recentWindow"); "budget" sweeps the budget itself and ignores `budgets`. */
  param: string;
  values: readonly number[];
  /** Default [64, 128, 256]. */
  budgets?: readonly number[];
  /** The policy's other parameters. */
  params?: Params;
  /**
   * Leave out the value x budget pairs the policy's rules refuse (a recentWindow
   * of 96 at budget 64) instead of throwing at the first, as the tool's
   * --skip-refused; they are listed in the result's `skipped`.
   */
  skipRefused?: boolean;
}
/** sweepModel()'s rows, with `skipped` (non-enumerable): the pairs skipRefused left out, one line each. */
export type SweepRows = PerplexityRow[] & { readonly skipped: string[] };
/**
 * `kvevict sweep --model`: perplexity rows, the full cache first, then each
 * value x budget (value-major), each with its paired interval and `params`
 * holding the value. Synchronous.
 */
export function sweepModel(model: Model, text: Text, options: SweepModelOptions): SweepRows;

export type TaskName = 'passkey' | 'multikey' | 'multivalue' | 'vartrack' | 'copy';
export type Moment = 'decode' | 'prefill' | 'prefill-query';
/** Options of tasks(), as `kvevict tasks` takes them. */
export interface TasksOptions {
  /** Names, "a,b" or "all" (default "passkey"). */
  tasks?: readonly TaskName[] | string;
  /** Sample lengths in positions, at most the model's context (default [1024]). */
  lengths?: readonly number[];
  /** Needle depths per length, (i + 0.5) / depths, 1 ... 100 (default 5). */
  depths?: number;
  /** Samples per task x length x depth, 1 ... 100000 (default 20). */
  samples?: number;
  /** Names, "a,b", "all" (all ten, the default), or null / "none" for the full cache only. */
  policies?: readonly string[] | string | null;
  /** Positions per cache (default [128]). */
  budgets?: readonly number[];
  /** When the cache is compressed (default "decode"). */
  moments?: readonly Moment[] | string;
  /** As for compare(). */
  overrides?: { readonly [key: string]: number | Params | undefined };
  /** Samples are reproducible from it (default 1). */
  seed?: number;
  /** Prefill moments: attention rows the compression scores from (default 32). */
  window?: number;
  /** Prefill moments: read the prompt in chunks of N, compressing after each (0, the default: once). */
  chunk?: number;
  kvPrecision?: 'fp32' | 'fp16' | 'int8' | 'int4';
  kvResidual?: number;
  /**
   * Which caches share the budget at the decode moment (default 'head'); with
   * 'layer' or 'sequence' a prefill moment throws ParameterError.
   */
  granularity?: Granularity;
}
/** A row of `kvevict tasks --format json`. */
export interface TaskRow {
  task: TaskName;
  /** "full" for the full cache. */
  policy: string;
  /** 0 for the full cache. */
  budget: number;
  moment: 'full' | Moment;
  length: number;
  depth: number;
  samples: number;
  correct: number;
  accuracy: number;
  /** Wilson 95 % interval. */
  accuracy_low: number;
  accuracy_high: number;
  evicted: number;
  kvPrecision: string;
  kvResidual: number;
  bytesPerPosition: number;
  /** A policy's rows with granularity 'layer' or 'sequence' only. */
  granularity?: 'layer' | 'sequence';
}
/**
 * `kvevict tasks`: retrieval tasks answered by the model with greedy decoding, needles hidden in `text`
 * (docs/tasks.md): every task x length x depth, the full cache first, then each policy x budget x moment.
 * Synchronous.
 */
export function tasks(model: Model, text: Text, options?: TasksOptions): TaskRow[];
export function tasks(options: TasksOptions & { model: Model; text: Text }): TaskRow[];

/** Options of benchModel(), as `kvevict bench --model` takes them. */
export interface BenchModelOptions {
  /** Tokens decoded a pass, from the text's start (default 1024; at most the text and the context). */
  tokens?: number;
  /** Passes a run, 1 ... 1000 (default 5): each timed, then profiled. */
  rounds?: number;
  /** Names, "a,b" or "all" (default h2o, scissorhands, snapkv, sliding-window). */
  policies?: readonly string[] | string;
  /** Default [128]. */
  budgets?: readonly number[];
  /** Tokens prefilled before the timed ones, and a prefill row timing them (default 0). */
  prompt?: number;
  /** Thread counts, each timed (default [0]: every core). */
  threads?: readonly number[];
  /** And a row stepping every run together as one batch, and with a prompt a "prefill together" row feeding every run's prompt as one batch (default false). */
  together?: boolean;
  /** Tokens a prefill pass takes at once, 1 ... 4096 (default 256). */
  prefillChunk?: number;
  /** The prompt's logits computed: 'all' (every token's, the default) or 'last' (the last token's only, llama.cpp's default). */
  promptLogits?: 'all' | 'last';
}
/** A row of `kvevict bench --model --format json` (kvevict/model/serving/decode_bench.h). */
export interface DecodeBenchRow {
  mode: 'decode' | 'prefill' | 'together' | 'prefill together';
  /** "full cache" first; "all runs" for together. */
  policy: string;
  /** 0 for the full cache. */
  budget: number;
  threads: number;
  /** Decoders a pass steps. */
  runs: number;
  /** Tokens prefilled before the timed ones. */
  prompt: number;
  tokens: number;
  /** The median round's, wall time; a together row counts every run's tokens. */
  tokensPerSecond: number;
  tokensPerSecondSpread: { min: number; median: number; max: number };
  weightBytesPerToken: number;
  readBandwidthGBps: number;
  /** The read bandwidth over the weights' bytes a token. */
  floorTokensPerSecond: number;
  ofFloor: number;
  /** prefill: over the full cache's decode; together: over the runs one at a time; 0 for decode. */
  speedup: number;
  /** Shares of a step's time (they sum to 1 on a decode row). */
  shares: { projections: number; activation: number; attention: number; policies: number; other: number };
}
/**
 * `kvevict bench --model`: decode speed and the decode profile. `text` omitted (or null):
 * model/heldout-sample.txt from the working folder, the tool's default. Synchronous.
 */
export function benchModel(model: Model, text?: Text | null, options?: BenchModelOptions): DecodeBenchRow[];
export function benchModel(options: BenchModelOptions & { model: Model; text?: Text | null }): DecodeBenchRow[];

/** Options of stream(), as `kvevict stream` takes them (docs/streaming.md). */
export interface StreamOptions {
  /**
   * 'default' (sliding-window, streaming-llm:sinks=1, streaming-llm:sinks=4, h2o, tova, scissorhands, snapkv),
   * 'none' or null (no policy), items 'name' / 'name:key=value[:key=value]', comma-separated or an array.
   */
  policies?: readonly string[] | string | null;
  /** Positions a cache holds, each below the context (default [256, 512]). */
  budgets?: readonly number[];
  /** 'original', 'cache', 'original,cache' or an array (default both). */
  positions?: readonly PositionMode[] | string;
  /** Tokens of the stream, BOS included (0: the whole text). */
  tokens?: number;
  /** Tokens a segment of the report (0: the model's context). */
  segment?: number;
  /** The full cache too, as far as the context (default true). */
  fullCache?: boolean;
  /** StreamingLLM's sliding window with re-computation: the window (0: not run). */
  recompute?: number;
  /** With recompute: over the stream's first N tokens. */
  recomputeTokens?: number;
  /** As for perplexity(). */
  kvPrecision?: 'fp32' | 'fp16' | 'int8' | 'int4';
  kvResidual?: number;
  /** As for compareModel(): under each item's own parameters. */
  overrides?: { readonly [key: string]: number | Params | undefined };
  /**
   * 'head' (each cache its own budget, the default) or 'sequence' (every cache
   * holds the same `budget` positions); 'layer' throws ParameterError (a head
   * could then hold more than the budget).
   */
  granularity?: 'head' | 'sequence';
}
/** A segment of a stream row: the predictions of the tokens at stream positions [begin, end). */
export interface StreamSegment {
  begin: number;
  end: number;
  predictions: number;
  bytes: number;
  bitsPerByte: number;
  perplexity: number;
}
/** A row of `kvevict stream --format json`. */
export interface StreamRow {
  /** null for the full cache; 'recompute' for the recomputed window. */
  policy: string | null;
  /** 'full cache', 'recompute', 'streaming-llm sinks=4', ... */
  label: string;
  /** 0 for the full cache. */
  budget: number;
  params: Params;
  positions: PositionMode;
  tokens: number;
  predictions: number;
  bytes: number;
  bitsPerByte: number;
  /** Original positions past the context the model was trained on. */
  pastTrainedContext: boolean;
  peakPositions: number;
  evicted: number;
  kvPrecision: 'fp32' | 'fp16' | 'int8' | 'int4';
  /** A policy's rows with granularity 'sequence' only. */
  granularity?: 'sequence';
  tokenizer: string;
  seconds: number;
  segments: StreamSegment[];
}
/** Exactly the object `kvevict stream --format json` prints (model: the path the model was opened with). */
export interface StreamResult extends Envelope<'stream', StreamRow> {
  model: string;
}
/**
 * `kvevict stream`: the full cache first (it stops at the context), then each policy x budget at each
 * position mode, then the recomputed window. Every policy and budget is checked before any work
 * (ParameterError). Synchronous.
 */
export function stream(model: Model, text: Text, options?: StreamOptions): StreamResult;
export function stream(options: StreamOptions & { model: Model; text: Text }): StreamResult;

/** Options of choose(), as `kvevict choose` takes them (docs/choosing.md). */
export interface ChooseOptions {
  /** Positions each cache keeps, 1 ... context - 1 with room for a passkey sample that evicts (default 256). */
  budget?: number;
  /** Names, "a,b" or "all"; omitted or null: every policy the granularity can run. */
  policies?: readonly string[] | string | null;
  /** The time budget, probes included, 0.1 ... 1440 (default 15). */
  minutes?: number;
  /**
   * Fix the plan instead of timing it (omitted, null or 0: planned): perplexity windows (at least 2, at most
   * the text's) and passkey samples a depth (at most 100). A fixed plan makes the same rows on every machine.
   */
  windows?: number | null;
  samples?: number | null;
  /**
   * 'head' (each cache its own budget, the default) or 'sequence' (every cache holds the same `budget`
   * positions: llama.cpp's cells); 'layer' throws ParameterError.
   */
  granularity?: 'head' | 'sequence';
}
/** The plan of a choose() run. */
export interface ChoosePlan {
  /** Perplexity windows planned (timed: an estimate; the result's `windows` ran), of `windowsAvailable`. */
  windows: number;
  windowsAvailable: number;
  /** Positions a window. */
  context: number;
  /** Positions a passkey sample. */
  passkeyLength: number;
  depths: number;
  /** Passkey samples a depth planned (timed: an estimate; the result's `samples` ran). */
  samples: number;
  /** Tokens decoded a run, timed at a cache of `budget`. */
  decodeTokens: number;
  /** The probe: the text's first 64 positions through every run (0 when windows and samples are fixed). */
  probeSeconds: number;
  /** One window, one passkey sample through every run, estimated from the probe (0 when not probed). */
  windowSeconds: number;
  sampleSeconds: number;
  /** The estimate, probes included. */
  plannedSeconds: number;
}
/** A ranked row of `kvevict choose --format json`. */
export interface ChooseRow {
  /** 1: the fewest extra bits per byte. */
  rank: number;
  policy: string;
  budget: number;
  extraBitsPerByte: number;
  /** The 95 % interval of the extra bits, paired by window; null without one. */
  extraLow: number | null;
  extraHigh: number | null;
  /** Passkey, both depths together. */
  passkeyCorrect: number;
  passkeySamples: number;
  passkeyAccuracy: number;
  /** Decode at a cache of `budget` (0 at granularity 'sequence': not timed). */
  tokensPerSecond: number;
  /** One sequence at the budget: every cache, keys and values. */
  kvBytes: number;
}
/** What `kvevict choose --format json` prints. */
export interface ChooseResult extends Envelope<'choose', ChooseRow> {
  /** The path the model was opened with. */
  model: string;
  /** Ranked by extra bits per byte. */
  rows: ChooseRow[];
  plan: ChoosePlan;
  /** kvBytes: a window's worth, at the context. */
  fullCache: { passkeyAccuracy: number; tokensPerSecond: number; kvBytes: number };
  /** One line: rank 1, and why (naming the policies its interval does not set it apart from). */
  recommendation: string;
  /** The commands that would narrow the intervals (the text named `TEXT`: it came as bytes). */
  narrow: string[];
  /** Perplexity windows read (of `plan.context` positions), and passkey samples a depth answered. */
  windows: number;
  samples: number;
  seconds: number;
}
/**
 * `kvevict choose`: which policy to run on `model` at a budget, and what it costs, within a time budget. Every
 * policy and the budget are checked before any work (ParameterError); a text too short for two windows is an
 * InputError. Synchronous.
 */
export function choose(model: Model, text: Text, options?: ChooseOptions): ChooseResult;
export function choose(options: ChooseOptions & { model: Model; text: Text }): ChooseResult;

/** The attention sink of one layer (`kvevict stream --sinks`). */
export interface SinkShare {
  layer: number;
  first: number;
  firstFour: number;
  evenFirst: number;
  evenFirstFour: number;
}
/** Per layer, on the full cache over the first `tokens` tokens (0: the context); synchronous. */
export function sinkShares(model: Model, text: Text, options?: { tokens?: number }): SinkShare[];
export function sinkShares(options: { model: Model; text: Text; tokens?: number }): SinkShare[];

/**
 * The softmax weights `queries` (groups x headDim floats, head-major, already rotated) pay to the keys
 * (n x headDim floats, row-major, as the cache stores them), averaged over the query heads (docs/signals.md):
 * a new Float32Array of n weights. scale: each query is multiplied by it first (default 1/sqrt(headDim)).
 */
export function attentionFromKeys(
  queries: Float32Array | readonly number[],
  keys: Float32Array | readonly number[],
  headDim: number,
  scale?: number,
): Float32Array;
/**
 * RoPE in the GPT-NeoX layout (dimension i pairs with i + headDim/2): a new Float32Array, `x` (headDim
 * floats, even) rotated to position `pos`; base: the model's RoPE base (default 10000, config.ropeBase).
 */
export function ropeNeox(x: Float32Array | readonly number[], pos: number, base?: number): Float32Array;

/**
 * Attention as [heads, N, N] (or one head as [N, N]), row-major: row t holds
 * the weights token t gave positions 0 ... t-1, zeros elsewhere.
 */
export interface AttentionArray {
  shape: number[];
  data: Float32Array;
}
/**
 * The full cache's attention over the first `tokens` bytes of `text` (0 or
 * omitted: as many as the context holds): shape [layers * heads, N, N], head
 * index layer * kvHeads + KV head. Synchronous.
 */
export function recordAttention(model: Model, text: Text, tokens?: number): AttentionArray;

export interface PersistenceRow {
  lag: number;
  /** Pooled count of above-fair-share positions over every step t with t + lag in the trace. */
  important: number;
  /** Of those, still above fair share at t + lag. */
  persisted: number;
  share: number;
  /** The chance level: the mean share of positions above fair share at a step. */
  baseRate: number;
}
/** The persistence of importance (Scissorhands, section 3), one row per lag (each in 1 ... N-1). */
export function persistence(attention: AttentionArray, lags: readonly number[]): PersistenceRow[];

/**
 * Prefill compression (docs/prefill.md): the positions, ascending, that `policy`
 * keeps of a prompt of n positions, at most `budget` of them (all of them when
 * budget >= n). `window[i]` is the attention of the query at position
 * n - window.length + i over positions 0 ... n-1 (its own included), 0 after
 * its diagonal; every row has n weights. `params` are the policy's, without
 * budget. Throws ParameterError (unknown policy, bad parameter or budget),
 * InputError (a bad window: shape, a NaN, infinite or negative weight, or a
 * weight after the diagonal), RangeError (rows of different lengths, a
 * negative budget) or TypeError.
 */
export function prefill(
  policy: string,
  window: readonly (Float32Array | readonly number[])[],
  budget: number,
  params?: Params,
): Position[];

/** Base of the errors the core throws on purpose. */
export class KvevictError extends Error {
  constructor(message: string);
}
/** A parameter that breaks a rule; also an unknown policy or parameter name. */
export class ParameterError extends KvevictError {}
/** A broken contract: positions out of order, a capacity overrun, a NaN/infinite/negative weight. */
export class ContractError extends KvevictError {}
/** Bad input from outside: an unknown trace, steps out of range, a missing vector path, a bad .kvm file. */
export class InputError extends KvevictError {}

/** Where the native addon was loaded from. */
export const addonPath: string;
