# llama.cpp as a test dependency (KVEVICT_LLAMA_CPP): the prebuilt CPU build
# and source bundle that npm's node-llama-cpp 3.21.1 ships, installed by
# deps/llama-cpp/install-deps.sh (scripts/install-deps.sh's test mode) into
# deps/llama-cpp/node_modules. Nothing is downloaded or compiled here, and
# nothing of llama.cpp is in the repository.
#
# Only the tests use it (tests/CMakeLists.txt includes this file): the
# libraries, the tool and the `run` preset never look for it. It defines
#
#   KVEVICT_LLAMA_CPP_FOUND      TRUE when everything below is there
#   kvevict::llama_cpp           an imported target: llama.cpp's headers (llama.h,
#                                ggml/include/*.h) and its three shared libraries
#                                (kvevict::llama_cpp_llama, _ggml, _ggml-base:
#                                libllama.v0.4.0.so, libggml.v0.4.0.so,
#                                libggml-base.so), with an rpath to their folder,
#                                and KVEVICT_LLAMA_CPP_BINS defined as below
#   KVEVICT_LLAMA_CPP_BINS       that folder, which also holds the CPU backends
#                                (libggml-cpu-*.so) a program loads at run time
#                                with ggml_backend_load_all_from_path()
#
# The headers come from node-llama-cpp/llama/gitRelease.bundle, a git bundle
# of the llama.cpp source the binaries were built from: cloned once into
# <build>/_deps/llama.cpp (include/ and ggml/include/ checked out), again only
# when node-llama-cpp's version changes.
#
# KVEVICT_LLAMA_CPP: AUTO (default) uses it when found and otherwise prints one
# "kvevict: llama.cpp ... skipped: <reason>" line (scripts/test-all.sh shows
# it and then fails make test: llama_cpp_agreement is a required suite); ON
# makes a missing llama.cpp a configure error; OFF leaves it out.
set(KVEVICT_LLAMA_CPP AUTO CACHE STRING "Use llama.cpp (npm's node-llama-cpp, deps/llama-cpp) for the llama_cpp_agreement test: AUTO, ON or OFF")
set_property(CACHE KVEVICT_LLAMA_CPP PROPERTY STRINGS AUTO ON OFF)
set(KVEVICT_LLAMA_CPP_MODULES "${PROJECT_SOURCE_DIR}/deps/llama-cpp/node_modules" CACHE PATH
  "node_modules folder holding node-llama-cpp and @node-llama-cpp/linux-x64 (deps/llama-cpp/install-deps.sh installs them)")
set(KVEVICT_LLAMA_CPP_FOUND FALSE)

# _kvevict_llama_cpp_skip(REASON): AUTO skips saying why, ON stops the configure.
macro(_kvevict_llama_cpp_skip why)
  if(KVEVICT_LLAMA_CPP STREQUAL "ON")
    message(FATAL_ERROR "kvevict: llama.cpp required (KVEVICT_LLAMA_CPP=ON) but ${why}")
  endif()
  message(STATUS "kvevict: llama.cpp (llama_cpp_agreement test) skipped: ${why}")
  return()
endmacro()

