'use strict';
// Shared by the test files: the binding, where the data lives, and a replay of
// language-neutral vector files (spec/vectors.md) through the JavaScript API.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const kv = require('..');

const repoRoot = path.resolve(__dirname, '..', '..', '..');
const ownVectorsDir = path.join(repoRoot, 'vectors');
// The peer catalogue's data, beside the repository (absent in a user's clone).
const conformanceDir = path.resolve(repoRoot, '..', 'shared', 'conformance', 'policybook');

function vectorFiles(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).filter((f) => f.endsWith('.vectors.json')).sort().map((f) => path.join(dir, f));
}

// spec/vectors.md comparison: numbers exactly or within the tolerance (NaN
// equals NaN, infinities exactly); arrays element by element with equal length;
// objects by key set, then values; booleans never equal numbers.
function equal(expected, actual, tolerance) {
  if (typeof expected === 'number' && typeof actual === 'number') {
    if (Number.isNaN(expected) || Number.isNaN(actual)) return Number.isNaN(expected) && Number.isNaN(actual);
    if (!Number.isFinite(expected) || !Number.isFinite(actual)) return expected === actual;
    return Math.abs(expected - actual) <= tolerance;
  }
  if (Array.isArray(expected) || Array.isArray(actual)) {
    if (!Array.isArray(expected) || !Array.isArray(actual) || expected.length !== actual.length) return false;
    return expected.every((e, i) => equal(e, actual[i], tolerance));
  }
  if (expected !== null && actual !== null && typeof expected === 'object' && typeof actual === 'object') {
    const ek = Object.keys(expected).sort();
    const ak = Object.keys(actual).sort();
    if (ek.length !== ak.length || ek.some((k, i) => k !== ak[i])) return false;
    return ek.every((k) => equal(expected[k], actual[k], tolerance));
  }
  return typeof expected === typeof actual && expected === actual;
}

const queriesOf = new Map(kv.policies().map((p) => [p.name, new Set(p.queries.map((q) => q.name))]));

// A vector step's signals object ({attention, key, value, queries}), each
// array as a Float32Array unless `plainArrays` (docs/signals.md).
function signalsOf(signals, plainArrays) {
  const out = {};
  for (const [name, values] of Object.entries(signals)) {
    out[name] = values === null || plainArrays ? values : Float32Array.from(values);
  }
  return out;
}

// One step through the public API; returns its result (null for onDecodeStep).
// `plainArrays` passes attention as number[] instead of a Float32Array.
function execute(p, step, plainArrays) {
  const args = step.args === undefined ? [] : step.args;
  switch (step.call) {
    case 'onDecodeStep': {
      const [pos, attn] = args;
      if (attn === null) p.onDecodeStep(pos, null);
      else p.onDecodeStep(pos, plainArrays ? attn : Float32Array.from(attn));
      return null;
    }
    case 'onStep':
      p.onStep(args[0], signalsOf(args[1], plainArrays));
      return null;
    case 'onOrigin':
      p.onOrigin(signalsOf(args[0], plainArrays));
      return null;
    case 'evict':
      return p.evict(args[0]);
    case 'keptCount':
      return p.keptCount();
    default:
      if (!queriesOf.get(p.name).has(step.call) || typeof p[step.call] !== 'function') {
        throw new Error(`${p.name} has no method '${step.call}'`);
      }
      return p[step.call](...args);
  }
}

const weightsOf = (attn, plainArrays) => (attn === null ? null : plainArrays ? attn : Float32Array.from(attn));

// A case with "blocks" (docs/paged.md): its steps through kv.BlockEvictor.
function blockSubject(policyName, c, plainArrays) {
  const b = c.blocks;
  const ev = new kv.BlockEvictor(policyName, b.blockBudget === undefined ? 32 : b.blockBudget, {
    blockSize: b.blockSize, startBlocks: b.startBlocks, recentBlocks: b.recentBlocks, blockScore: b.blockScore,
  }, c.params === undefined ? {} : c.params);
  return (step) => {
    const args = step.args === undefined ? [] : step.args;
    switch (step.call) {
      case 'onDecodeStep': ev.onDecodeStep(args[0], weightsOf(args[1], plainArrays)); return null;
      case 'evictBlocks': return ev.evictBlocks(args[0]);
      case 'keptCount': return ev.keptCount();
      case 'blockCount': return ev.blockCount();
      case 'evictedPositions': return ev.evictedPositions();
      case 'removedBefore': return ev.removedBefore();
      case 'positions': return ev.positions();
      case 'blockScoreOf': return ev.blockScoreOf(args[0]);
      default: return ev.query(step.call, args);
    }
  };
}

