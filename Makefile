# Two commands from a fresh clone on Debian 12 (as root):
#   make run    install what building the tool needs, build the tool alone
#               (Release, build/, the `run` preset: no tests, benchmarks or
#               bindings), print the canonical comparison
#   make test   install everything the tests need (test libraries, clang,
#               Python, Node, Chromium), then every test suite (Release and
#               sanitizers); reuses build/'s compiled library; ends with its
#               own time, the ten slowest tests and the summary line
.PHONY: all deps deps-run build build-run run test docs docs-verify heldout performance charts model model-small clean

all: build

deps:
	@bash scripts/install-deps.sh

deps-run:
	@bash scripts/install-deps.sh --run

# Everything: the tool, the tests, the benchmarks, the bindings.
build: deps
	cmake --preset release
	cmake --build --preset release

# The tool alone, in the same build/ (make build or make test later reuse it).
build-run: deps-run
	cmake --preset run
	cmake --build --preset run

run: build-run
	./build/kvevict compare

# KVEVICT_MAKE_START: when make started (before the package check), so the
# time test-all.sh prints is make test's own.
test: export KVEVICT_MAKE_START := $(shell date +%s)
test: deps
	bash scripts/test-all.sh

clean:
	rm -rf build build-sanitize build-debug build-clang

# Regenerate every measured table in README.md and docs/ from the built tool
# (some are measured on the model's whole held-out split: make heldout).
docs: build heldout
	python3 scripts/update-docs.py

# Every command README.md and docs/ show, the long ones too, each table compared
# cell by cell with its page (make test compares a long table's committed
# quick variant instead): hours on 2 cores, not part of make test or CI. On
# the model's whole held-out split, as the long tables were measured.
docs-verify: build heldout
	python3 scripts/docs-check.py --full

# The model's whole held-out split (495,720 bytes of kernel documentation the
# model never trained on) in build/heldout-split.txt, from Debian's linux-doc-6.1.
heldout:
	@bash scripts/install-deps.sh --corpus
	@mkdir -p build
	/usr/bin/python3 model/corpus.py --heldout build/heldout-split.txt --force

# Rerun both benchmark tools and rewrite docs/performance.md from one run.
performance: build
	python3 scripts/performance.py

# Regenerate the committed charts in docs/images/ (embedded in README.md,
# the policy pages and docs/streaming.md) and the full report in build/report.html.
charts: build heldout
	./build/kvevict report --out build/report.html --svg docs/images --force
	./build/kvevict stream --model model/kvevict-tiny.kvm --text build/heldout-split.txt --tokens 32768 --svg docs/images/stream.svg --force >/dev/null

# Retrain the real model by the committed model's recipe (both stages, about
# two hours on 2 cores; not part of CI) into build/model-retrain/ -- the
# committed files in model/ are never replaced; see model/README.md.
model:
	@bash scripts/install-deps.sh --training
	bash model/retrain.sh build/model-retrain

# Train kvevict-small (a Llama-architecture GGUF with a BPE vocabulary learned
# by kvevict's own trainer; about 100 minutes on one thread; not part of CI)
# into build/model-small/, copy its files into model/ and check them against
# the C++ engine (model/small_train.sh, model/small_post.sh).
model-small: build-run
	@bash scripts/install-deps.sh --training
	bash model/small_train.sh build/model-small
