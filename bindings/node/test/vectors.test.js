'use strict';
// Replays every vector file through the JavaScript API (policy(name, params),
// onDecodeStep, evict, keptCount and the registry's queries; BlockEvictor and
// LayerBudget for the block and layer cases of docs/paged.md), per
// spec/vectors.md: the project's own files, and the peer catalogue's when
// ../shared/conformance/policybook exists. Each case is replayed twice: with
// attention as a Float32Array (read in place) and as a plain number array.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { kv, repoRoot, ownVectorsDir, conformanceDir, vectorFiles, replayCase, loadVectorFile } = require('./support');

const replayed = { own: 0, peer: 0 };

function replayFolder(label, dir, counter) {
  const files = vectorFiles(dir);
  for (const file of files) {
    const { policy, cases } = loadVectorFile(file);
    describe(`${label}: ${path.relative(repoRoot, file)}`, () => {
      cases.forEach((c, index) => {
        const name = typeof c.name === 'string' ? c.name : `#${index + 1}`;
        it(name, () => {
          const failures = [
            ...replayCase(policy, c, false).map((f) => `Float32Array: ${f}`),
            ...replayCase(policy, c, true).map((f) => `number[]: ${f}`),
          ];
          assert.deepEqual(failures, [], failures.join('\n'));
          replayed[counter] += 1;
        });
      });
    });
  }
  return files;
}

const ownFiles = replayFolder('own', ownVectorsDir, 'own');
describe('own vectors', () => {
  it('cover every registered policy', () => {
    const covered = [...new Set(ownFiles.map((f) => loadVectorFile(f).policy))].sort();
    assert.deepEqual(covered, kv.policies().map((p) => p.name).sort());
  });
  it('agree with the C++ runner (runVectors) case for case', () => {
    const report = kv.runVectors(ownVectorsDir);
    assert.equal(report.failed, 0, report.failures.map((f) => f.description).join('\n'));
    const cases = ownFiles.reduce((n, f) => n + loadVectorFile(f).cases.length, 0);
    assert.equal(report.passed, cases);
  });
});

const peerFiles = vectorFiles(conformanceDir);
if (peerFiles.length === 0) {
  describe('peer conformance vectors', () => {
    it('replayed when present', { skip: `${conformanceDir} is absent: the peer's vectors are not replayed` }, () => {});
  });
} else {
  replayFolder('peer', conformanceDir, 'peer');
  describe('peer conformance vectors', () => {
    it('agree with the C++ runner (runVectors) case for case', () => {
      const report = kv.runVectors([conformanceDir]);
      assert.equal(report.failed, 0, report.failures.map((f) => f.description).join('\n'));
      const cases = peerFiles.reduce((n, f) => n + loadVectorFile(f).cases.length, 0);
      assert.equal(report.passed, cases);
    });
  });
}

// Declared last, so it runs after every case above.
describe('vector replay through JS', () => {
  it('replayed every case', (t) => {
    const expected = [...ownFiles, ...peerFiles].reduce((n, f) => n + loadVectorFile(f).cases.length, 0);
    const total = replayed.own + replayed.peer;
    t.diagnostic(`vector cases replayed through JS: ${total} (own ${replayed.own}, peer ${peerFiles.length === 0 ? 'absent' : replayed.peer}), each with Float32Array and number[] attention`);
    assert.equal(total, expected);
  });
});
