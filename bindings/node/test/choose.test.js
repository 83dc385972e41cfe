'use strict';
// Which policy at a budget (docs/choosing.md, `kvevict choose`): choose() at
// parity with `kvevict choose --format json` for the same request (the kvevict
// executable of the addon's build folder; those checks skip, with a message,
// when it is not there), the plan fixed (windows and samples) so that both make
// the same rows, and bad requests refused with the tool's message. What no two
// runs share -- wall-clock seconds and decode tokens/s -- is compared to the
// printed precision within one run, not between runs.

const test = require('node:test');
const assert = require('node:assert/strict');
const childProcess = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { kv, repoRoot, noTool: toolMissing, toolFile, toolJson: tool } = require('./support');

const modelDir = process.env.KVEVICT_MODEL_DIR ? path.resolve(process.env.KVEVICT_MODEL_DIR) : path.join(repoRoot, 'model');
const kvm = path.join(modelDir, 'kvevict-tiny.kvm');
const sampleFile = path.join(modelDir, 'heldout-sample.txt');
const skip = fs.existsSync(kvm) && fs.existsSync(sampleFile) ? false
  : `the model folder ${modelDir} lacks kvevict-tiny.kvm or heldout-sample.txt (set KVEVICT_MODEL_DIR)`;
const noTool = skip || toolMissing;

// A few seconds a run: two windows, one passkey sample at each of the two depths.
const request = { budget: 128, policies: 'h2o,tova,sliding-window', windows: 2, samples: 1 };
// The plan's timings: the probes are skipped with the plan fixed, but the time
// getting there and the estimate built on it are still measured.
const untimedPlan = ({ probeSeconds, plannedSeconds, ...rest }) => rest;
const untimed = ({ tokensPerSecond, ...rest }) => rest;
// The recommendation prints rank 1's decode speed.
const speed = /(-?[0-9]+\.[0-9]) tokens\/s/g;
const withoutSpeed = (line) => line.replace(speed, '<speed> tokens/s');

// The tool's arguments for the binding's options ({budget: 128} -> --budget 128).
const flags = (options) => Object.entries(options).flatMap(([key, value]) => [`--${key}`, value]);

