// What the C APIs of every layer share (not installed): the policy handle,
// the table of live handles, the thread's last error and the guard that turns
// exceptions into status codes. Defined once, in the core (src/core/c_api.cpp);
// the evaluation's and the model's C APIs (src/eval/c_api.cpp,
// src/model/c_api.cpp) include this header, so a handle made by one library is
// checked, and an error reported, the same way by all of them.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <string>

#include "kvevict.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/params.h"
#include "kvevict/core/registry.h"

struct kvevict_policy {
  std::unique_ptr<kvevict::Policy> impl;
  const kvevict::PolicyInfo* info;
};

namespace kvevict::c_api {

// A NULL pointer, a destroyed handle, a too-small buffer: KVEVICT_ERROR_ARGUMENT.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// The message kvevict_last_error() returns, one per thread.
std::string& last_error();

// The table of live handles: remember after create, forget on destroy.
void remember(const void* handle);
bool forget(const void* handle);
// Throws unless `handle` is live; `what` names the function for the message.
void check_live(const void* handle, const char* what);

// Throws ArgumentError when `p` is NULL: "<what>: <arg> is NULL".
void need(const void* p, const char* what, const char* arg);

// kvevict_param[count] as a ParamMap (a NULL key is an ArgumentError).
ParamMap param_map(const kvevict_param* params, std::size_t count, const char* what);

// Runs `body`, mapping what it throws to a status and the thread's message.
template <class F>
kvevict_status guard(F&& body) noexcept {
  try {
    body();
    return KVEVICT_OK;
  } catch (const ParameterError& e) {
    last_error() = e.what();
    return KVEVICT_ERROR_PARAMETER;
  } catch (const ContractError& e) {
    last_error() = e.what();
    return KVEVICT_ERROR_CONTRACT;
  } catch (const InputError& e) {
    last_error() = e.what();
    return KVEVICT_ERROR_INPUT;
  } catch (const ArgumentError& e) {
    last_error() = e.what();
    return KVEVICT_ERROR_ARGUMENT;
  } catch (const std::bad_alloc&) {
    last_error() = "out of memory";
    return KVEVICT_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    last_error() = e.what();
    return KVEVICT_ERROR_INTERNAL;
  } catch (...) {
    last_error() = "unknown error";
    return KVEVICT_ERROR_INTERNAL;
  }
}

// The body of every kvevict_X_destroy: NULL is a no-op, a handle that is not
// live (destroyed already, or never made) an ArgumentError naming `function`.
template <typename Handle>
kvevict_status destroy_handle(Handle* handle, const char* function) noexcept {
  if (handle == nullptr) return KVEVICT_OK;
  return guard([&] {
    if (!forget(handle)) {
      throw ArgumentError(std::string(function) + ": the handle is not a live one (destroyed already?)");
    }
    delete handle;
  });
}

}  // namespace kvevict::c_api
