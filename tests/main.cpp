// The test program's entry point: runs every test at the SIMD target
// KVEVICT_SIMD names (ctest registers the policy suites once per target, see
// tests/CMakeLists.txt), or at the CPU's best when it is unset. A target the
// CPU cannot run is a skip (exit 77, reported by ctest as skipped, with the
// reason), never a silent pass; a name the build does not know is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "kvevict/core/errors.h"
#include "kvevict/core/simd.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* wanted = std::getenv("KVEVICT_SIMD");
  try {
    kvevict::simd::select_from_environment();
  } catch (const kvevict::ParameterError& e) {
    const auto compiled = kvevict::simd::compiled_targets();
    if (wanted != nullptr && std::find(compiled.begin(), compiled.end(), wanted) != compiled.end()) {
      std::cout << "SKIPPED: " << e.what() << '\n';
      return 77;
    }
    std::cerr << "kvevict_tests: " << e.what() << '\n';
    return 1;
  }
  const std::string active = kvevict::simd::active_target();
  if (wanted != nullptr && *wanted != '\0' && active != wanted) {
    std::cerr << "kvevict_tests: KVEVICT_SIMD=" << wanted << " but the kernels run " << active << '\n';
    return 1;
  }
  if (!::testing::GTEST_FLAG(list_tests)) std::cout << "kvevict_tests: SIMD target " << active << '\n';
  return RUN_ALL_TESTS();
}
