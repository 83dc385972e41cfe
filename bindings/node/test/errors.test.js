'use strict';
// Bad input never crashes: wrong types are TypeError, non-integer numbers are
// RangeError, and what the core refuses keeps the core's message unchanged --
// ParameterError / ContractError / InputError (subclasses of KvevictError), or
// RangeError for a negative budget or position. A refused call changes nothing.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const { kv } = require('./support');

function throwsExactly(fn, Class, message) {
  assert.throws(fn, (e) => {
    assert.equal(e.constructor, Class, `expected ${Class.name}, got ${e.constructor.name}: ${e.message}`);
    assert.equal(e.name, Class.name);
    if (message instanceof RegExp) assert.match(e.message, message);
    else assert.equal(e.message, message);
    return true;
  });
}

const fresh = () => new kv.Scissorhands({ budget: 2, recentWindow: 1 });

describe('error classes', () => {
  it('ParameterError, ContractError and InputError are KvevictErrors and Errors', () => {
    for (const C of [kv.ParameterError, kv.ContractError, kv.InputError]) {
      const e = new C('x');
      assert.ok(e instanceof kv.KvevictError);
      assert.ok(e instanceof Error);
      assert.equal(e.name, C.name);
      assert.ok(typeof e.stack === 'string');
    }
  });
});

describe('TypeError: a value of the wrong type', () => {
  it('constructor parameters', () => {
    throwsExactly(() => new kv.Scissorhands('512'), TypeError, 'params must be an object, got a string');
    throwsExactly(() => new kv.Scissorhands([512]), TypeError, 'params must be an object, got an array');
    throwsExactly(() => new kv.Scissorhands(null), TypeError, 'params must be an object, got null');
    throwsExactly(() => new kv.Scissorhands({ budget: '512' }), TypeError, 'params.budget must be a number, got a string');
    throwsExactly(() => new kv.H2O({ budget: 512n }), TypeError, 'params.budget must be a number, got a bigint');
    throwsExactly(() => new kv.H2O({ budget: null }), TypeError, 'params.budget must be a number, got null');
    throwsExactly(() => kv.policy(42), TypeError, 'policy name must be a string, got number');
  });

  it('classes are constructed with new, and the base class not at all', () => {
    throwsExactly(() => kv.Scissorhands(), TypeError, /cannot be invoked without 'new'/);
    throwsExactly(() => new kv.Policy('h2o'), TypeError,
      'Policy is abstract: use a policy class such as new Scissorhands(params), or policy(name, params)');
  });

  it('onDecodeStep arguments', () => {
    const p = fresh();
    throwsExactly(() => p.onDecodeStep('1', null), TypeError, 'onDecodeStep: pos must be a number, got a string');
    throwsExactly(() => p.onDecodeStep(undefined, null), TypeError, 'onDecodeStep: pos must be a number, got undefined');
    throwsExactly(() => p.onDecodeStep(1, 'abc'), TypeError,
      'onDecodeStep: attn must be a Float32Array, an array of numbers or null, got a string');
    throwsExactly(() => p.onDecodeStep(1, { length: 1, 0: 1 }), TypeError,
      'onDecodeStep: attn must be a Float32Array, an array of numbers or null, got an object');
    throwsExactly(() => p.onDecodeStep(1, new Float64Array(1)), TypeError,
      'onDecodeStep: attn must be a Float32Array, an array of numbers or null, got another typed array');
    throwsExactly(() => p.onDecodeStep(1, [0.5, '0.5']), TypeError, 'onDecodeStep: attn[1] must be a number, got a string');
    throwsExactly(() => p.onDecodeStep(1, [0.5, null]), TypeError, 'onDecodeStep: attn[1] must be a number, got null');
    assert.equal(p.keptCount(), 1, 'nothing changed');
  });

  it('evict and queries', () => {
    const p = fresh();
    throwsExactly(() => p.evict(), TypeError, 'evict: budget must be a number, got undefined');
    throwsExactly(() => p.evict('2'), TypeError, 'evict: budget must be a number, got a string');
    throwsExactly(() => p.votesOf('0'), TypeError, 'votesOf: pos must be a number, got a string');
    throwsExactly(() => p.votesOf(), TypeError, 'votesOf takes 1 argument(s), got 0');
    throwsExactly(() => p.query('scoreOf', [0]), TypeError, "scissorhands has no query 'scoreOf' (it has: votesOf, rankOf)");
    throwsExactly(() => kv.policy('sliding-window').query('votesOf', [0]), TypeError,
      "sliding-window has no query 'votesOf' (it has: none)");
  });

  it('a method called on something that is not a policy', () => {
    throwsExactly(() => kv.Scissorhands.prototype.evict.call({}, 1), TypeError, 'Illegal invocation');
    throwsExactly(() => kv.H2O.prototype.scoreOf.call(Object.create(kv.H2O.prototype), 0), TypeError, 'Illegal invocation');
  });

  it('free functions', () => {
    throwsExactly(() => kv.run(), TypeError, 'run: options must be an object, got undefined');
    throwsExactly(() => kv.run({}), TypeError, 'run: options.policy must be a string, got undefined');
    throwsExactly(() => kv.run({ policy: 'h2o', trace: 4096 }), TypeError, 'run: options.trace must be a string, got a number');
    throwsExactly(() => kv.compare({ budgets: 512 }), TypeError, 'compare: options.budgets must be an array of numbers, got a number');
    throwsExactly(() => kv.compare({ policies: 7 }), TypeError, 'compare: options.policies must be an array of names or a string, got a number');
    throwsExactly(() => kv.compare({ overrides: { recentWindow: '64' } }), TypeError,
      'compare: options.overrides.recentWindow must be an object, got a string');
    throwsExactly(() => kv.trace(7), TypeError, 'trace id must be a string, got a number');
    throwsExactly(() => kv.traceHash('decode-4096', '10'), TypeError, 'steps must be a number, got a string');
    throwsExactly(() => kv.pyramidBudget('512', 0, 1, 4), TypeError, 'pyramidBudget: budget must be a number, got a string');
    throwsExactly(() => kv.runVectors(5), TypeError, 'runVectors: paths must be a string or an array of strings, got a number');
  });
});