function(_kvevict_find_llama_cpp)
  string(TOUPPER "${KVEVICT_LLAMA_CPP}" mode)
  if(mode STREQUAL "OFF")
    message(STATUS "kvevict: llama.cpp (llama_cpp_agreement test) skipped: disabled (KVEVICT_LLAMA_CPP=OFF)")
    return()
  endif()
  if(NOT mode MATCHES "^(AUTO|ON)$")
    message(FATAL_ERROR "kvevict: KVEVICT_LLAMA_CPP is '${KVEVICT_LLAMA_CPP}'; it takes AUTO, ON or OFF")
  endif()
  if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    _kvevict_llama_cpp_skip("its prebuilt package is linux-x64 only, not ${CMAKE_SYSTEM_NAME} ${CMAKE_SYSTEM_PROCESSOR}")
  endif()

  set(want_version 3.21.1)
  set(package "${KVEVICT_LLAMA_CPP_MODULES}/node-llama-cpp")
  set(bins "${KVEVICT_LLAMA_CPP_MODULES}/@node-llama-cpp/linux-x64/bins/linux-x64")
  set(install_hint "run bash deps/llama-cpp/install-deps.sh (scripts/install-deps.sh does)")
  foreach(manifest IN ITEMS "${package}/package.json" "${KVEVICT_LLAMA_CPP_MODULES}/@node-llama-cpp/linux-x64/package.json")
    if(NOT EXISTS "${manifest}")
      _kvevict_llama_cpp_skip("${manifest} is missing; ${install_hint}")
    endif()
    file(READ "${manifest}" json)
    string(JSON version ERROR_VARIABLE json_error GET "${json}" version)
    if(json_error OR NOT version STREQUAL want_version)
      _kvevict_llama_cpp_skip("${manifest} is version '${version}', not ${want_version}; ${install_hint}")
    endif()
  endforeach()
  set(libraries libllama.v0.4.0.so libggml.v0.4.0.so libggml-base.so)
  foreach(file IN LISTS libraries ITEMS libggml-cpu-x64.so)
    if(NOT EXISTS "${bins}/${file}")
      _kvevict_llama_cpp_skip("${bins}/${file} is missing; ${install_hint}")
    endif()
  endforeach()
  set(bundle "${package}/llama/gitRelease.bundle")
  if(NOT EXISTS "${bundle}")
    _kvevict_llama_cpp_skip("${bundle} (llama.cpp's source, for its headers) is missing; ${install_hint}")
  endif()

  # The headers: the bundle cloned once (a stamp names the version cloned).
  set(source "${PROJECT_BINARY_DIR}/_deps/llama.cpp")
  set(stamp "${PROJECT_BINARY_DIR}/_deps/llama.cpp.stamp")
  set(stamp_text "node-llama-cpp ${want_version}")
  set(have_stamp "")
  if(EXISTS "${stamp}")
    file(READ "${stamp}" have_stamp)
  endif()
  if(NOT have_stamp STREQUAL stamp_text OR NOT EXISTS "${source}/include/llama.h"
     OR NOT EXISTS "${source}/ggml/include/ggml-backend.h")
    find_package(Git QUIET)
    if(NOT GIT_EXECUTABLE)
      _kvevict_llama_cpp_skip("git is needed to clone its headers out of ${bundle}")
    endif()
    file(REMOVE_RECURSE "${source}" "${stamp}")
    file(MAKE_DIRECTORY "${PROJECT_BINARY_DIR}/_deps")
    message(STATUS "kvevict: cloning llama.cpp's headers from ${bundle} into ${source}")
    # Only the headers are checked out: the whole tree is not needed (git
    # sparse-checkout add widens it, should a test ever need llama.cpp's sources).
    set(git "${GIT_EXECUTABLE}" -c advice.detachedHead=false)
    execute_process(COMMAND ${git} clone --quiet --no-checkout "${bundle}" "${source}"
      RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
    if(rc EQUAL 0)
      execute_process(COMMAND ${git} -C "${source}" sparse-checkout set --no-cone /include/ /ggml/include/
        RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
    endif()
    if(rc EQUAL 0)
      execute_process(COMMAND ${git} -C "${source}" checkout --quiet HEAD
        RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
    endif()
    if(NOT rc EQUAL 0 OR NOT EXISTS "${source}/include/llama.h")
      string(STRIP "${err}" err)
      string(REGEX REPLACE "\n+" "; " err "${err}")
      file(REMOVE_RECURSE "${source}")
      _kvevict_llama_cpp_skip("git clone of ${bundle} failed: ${err}")
    endif()
    file(WRITE "${stamp}" "${stamp_text}")
  endif()

  # The release the headers are of, for kvevict_llama's start-up check
  # against the libraries' own (llama_version(), ggml_version()): the
  # versions llama.cpp's and ggml's CMakeLists.txt set, read from the clone.
  set(header_versions "")
  find_package(Git QUIET)
  foreach(part IN ITEMS "LLAMA:CMakeLists.txt" "GGML:ggml/CMakeLists.txt")
    string(REPLACE ":" ";" part "${part}")
    list(GET part 0 prefix)
    list(GET part 1 file)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${source}" show "HEAD:${file}" RESULT_VARIABLE rc
      OUTPUT_VARIABLE cmake_text ERROR_QUIET)
    set(version "")
    foreach(n IN ITEMS MAJOR MINOR PATCH)
      if(rc EQUAL 0 AND cmake_text MATCHES "set\\(${prefix}_VERSION_${n} ([0-9]+)\\)")
        list(APPEND version "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    list(LENGTH version parts)
    if(NOT parts EQUAL 3)
      _kvevict_llama_cpp_skip("${file} in ${source} names no ${prefix}_VERSION_MAJOR/MINOR/PATCH (git: ${rc})")
    endif()
    list(JOIN version "." version)
    list(APPEND header_versions "KVEVICT_LLAMA_CPP_HEADERS_${prefix}=\"${version}\"")
  endforeach()

  # One imported target per library, and kvevict::llama_cpp for all three
  # with the headers. The libraries find each other by their own $ORIGIN
  # rpath; a program linking them gets their folder in its build rpath
  # (nothing here is installed).
  add_library(kvevict::llama_cpp INTERFACE IMPORTED)
  foreach(file IN LISTS libraries)
    string(REGEX REPLACE "^lib([a-z-]+).*" "\\1" name "${file}")
    add_library(kvevict::llama_cpp_${name} SHARED IMPORTED)
    set_target_properties(kvevict::llama_cpp_${name} PROPERTIES
      IMPORTED_LOCATION "${bins}/${file}" IMPORTED_SONAME "${file}")
    target_link_libraries(kvevict::llama_cpp INTERFACE kvevict::llama_cpp_${name})
  endforeach()
  target_include_directories(kvevict::llama_cpp SYSTEM INTERFACE "${source}/include" "${source}/ggml/include")
  target_link_options(kvevict::llama_cpp INTERFACE "LINKER:-rpath,${bins}")
  target_compile_definitions(kvevict::llama_cpp INTERFACE "KVEVICT_LLAMA_CPP_BINS=\"${bins}\"" ${header_versions})
  set(KVEVICT_LLAMA_CPP_BINS "${bins}" PARENT_SCOPE)
  set(KVEVICT_LLAMA_CPP_FOUND TRUE PARENT_SCOPE)
  message(STATUS "kvevict: llama.cpp: node-llama-cpp ${want_version}'s CPU build in ${bins}, headers in ${source}")
endfunction()

_kvevict_find_llama_cpp()
