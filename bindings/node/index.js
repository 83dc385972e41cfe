'use strict';
// kvevict for Node.js: KV-cache eviction policies for LLM decoding.
//
// Loads the N-API addon from $KVEVICT_NODE_ADDON when set, else the one
// `npm install` of the packed package built (build/Release/kvevict.node), else
// the repository's CMake build, <repository>/build/bindings/node/kvevict.node, and wraps
// it: one class per registered policy (introspection methods from the
// registry's queries), a generator over trace steps, and run/compare results
// as the tool's JSON objects. Types: index.d.ts.

const fs = require('node:fs');
const path = require('node:path');

/** Base class of every error the library throws on purpose. */
class KvevictError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}
/** A parameter that breaks a rule (unknown policy or parameter, recentWindow >= budget, ...). */
class ParameterError extends KvevictError {}
/** The caller broke the policy contract (positions out of order, capacity overrun, NaN weights). */
class ContractError extends KvevictError {}
/** Bad input from outside: an unknown trace id, steps out of range, a missing vector path. */
class InputError extends KvevictError {}

// Built by `npm install` of the packed package (scripts/install.js).
const PACKAGE_ADDON = path.join(__dirname, 'build', 'Release', 'kvevict.node');
// Built by the repository's CMake (this folder in a checkout).
const REPOSITORY_ADDON = path.join(__dirname, '..', '..', 'build', 'bindings', 'node', 'kvevict.node');

function addonFile() {
  if (process.env.KVEVICT_NODE_ADDON) return path.resolve(process.env.KVEVICT_NODE_ADDON);
  return fs.existsSync(PACKAGE_ADDON) ? PACKAGE_ADDON : REPOSITORY_ADDON;
}

function loadAddon(file) {
  try {
    return require(file);
  } catch (e) {
    const how = process.env.KVEVICT_NODE_ADDON
      ? 'KVEVICT_NODE_ADDON points to it'
      : 'in a checkout, build it with `cmake --preset release && cmake --build --preset release` (after `npm ci` ' +
        'in bindings/node); an installed package builds it at `npm install`; or set KVEVICT_NODE_ADDON';
    throw new Error(`kvevict: cannot load the native addon ${file} (${how}): ${e.message}`);
  }
}

const addonPath = addonFile();
const native = loadAddon(addonPath);
native.setErrorClasses({ KvevictError, ParameterError, ContractError, InputError });
// The kernels run at the SIMD target KVEVICT_SIMD names, if set; an unknown
// target, or one the CPU lacks, fails the load with the reason.
if (process.env.KVEVICT_SIMD !== undefined) {
  try {
    native.selectSimd(process.env.KVEVICT_SIMD);
  } catch (e) {
    throw new ParameterError(`KVEVICT_SIMD=${process.env.KVEVICT_SIMD}: ${e.message}`);
  }
}

/**
 * Base of every policy class. Not constructed directly: use a policy class
 * (`new Scissorhands({ budget: 512 })`) or `policy(name, params)`.
 */
class Policy extends native.Policy {
  constructor(name, params) {
    if (new.target === Policy) {
      throw new TypeError('Policy is abstract: use a policy class such as new Scissorhands(params), or policy(name, params)');
    }
    super(name, params);
  }
}

// How a policy shows in console.log / util.inspect.
Object.defineProperty(Policy.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value: function inspect() {
    return `${this.constructor.name} ${JSON.stringify(this.params)} (kept ${this.keptCount()})`;
  },
  configurable: true,
});

const catalogue = native.policies();

/** Registry name -> class, for every registered policy. */
const policyClasses = Object.create(null);
/** Title ("Scissorhands", "H2O", ...) -> class: the named exports. */
const classesByTitle = {};

for (const info of catalogue) {
  const registryName = info.name;
  // Named after the registry's title ("Scissorhands", "SlidingWindow", ...).
  const cls = {
    [info.title]: class extends Policy {
      constructor(params) {
        super(registryName, params);
      }
    },
  }[info.title];
  for (const query of info.queries) {
    const queryName = query.name;
    Object.defineProperty(cls.prototype, queryName, {
      value: { [queryName](...args) { return this.query(queryName, args); } }[queryName],
      writable: true,
      configurable: true,
      enumerable: false,
    });
  }
  Object.defineProperty(cls, 'policyName', { value: registryName, enumerable: true });
  policyClasses[registryName] = cls;
  classesByTitle[info.title] = cls;
}