describe('RangeError: fractional, NaN, infinite or negative budgets and positions', () => {
  it('numbers that are not integers (the binding refuses them; the core never sees them)', () => {
    const p = fresh();
    throwsExactly(() => p.evict(1.5), RangeError, 'evict: budget must be an integer, got 1.5');
    throwsExactly(() => p.evict(NaN), RangeError, 'evict: budget must be an integer, got NaN');
    throwsExactly(() => p.evict(Infinity), RangeError, 'evict: budget must be an integer, got Infinity');
    throwsExactly(() => p.onDecodeStep(1.5, null), RangeError, 'onDecodeStep: pos must be an integer, got 1.5');
    throwsExactly(() => p.onDecodeStep(2 ** 53, null), RangeError, 'onDecodeStep: pos must be a safe integer, got 9007199254740992');
    throwsExactly(() => p.votesOf(0.5), RangeError, 'votesOf: pos must be an integer, got 0.5');
    throwsExactly(() => new kv.H2O({ budget: 2.5 }), RangeError, 'params.budget must be an integer, got 2.5');
    throwsExactly(() => new kv.H2O({ recentWindow: NaN }), RangeError, 'params.recentWindow must be an integer, got NaN');
    throwsExactly(() => kv.run({ policy: 'h2o', budget: 256.5 }), RangeError, 'run: options.budget must be an integer, got 256.5');
    throwsExactly(() => kv.compare({ budgets: [256, -Infinity] }), RangeError,
      'compare: options.budgets[1] must be an integer, got -Infinity');
    throwsExactly(() => kv.trace('decode-4096', 1.5), RangeError, 'steps must be an integer, got 1.5');
    assert.equal(p.keptCount(), 1, 'nothing changed');
  });

  it('negative budgets and positions (the core refuses them; its message is kept)', () => {
    const p = fresh();
    throwsExactly(() => p.evict(-1), RangeError, 'Scissorhands: evict was asked for a budget of -1; it must be at least 0');
    throwsExactly(() => p.onDecodeStep(-1, null), RangeError, 'Scissorhands: position -1 is negative');
    throwsExactly(() => new kv.Scissorhands({ budget: -5 }), RangeError, 'Scissorhands: budget (-5) must be at least 1');
    throwsExactly(() => kv.run({ policy: 'h2o', budget: -1 }), RangeError, 'H2O: budget (-1) must be at least 1');
    throwsExactly(() => kv.compare({ policies: ['tova'], budgets: [256, -2] }), RangeError, 'TOVA: budget (-2) must be at least 1');
    throwsExactly(() => kv.pyramidBudget(-1, 0, 1, 4), RangeError, 'PyramidKV: budget (-1) must be at least 1');
    assert.equal(p.keptCount(), 1, 'nothing changed');
    assert.equal(p.votesOf(-1), -1, 'a negative position is simply not held');
  });
});

