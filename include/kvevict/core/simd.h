// Which SIMD code the library's hot loops run. Every kernel is compiled for
// several x86-64 targets (Google Highway) and one is chosen at run time from
// what the CPU supports; the choice can be narrowed to a lower target, for
// tests (every supported target checked against the plain oracle) and for
// benchmarks (AVX2 figures measured on an AVX-512 machine).
//
// Target names, lowest first: "baseline" (portable code for any x86-64 CPU),
// "sse4", "avx2", "avx512". On other architectures "baseline" is the only one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvevict::simd {

// Every target this build holds code for, lowest first.
std::vector<std::string> compiled_targets();

// The compiled targets the running CPU can execute, lowest first.
std::vector<std::string> supported_targets();

// The target the kernels run now: asked of the dispatched code itself, so it
// names what actually runs, not what was requested.
std::string active_target();

// Runs every kernel at `name` from now on (the best supported target when
// `name` is "best" or empty). Throws ParameterError naming the target when it
// is unknown or the CPU cannot run it. Not thread-safe: call it while no
// kernel runs (at start-up, between tests).
void select_target(std::string_view name);

// select_target(getenv("KVEVICT_SIMD")) when the variable is set; the error
// names the variable. The tool, the bindings and the tests call it at start.
void select_from_environment();

}  // namespace kvevict::simd
