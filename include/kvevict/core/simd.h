// Which SIMD code the library's hot loops run. Every kernel is compiled for
// several x86-64 targets (Google Highway) and one is chosen at run time from
// what the CPU supports; the choice can be narrowed to a lower target, for
// tests (every supported target checked against the plain oracle) and for
// benchmarks (AVX2 figures measured on an AVX-512 machine).
//
// Target names, lowest first: "baseline" (portable code for any x86-64 CPU),
// "sse4", "avx2", "avx512", "avx512-vnni". On other architectures "baseline"
// is the only one. "avx512-vnni" is "avx512" with the 8-bit products
// (MatmulMode::kInt8) in AVX-512 VNNI's 8-bit multiply-adds: Highway
// (1.0.3) has none, so those kernels are kvevict's own and every other
// kernel runs its AVX-512 code.
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

// Whether the 8-bit products run on AVX-512 VNNI now: the selection is
// "avx512-vnni", or the best target and the CPU has it.
bool vnni_active() noexcept;

}  // namespace kvevict::simd