// The tool's refusal of a request: its message, without the "kvevict: error: " it prints first.
function toolError(...args) {
  const out = childProcess.spawnSync(toolFile, ['choose', '--model', kvm, ...args.map(String), '--format', 'json'],
    { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(out.status, 1, out.stderr);
  const lines = out.stderr.split('\n').filter((line) => line.startsWith('kvevict: error: '));
  assert.equal(lines.length, 1, out.stderr);
  return lines[0].slice('kvevict: error: '.length);
}

let model;
let sample;
let chosen;
function setup() {
  if (model === undefined) {
    model = new kv.Model(kvm);
    sample = fs.readFileSync(sampleFile);
  }
}
// The binding's answer, made once for the tests that read it.
function answer() {
  setup();
  if (chosen === undefined) chosen = kv.choose({ model, text: sample, ...request });
  return chosen;
}

test('choose() equals the tool\'s JSON', { skip: noTool }, () => {
  const got = answer();
  const want = tool('choose', '--model', kvm, '--text', sampleFile, ...flags(request));
  assert.deepEqual(Object.keys(got), Object.keys(want));
  assert.deepEqual(Object.keys(got),
    ['command', 'model', 'rows', 'plan', 'fullCache', 'recommendation', 'narrow', 'windows', 'samples', 'seconds']);
  assert.equal(got.command, 'choose');
  assert.deepEqual([got.model, want.model], [kvm, kvm]);
  // What ran: the fixed plan, all of it.
  assert.deepEqual([got.windows, got.samples, want.windows, want.samples], [2, 1, 2, 1]);
  // The plan: every count exactly; the probes did not run, so their timings a window and a sample are 0.
  assert.deepEqual(Object.keys(got.plan), Object.keys(want.plan));
  assert.deepEqual(untimedPlan(got.plan), untimedPlan(want.plan));
  assert.deepEqual([got.plan.windows, got.plan.samples, got.plan.depths], [2, 1, 2]);
  assert.deepEqual([got.plan.windowSeconds, got.plan.sampleSeconds], [0, 0]);
  // The rows: the same keys in the same order, every number but the decode speed exactly.
  assert.deepEqual(got.rows.map((r) => Object.keys(r)), want.rows.map((r) => Object.keys(r)));
  assert.deepEqual(got.rows.map(untimed), want.rows.map(untimed));
  assert.deepEqual(untimed(got.fullCache), untimed(want.fullCache));
  assert.equal(withoutSpeed(got.recommendation), withoutSpeed(want.recommendation));
  // The text came as bytes: the narrowing commands name it TEXT, the model by its path.
  assert.deepEqual(got.narrow, want.narrow.map((c) => c.replace(`--text ${sampleFile} `, '--text TEXT ')));
  assert.ok(got.narrow.every((c) => c.includes(`--model ${kvm} `)));
});

test('choose() ranks by extra bits and recommends rank 1', { skip }, () => {
  const { rows, plan, fullCache, recommendation } = answer();
  assert.deepEqual(rows.map((r) => r.policy).sort(), request.policies.split(',').sort());
  assert.deepEqual(rows.map((r) => r.rank), [1, 2, 3]);
  const extra = rows.map((r) => r.extraBitsPerByte);
  assert.deepEqual(extra, [...extra].sort((a, b) => a - b));
  for (const r of rows) {
    assert.equal(r.budget, request.budget);
    assert.equal(r.passkeySamples, 2 * request.samples);  // two depths of one sample each
    assert.equal(r.passkeyAccuracy, r.passkeyCorrect / r.passkeySamples);
    assert.ok(r.extraLow <= r.extraBitsPerByte && r.extraBitsPerByte <= r.extraHigh, 'two windows make an interval');
    assert.ok(r.tokensPerSecond > 0);
    // Every cache keeps `budget` positions: budget / context of the full cache's bytes at the context.
    assert.equal(r.kvBytes * plan.context, fullCache.kvBytes * request.budget);
  }
  // The line names rank 1 and prints its row, to the precision it prints.
  const best = rows[0];
  const signed = (x) => (x >= 0 ? '+' : '') + x.toFixed(4);
  assert.ok(recommendation.startsWith(`${best.policy}: ${signed(best.extraBitsPerByte)} bits/byte ` +
    `[${signed(best.extraLow)}, ${signed(best.extraHigh)}], passkey ${best.passkeyAccuracy.toFixed(2)} ` +
    `(${best.passkeyCorrect}/${best.passkeySamples}), ${best.tokensPerSecond.toFixed(1)} tokens/s, `), recommendation);
  assert.deepEqual([...recommendation.matchAll(speed)].map((m) => m[1]), [best.tokensPerSecond.toFixed(1)]);
});

// Each request refused before any work: a ParameterError with the tool's message.
const refused = [
  { policies: 'lru' },
  { policies: 'h2o', budget: 1024 },  // at the context
  { policies: 'h2o', budget: 1010 },  // below it, but no room for a passkey sample that evicts
  { granularity: 'layer' },
  { granularity: 'sequence', policies: 'pyramidkv' },
  { minutes: 0.01 },
];
for (const bad of refused) {
  test(`choose() refuses ${flags(bad).join(' ')} as the tool does`, { skip: noTool }, () => {
    setup();
    const options = { ...request, ...bad };
    const message = toolError('--text', sampleFile, ...flags(options));
    assert.throws(() => kv.choose(model, sample, options), (e) => {
      assert.equal(e.name, 'ParameterError');
      assert.ok(e instanceof kv.ParameterError && e instanceof kv.KvevictError);
      assert.equal(e.message, message);
      return true;
    });
  });
}

test('choose() refuses a text too short for two windows as the tool does', { skip: noTool }, () => {
  setup();
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'kvevict-choose-'));
  try {
    const short = path.join(folder, 'short.txt');
    fs.writeFileSync(short, sample.subarray(0, 1000));  // within one window of the context of 1,024
    const message = toolError('--text', short, ...flags(request));
    assert.match(message, /^choose: the text makes 1 window\(s\) of 1024 positions/);
    assert.throws(() => kv.choose(model, sample.subarray(0, 1000), request), { name: 'InputError', message });
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
});

test('choose() refuses wrong types and unknown options', { skip }, () => {
  setup();
  const text = sample.subarray(0, 2000);
  assert.throws(() => kv.choose(model, 'some text'), { name: 'TypeError', message: /choose: text must be a Buffer/ });
  assert.throws(() => kv.choose(kvm, text), { name: 'TypeError', message: /choose: model must be a kvevict\.Model/ });
  assert.throws(() => kv.choose(model, text, { budget: 12.5 }),
    { name: 'RangeError', message: /choose: options\.budget must be an integer/ });
  assert.throws(() => kv.choose(model, text, { minutes: '15' }),
    { name: 'TypeError', message: /choose: options\.minutes must be a number/ });
  assert.throws(() => kv.choose(model, text, { windows: -1 }),
    { name: 'RangeError', message: /choose: options\.windows \(-1\) must be at least 0/ });
  assert.throws(() => kv.choose(model, text, { granularity: 1 }),
    { name: 'TypeError', message: /choose: options\.granularity must be/ });
  assert.throws(() => kv.choose(model, text, { budgets: [128] }),
    { name: 'TypeError', message: /choose: unknown option 'budgets'/ });
  // A negative budget is a RangeError, with the core's message (as everywhere in the binding).
  assert.throws(() => kv.choose(model, text, { policies: 'h2o', budget: -5 }),
    { name: 'RangeError', message: /budget \(-5\)/ });
});
