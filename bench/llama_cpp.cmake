# llama_cpp_bench (bench/llama_cpp_bench.c): llama.cpp's prefill and decode
# tokens/s on a GGUF file, for scripts/performance.py's "llama.cpp side by
# side" table. Included by the top-level CMakeLists.txt's llama.cpp block only
# when cmake/LlamaCpp.cmake found node-llama-cpp's prebuilt llama.cpp (the
# imported target kvevict::llama_cpp lives in that directory's scope, which
# bench/CMakeLists.txt, added earlier, does not see). It links
# kvevict::llama_cpp and nothing of kvevict's, so the libraries never depend
# on llama.cpp. Built as build/bench/llama_cpp_bench, beside kvevict_bench.
enable_language(C)
add_executable(kvevict_llama_cpp_bench ${CMAKE_CURRENT_LIST_DIR}/llama_cpp_bench.c)
set_target_properties(kvevict_llama_cpp_bench PROPERTIES OUTPUT_NAME llama_cpp_bench
  RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench
  C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
# kvevict_warnings is C++'s (-Wnon-virtual-dtor, -Wold-style-cast ...): a C
# file takes the same strictness in the flags C has.
target_compile_options(kvevict_llama_cpp_bench PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
  -Wcast-align -Wimplicit-fallthrough -Werror)
target_link_libraries(kvevict_llama_cpp_bench PRIVATE kvevict::llama_cpp)
