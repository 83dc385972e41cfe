# Two commands from a fresh clone on Debian 12 (as root):
#   make run    install what is missing, build Release in build/, print the canonical comparison
#   make test   the same set-up, then every test suite (Release and sanitizers)
.PHONY: all deps build run test compare clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	cmake --preset release
	cmake --build --preset release

run: build
	./build/kvevict compare

test: deps
	bash scripts/test-all.sh

clean:
	rm -rf build build-sanitize build-debug build-clang