describe('ParameterError: a parameter that breaks a rule (core message)', () => {
  it('at construction', () => {
    throwsExactly(() => new kv.Scissorhands({ budget: 8, recentWindow: 8 }), kv.ParameterError,
      'Scissorhands: recentWindow (8) must be smaller than budget (8): there would be nothing for the votes to choose between');
    throwsExactly(() => new kv.Scissorhands({ budget: 0 }), kv.ParameterError, 'Scissorhands: budget (0) must be at least 1');
    throwsExactly(() => new kv.SlidingWindow({ budget: 2 ** 25 }), kv.ParameterError,
      'SlidingWindow: budget (33554432) must be at most 16777216 (storage is sized from it at construction)');
    throwsExactly(() => new kv.SlidingWindow({ sinks: 4 }), kv.ParameterError, "SlidingWindow: unknown parameter 'sinks' (known: budget)");
    throwsExactly(() => new kv.PyramidKV({ layer: 4, numLayers: 4 }), kv.ParameterError,
      'PyramidKV: layer (4) must be in [0, numLayers) = [0, 4)');
    throwsExactly(() => kv.policy('nope'), kv.ParameterError, /^unknown policy 'nope' \(known: scissorhands, h2o, /);
  });

  it('in free functions', () => {
    throwsExactly(() => kv.pyramidBudget(512, 0, 0, 4), kv.ParameterError, 'PyramidKV: numLayers (0) must be at least 1');
    throwsExactly(() => kv.run({ policy: 'h2o', budget: 0 }), kv.ParameterError, 'H2O: budget (0) must be at least 1');
    throwsExactly(() => kv.run({ policy: 'nope' }), kv.ParameterError, /^unknown policy 'nope'/);
    throwsExactly(() => kv.compare({ budgets: [] }), kv.ParameterError, 'compare: the budget list is empty');
    throwsExactly(() => kv.compare({ policies: ['h2o'], overrides: { poolKernel: 3 } }), kv.ParameterError,
      "compare: no compared policy has a parameter 'poolKernel'");
    throwsExactly(() => kv.compare({ overrides: { 'tova.recentWindow': 3 } }), kv.ParameterError,
      "--set tova.recentWindow: TOVA has no parameter 'recentWindow' (known: budget)");
    throwsExactly(() => kv.compare({ policies: 'h2o,', budgets: [64] }), kv.ParameterError, "empty policy name in the list 'h2o,'");
  });
});

describe('ContractError: the caller broke the contract (core message; nothing changes)', () => {
  it('NaN, infinite and negative weights', () => {
    const cases = [
      [[NaN], 'Scissorhands: attention weight 0 is NaN; weights must be finite and at least 0'],
      [new Float32Array([Infinity]), 'Scissorhands: attention weight 0 is inf; weights must be finite and at least 0'],
      [[-Infinity], 'Scissorhands: attention weight 0 is -inf; weights must be finite and at least 0'],
      [[-0.5], 'Scissorhands: attention weight 0 is -0.5; weights must be finite and at least 0'],
      [[1e39], 'Scissorhands: attention weight 0 is inf; weights must be finite and at least 0'],
    ];
    for (const [attn, message] of cases) {
      const p = fresh();
      throwsExactly(() => p.onDecodeStep(1, attn), kv.ContractError, message);
      assert.equal(p.keptCount(), 1);
      assert.equal(p.votesOf(0), 0);
    }
  });

  it('positions out of order', () => {
    const p = fresh();
    p.onDecodeStep(1, [1]);
    throwsExactly(() => p.onDecodeStep(1, [0.5, 0.5]), kv.ContractError,
      'Scissorhands: position 1 must be greater than every position held (the newest is 1)');
    throwsExactly(() => p.onDecodeStep(2 ** 32, null), kv.ContractError, 'Scissorhands: position 4294967296 does not fit in 32 bits');
    assert.equal(p.keptCount(), 2);
  });

  it('a capacity overrun (a budget that does not match the policy\'s)', () => {
    const p = fresh();
    p.onDecodeStep(1, [1]);
    p.onDecodeStep(2, [0.5, 0.5]);
    throwsExactly(() => p.onDecodeStep(3, [0.75, 0.125, 0.125]), kv.ContractError,
      "Scissorhands: asked to hold 4 positions with a budget of 2; the caller's budget must match the policy's");
    assert.equal(p.keptCount(), 3);
    assert.equal(p.votesOf(0), 0, 'no vote moved (0.75 would have beaten its share)');
    assert.deepEqual(p.evict(2), [0]);
    p.onDecodeStep(3, [0.75, 0.125, 0.125]);
    assert.equal(p.votesOf(1), 1, 'the same step is accepted once the policy has room');
  });
});

describe('InputError: bad input from outside (core message)', () => {
  it('unknown traces and steps out of range, thrown at once', () => {
    throwsExactly(() => kv.trace('nope'), kv.InputError, /^unknown trace 'nope' \(known: decode-4096/);
    throwsExactly(() => kv.traceHash('nope'), kv.InputError, /^unknown trace 'nope'/);
    throwsExactly(() => kv.trace('decode-4096', 0), kv.InputError, 'steps (0) must be in 1 ... 4095 for trace decode-4096');
    throwsExactly(() => kv.traceHash('decode-4096', 4096), kv.InputError, 'steps (4096) must be in 1 ... 4095 for trace decode-4096');
    throwsExactly(() => kv.run({ policy: 'h2o', steps: -3 }), kv.InputError, 'steps (-3) must be in 1 ... 4095 for trace decode-4096');
    throwsExactly(() => kv.run({ policy: 'h2o', trace: 'nope' }), kv.InputError, /^unknown trace 'nope'/);
  });

  it('a vector path that does not exist', () => {
    throwsExactly(() => kv.runVectors(['/no/such/place']), kv.InputError, '/no/such/place: no such file or folder');
  });
});