/** Builds any registered policy by name; parameters missing from `params` take their defaults. */
function policy(name, params) {
  if (typeof name !== 'string') {
    throw new TypeError(`policy name must be a string, got ${name === null ? 'null' : typeof name}`);
  }
  const cls = policyClasses[name];
  // An unknown name goes to the core, whose ParameterError lists the known ones.
  if (cls === undefined) return new native.Policy(name, params);
  return new cls(params);
}

/** Every registered policy: name, title, summary, parameters with defaults, queries. */
function policies() {
  return native.policies();
}

/** The kernels' SIMD targets, lowest first: {compiled, supported, active}. */
function simd() {
  return native.simd();
}

/**
 * Runs every kernel at `target` ("baseline", "sse4", "avx2", "avx512", or "best") from now on;
 * throws ParameterError for an unknown target or one this CPU cannot run.
 */
function selectSimd(target) {
  native.selectSimd(target);
}

/** PyramidKV's share of `layer` in a stack of `numLayers` whose average share is `budget`. */
function pyramidBudget(budget, layer, numLayers, ratio) {
  return native.pyramidBudget(budget, layer, numLayers, ratio);
}

/**
 * The steps of a generated trace, each a new Float32Array of t weights over
 * positions 0 ... t-1 (t = 1, 2, ...). The id and step count are checked now,
 * not at the first next(). The generator also carries `id`, `length` (positions)
 * and `steps` (how many it yields).
 */
function trace(id = 'decode-4096', steps) {
  const t = new native.Trace(id, steps);
  function* generate() {
    for (let w = t.next(); w !== undefined; w = t.next()) yield w;
  }
  const iterator = generate();
  // The trace's id, its number of positions, and the steps this iterator yields.
  Object.defineProperties(iterator, {
    id: { value: t.id, enumerable: true },
    length: { value: t.length, enumerable: true },
    steps: { value: t.steps, enumerable: true },
  });
  return iterator;
}

/** FNV-1a 32 parity hash of the first `steps` steps (all when omitted). */
function traceHash(id = 'decode-4096', steps) {
  return native.traceHash(id, steps);
}

/** One policy at one budget over a trace; the object `kvevict run --format json` prints. */
function run(options) {
  return native.run(options);
}

/** Policies x budgets, ranked; the object `kvevict compare --format json` prints. */
function compare(options) {
  return native.compare(options);
}

/**
 * Every command's JSON described, as `kvevict schema` prints it: the envelope
 * {command: 'schema', model: null, rows, envelope}, a row per command (and
 * variant) {command, variant, model, rows: [field], extra: [field]}, each
 * field {name, type, unit?, description, presentWhen?, fields?} in output
 * order. A fresh copy on each call.
 */
function rowSchema() {
  return JSON.parse(native.rowSchemaJson);
}

/** Replays vector files or folders through the C++ runner; `{passed, failed, failures}`. */
function runVectors(paths) {
  return native.runVectors(paths);
}

// ---- the real model ---------------------------------------------------------------

/**
 * A small byte-level transformer read from a .kvm file (model/FORMAT.md): the
 * whole file is read and checked at construction (InputError naming the file
 * and what is wrong). Immutable; one Model serves any number of Decoders and
 * evaluations. `config`, `parameterCount`, `path`.
 */
class Model extends native.Model {
  constructor(path, options) {
    super(path, options);
  }
}
Object.defineProperty(Model.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value: function inspect() {
    const c = this.config;
    return `Model ${JSON.stringify(this.path)} (layers=${c.layers}, heads=${c.heads}, width=${c.width}, ` +
      `context=${c.context}, ${this.parameterCount} parameters)`;
  },
  configurable: true,
});