// A case with "layer" (docs/paged.md): its steps through kv.LayerBudget.
function layerSubject(policyName, c, plainArrays) {
  const l = c.layer;
  const heads = l.heads === undefined ? 8 : l.heads;
  const layer = new kv.LayerBudget(policyName, heads, l.layerBudget === undefined ? 4096 : l.layerBudget,
    l.headFloor === undefined ? -1 : l.headFloor, c.params === undefined ? {} : c.params);
  const each = (f) => Array.from({ length: heads }, (_, h) => f(h));
  return (step) => {
    const args = step.args === undefined ? [] : step.args;
    switch (step.call) {
      case 'onDecodeStep':
        each((h) => layer.onDecodeStep(h, args[0], weightsOf(args[1][h], plainArrays)));
        return null;
      case 'evictLayer': layer.evict(args[0]); return each((h) => layer.victims(h));
      case 'keptCount': return each((h) => layer.keptCount(h));
      case 'totalKept': return layer.totalKept();
      case 'headFloor': return layer.headFloor;
      case 'headBudget': return layer.headBudget;
      default: return layer.query(args[0], step.call, args.slice(1));
    }
  };
}

// Replays one case; returns the list of failures (empty: the case passed).
function replayCase(policyName, c, plainArrays = false) {
  const failures = [];
  const tolerance = c.tolerance === undefined ? 1e-9 : c.tolerance;
  let subject;
  try {
    if ('blocks' in c) {
      subject = blockSubject(policyName, c, plainArrays);
    } else if ('layer' in c) {
      subject = layerSubject(policyName, c, plainArrays);
    } else {
      const p = kv.policy(policyName, c.params === undefined ? {} : c.params);
      subject = (step) => execute(p, step, plainArrays);
    }
  } catch (e) {
    return [`construction threw ${e.name}: ${e.message}`];
  }
  for (let i = 0; i < c.steps.length; i++) {
    const step = c.steps[i];
    let actual;
    try {
      actual = subject(step);
    } catch (e) {
      failures.push(`step ${i} (${step.call}) threw ${e.name}: ${e.message}`);
      break;  // a step that throws ends the case
    }
    if ('expect' in step && !equal(step.expect, actual, tolerance)) {
      failures.push(`step ${i} (${step.call} ${JSON.stringify(step.args)}): expected ${JSON.stringify(step.expect)}, got ${JSON.stringify(actual)}`);
    }
  }
  return failures;
}

function loadVectorFile(file) {
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (doc.version !== 1 || typeof doc.policy !== 'string' || !doc.policy.startsWith('kv-cache/') || !Array.isArray(doc.cases)) {
    throw new Error(`${file}: not a version-1 kv-cache vector file`);
  }
  return { policy: doc.policy.slice('kv-cache/'.length), cases: doc.cases };
}

// The kvevict executable of the addon's build folder (BUILD/bindings/node/kvevict.node
// -> BUILD/kvevict), why tests that compare with it skip when it is absent, and
// its JSON for the given arguments (the tests' independent side).
const toolFile = path.resolve(path.dirname(kv.addonPath), '..', '..', 'kvevict');
const noTool = fs.existsSync(toolFile) ? false : `the kvevict tool is not beside the addon (${toolFile})`;
function toolJson(...args) {
  const out = require('node:child_process').execFileSync(toolFile, [...args.map(String), '--format', 'json'],
    { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return JSON.parse(out);
}
// The rows of the tool's JSON, after checking it is the envelope every command
// prints: {command, model, rows, ...}, command the first argument, model the
// --model given (null without one).
function toolRows(...args) {
  const doc = toolJson(...args);
  const keys = Object.keys(doc).slice(0, 3);
  const i = args.indexOf('--model');
  const model = i < 0 ? null : String(args[i + 1]);
  if (keys.join() !== 'command,model,rows' || doc.command !== args[0] || doc.model !== model) {
    throw new Error(`kvevict ${args[0]}: not the envelope: ${JSON.stringify(doc).slice(0, 200)}`);
  }
  return doc.rows;
}
// Rows without their wall-clock seconds, which no two runs share.
const withoutSeconds = (rows) => rows.map(({ seconds, ...rest }) => rest);

// A little-endian float32 .npy file: {shape, data}.
function readNpy(file) {
  const bytes = fs.readFileSync(file);
  assert.equal(bytes.subarray(0, 6).toString('latin1'), '\x93NUMPY');
  const major = bytes[6];
  const headerLength = major === 1 ? bytes.readUInt16LE(8) : bytes.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + headerLength;
  const header = bytes.subarray(major === 1 ? 10 : 12, start).toString('latin1');
  assert.match(header, /'descr': '<f4'/);
  assert.match(header, /'fortran_order': False/);
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim() !== '').map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(count);
  for (let i = 0; i < count; i++) data[i] = bytes.readFloatLE(start + 4 * i);
  return { shape, data };
}

module.exports = { readNpy, kv, repoRoot, ownVectorsDir, conformanceDir, vectorFiles, equal, replayCase, loadVectorFile, toolFile, noTool, toolJson, toolRows, withoutSeconds };