/**
 * One sequence through a Model, token by token, with a real KV cache per
 * (layer, head); a head given a policy evicts what the policy names.
 * new Decoder(model, capacity = 0, {positions = 'original'}?) or
 * new Decoder(model, {capacity, positions}): positions 'cache' places kept
 * keys at their index among the positions held (docs/streaming.md). With a
 * policy on every cache it steps on past the capacity and the context.
 */
class Decoder extends native.Decoder {
  constructor(model, capacity, options) {
    super(model, capacity, options);
  }
}
Object.defineProperty(Decoder.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value: function inspect() {
    return `Decoder (position ${this.position}, capacity ${this.capacity}, evicted ${this.evicted})`;
  },
  configurable: true,
});

/**
 * Sequences decoding together over one block pool (docs/serving.md):
 * new Batch(model, {poolBlocks, capacity = 0, blockSize = 16, sharePrefix = true, positions = 'original'}).
 * join(policy = null, budget?, params?, mode = 'token') -> id; step(id, byte)
 * -> logits (Float32Array); leave(id); held(id, cache); poolStats();
 * sequences. Every sequence's logits equal its solo run's to the bit; a
 * failed step removes that sequence, and the others go on.
 */
class Batch extends native.Batch {
  constructor(model, options) {
    super(model, options);
  }
}
Object.defineProperty(Batch.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value: function inspect() {
    const s = this.poolStats();
    return `Batch (${this.sequences.length} sequences, ${s.inUse} of ${s.blocks} blocks in use)`;
  },
  configurable: true,
});

/**
 * Whole-block eviction over any policy, for a paged KV cache (docs/paged.md):
 * new BlockEvictor(policy, blockBudget, {blockSize = 16, startBlocks = 0,
 * recentBlocks = 0, blockScore = 'sum'}?, params?). The policy's budget is
 * blockBudget x blockSize. Each step onDecodeStep(pos, attn), then
 * evictBlocks(blockBudget): the evicted logical block indices, ascending;
 * evictedPositions(), removedBefore(), positions(), blockScoreOf(block),
 * keptCount(), blockCount(), query(name, args) for the policy's queries.
 */
class BlockEvictor extends native.BlockEvictor {
  constructor(policyName, blockBudget, options, params) {
    super(policyName, blockBudget, options, params);
  }
}
Object.defineProperty(BlockEvictor.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value: function inspect() {
    return `BlockEvictor ${this.policy} (blocks of ${this.blockSize}, ${this.keptCount()} held in ${this.blockCount()} blocks)`;
  },
  configurable: true,
});

/**
 * One budget per layer shared by its KV heads, AdaKV-style (docs/paged.md):
 * new LayerBudget(policy, heads, layerBudget, headFloor = -1, params?). Step
 * each head with onDecodeStep(head, pos, attn), then evict(layerBudget) (how
 * many went) and victims(head); keptCount(head), totalKept(), headFloor,
 * headBudget, query(head, name, args).
 */
class LayerBudget extends native.LayerBudget {
  constructor(policyName, heads, layerBudget, headFloor, params) {
    super(policyName, heads, layerBudget, headFloor, params);
  }
}
Object.defineProperty(LayerBudget.prototype, Symbol.for('nodejs.util.inspect.custom'), {
  value: function inspect() {
    return `LayerBudget (${this.heads} heads, ${this.totalKept()} held, floor ${this.headFloor})`;
  },
  configurable: true,
});

/** Perplexity of the full cache, then of each run; synchronous (blocks the thread). */
function perplexity(model, text, runs, options) {
  return native.perplexity(model, text, runs, options);
}

/** Every policy x budget by perplexity, ranked, with the attention proxies; synchronous. */
function compareModel(model, text, options) {
  return native.compareModel(model, text, options);
}

/** One policy's parameter swept on the model: perplexity rows, the full cache first (`kvevict sweep --model`); synchronous. */
function sweepModel(model, text, options) {
  return native.sweepModel(model, text, options);
}

// tasks({model, text, ...options}) as well as tasks(model, text, options): a
// lone plain object (not a Model) carries the model and the text with it.
function spread(model, text, options) {
  if (model !== null && typeof model === 'object' && !(model instanceof native.Model) &&
      text === undefined && options === undefined) {
    const { model: m, text: t, ...rest } = model;
    return [m, t, rest];
  }
  return [model, text, options];
}

/**
 * `kvevict tasks`: retrieval tasks answered by the model with greedy decoding (docs/tasks.md); the rows
 * `kvevict tasks --format json` prints. tasks(model, text, options?) or tasks({model, text, ...options});
 * synchronous.
 */
function tasks(model, text, options) {
  return native.tasks(...spread(model, text, options));
}

/**
 * `kvevict bench --model`: decode speed and the decode profile, the full cache then each policy x budget;
 * the rows `kvevict bench --model --format json` prints. benchModel(model, text?, options?) or
 * benchModel({model, text?, ...options}); text omitted: model/heldout-sample.txt from the working folder.
 * Synchronous.
 */
function benchModel(model, text, options) {
  return native.benchModel(...spread(model, text, options));
}

/**
 * `kvevict stream` (docs/streaming.md): one long text read as a single sequence past the model's context,
 * every cache held at its budget; what `kvevict stream --format json` prints, {rows: [...]} with segments.
 * stream(model, text, options?) or stream({model, text, ...options}); synchronous.
 */
function stream(model, text, options) {
  return native.stream(...spread(model, text, options));
}

/**
 * `kvevict choose` (docs/choosing.md): which policy to run on the model at a budget, and what it costs, within a
 * time budget: every policy by perplexity (paired intervals), passkey accuracy and decode speed, ranked by extra
 * bits per byte, with one line that recommends rank 1; what `kvevict choose --format json` prints. choose(model,
 * text, options?) or choose({model, text, ...options}); synchronous (seconds to `minutes`).
 */
function choose(model, text, options) {
  return native.choose(...spread(model, text, options));
}

/**
 * The attention sink (`kvevict stream --sinks`): per layer, the share of attention the first position and
 * the first four draw on the full cache. sinkShares(model, text, {tokens}?) or sinkShares({model, text,
 * tokens}); synchronous.
 */
function sinkShares(model, text, options) {
  return native.sinkShares(...spread(model, text, options));
}

/** The weights query heads (groups x headDim floats) pay to n keys (n x headDim), averaged over the heads. */
function attentionFromKeys(queries, keys, headDim, scale) {
  return native.attentionFromKeys(queries, keys, headDim, scale);
}

/** RoPE in the GPT-NeoX layout: a new Float32Array, `x` rotated to position `pos`. */
function ropeNeox(x, pos, base) {
  return native.ropeNeox(x, pos, base);
}

/** `kvevict serve-bench`: sequences over one block pool, one row per run (docs/serving.md); synchronous. */
function serveBench(model, text, options) {
  return native.serveBench(model, text, options);
}

/** The full cache's attention: {shape: [layers * heads, N, N], data: Float32Array}; synchronous. */
function recordAttention(model, text, tokens) {
  return native.recordAttention(model, text, tokens);
}

/** The persistence of importance over recorded attention: [{lag, important, persisted, share, baseRate}]. */
function persistence(attention, lags) {
  return native.persistence(attention, lags);
}

/** Prefill compression: the positions (ascending) a policy keeps of a prompt, from its last attention rows. */
function prefill(policyName, window, budget, params) {
  return native.prefill(policyName, window, budget, params);
}

module.exports = {
  Policy,
  ...classesByTitle,
  policyClasses,
  policy,
  policies,
  simd,
  selectSimd,
  pyramidBudget,
  trace,
  traceHash,
  run,
  compare,
  rowSchema,
  runVectors,
  Model,
  Decoder,
  Batch,
  BlockEvictor,
  LayerBudget,
  perplexity,
  compareModel,
  sweepModel,
  serveBench,
  tasks,
  benchModel,
  stream,
  choose,
  sinkShares,
  attentionFromKeys,
  ropeNeox,
  recordAttention,
  persistence,
  prefill,
  KvevictError,
  ParameterError,
  ContractError,
  InputError,
  addonPath,
};
