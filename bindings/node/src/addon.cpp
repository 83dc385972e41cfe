// The Node.js binding: an N-API addon over the C++ library. Every policy is
// built through the registry (find_policy(name).make(params)), so whatever the
// registry holds is reachable from JavaScript. index.js wraps this module in
// the public API (one class per policy, generators). Run and compare results
// are built from the library's row schema (kvevict/eval/row_schema.h), the same walk
// the tool's JSON comes from.
//
// Errors: every entry point runs inside guard(), so no C++ exception reaches
// N-API. Wrong JavaScript types become TypeError; numbers that are not integers
// (fractions, NaN, infinities, beyond 2^53) become RangeError with the
// binding's own message; everything the core refuses keeps the core's message
// unchanged and becomes ParameterError / ContractError / InputError (classes
// defined in index.js) -- except that the refusal of a negative budget or
// position is a RangeError, still with the core's message.
#include <napi.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kvevict/core/attention.h"
#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/npy.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/core/params.h"
#include "kvevict/model/evaluation/choose.h"
#include "kvevict/model/evaluation/command_schema.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/perplexity_rows.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/serving/serve_bench.h"
#include "kvevict/model/evaluation/stream.h"
#include "kvevict/model/serving/batch.h"
#include "kvevict/model/serving/decode_bench.h"
#include "kvevict/model/evaluation/tasks.h"
#include "kvevict/eval/persistence.h"
#include "kvevict/core/policies/pyramidkv.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "kvevict/core/block_evictor.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/core/simd.h"
#include "kvevict/eval/trace.h"
#include "kvevict/eval/vectors.h"

namespace {

// Per-environment state (the addon may be loaded by several worker threads).
struct AddonData {
  Napi::FunctionReference base_error;  // KvevictError
  Napi::FunctionReference parameter_error;
  Napi::FunctionReference contract_error;
  Napi::FunctionReference input_error;
  Napi::FunctionReference policy_class;  // NativePolicy, for instanceof checks
  Napi::FunctionReference model_class;   // NativeModel
};

enum class Kind { kBase, kParameter, kContract, kInput };

Napi::Error make_error(Napi::Env env, Kind kind, const std::string& message) {
  auto* data = env.GetInstanceData<AddonData>();
  const Napi::FunctionReference* ctor = nullptr;
  const char* name = "KvevictError";
  if (data != nullptr) {
    switch (kind) {
      case Kind::kParameter: ctor = &data->parameter_error; name = "ParameterError"; break;
      case Kind::kContract: ctor = &data->contract_error; name = "ContractError"; break;
      case Kind::kInput: ctor = &data->input_error; name = "InputError"; break;
      case Kind::kBase: ctor = &data->base_error; break;
    }
  }
  if (ctor != nullptr && !ctor->IsEmpty()) {
    const Napi::Object error = ctor->New({Napi::String::New(env, message)});
    return Napi::Error(env, error);
  }
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("name", Napi::String::New(env, name));
  return error;
}

// Set by an entry point when it hands the core a negative budget or position:
// the core's refusal then surfaces as a RangeError.
struct Call {
  bool negative = false;
};

// Runs `body`, translating every C++ exception into a JavaScript one.
template <class F>
auto guard(Napi::Env env, F&& body) -> decltype(body(std::declval<Call&>())) {
  Call call;
  try {
    return body(call);
  } catch (const Napi::Error&) {
    throw;
  } catch (const kvevict::Error& e) {
    if (call.negative) throw Napi::RangeError::New(env, e.what());
    if (dynamic_cast<const kvevict::ParameterError*>(&e) != nullptr) throw make_error(env, Kind::kParameter, e.what());
    if (dynamic_cast<const kvevict::ContractError*>(&e) != nullptr) throw make_error(env, Kind::kContract, e.what());
    if (dynamic_cast<const kvevict::InputError*>(&e) != nullptr) throw make_error(env, Kind::kInput, e.what());
    throw make_error(env, Kind::kBase, e.what());
  } catch (const std::bad_alloc&) {
    throw Napi::Error::New(env, "kvevict: out of memory");
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  } catch (...) {
    throw Napi::Error::New(env, "kvevict: unknown C++ exception");
  }
}

// ---- argument conversion -------------------------------------------------------

std::string type_name(const Napi::Value& v) {
  if (v.IsNull()) return "null";
  if (v.IsUndefined()) return "undefined";
  if (v.IsArray()) return "an array";
  if (v.IsTypedArray()) return "a typed array";
  switch (v.Type()) {
    case napi_boolean: return "a boolean";
    case napi_number: return "a number";
    case napi_string: return "a string";
    case napi_symbol: return "a symbol";
    case napi_function: return "a function";
    case napi_bigint: return "a bigint";
    default: return "an object";
  }
}

bool absent(const Napi::Value& v) { return v.IsUndefined() || v.IsNull(); }

// A JavaScript number that must be an integer: TypeError for another type,
// RangeError for a fraction, NaN, an infinity or beyond the safe range.
std::int64_t to_integer(const Napi::Value& v, const std::string& what) {
  const Napi::Env env = v.Env();
  if (!v.IsNumber()) throw Napi::TypeError::New(env, what + " must be a number, got " + type_name(v));
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::trunc(d)) {
    throw Napi::RangeError::New(env, what + " must be an integer, got " + v.ToString().Utf8Value());
  }
  if (std::fabs(d) > 9007199254740991.0) {
    throw Napi::RangeError::New(env, what + " must be a safe integer, got " + v.ToString().Utf8Value());
  }
  return static_cast<std::int64_t>(d);
}

std::string to_string(const Napi::Value& v, const std::string& what) {
  if (!v.IsString()) throw Napi::TypeError::New(v.Env(), what + " must be a string, got " + type_name(v));
  return v.As<Napi::String>().Utf8Value();
}

Napi::Object to_object(const Napi::Value& v, const std::string& what) {
  if (!v.IsObject() || v.IsArray() || v.IsFunction() || v.IsTypedArray()) {
    throw Napi::TypeError::New(v.Env(), what + " must be an object, got " + type_name(v));
  }
  return v.As<Napi::Object>();
}

// Own enumerable string keys, in property order.
std::vector<std::string> own_keys(const Napi::Object& object) {
  const Napi::Env env = object.Env();
  napi_value names = nullptr;
  NAPI_THROW_IF_FAILED(env,
                       napi_get_all_property_names(env, object, napi_key_own_only,
                                                   static_cast<napi_key_filter>(napi_key_enumerable | napi_key_skip_symbols),
                                                   napi_key_numbers_to_strings, &names),
                       {});
  const Napi::Array array(env, names);
  std::vector<std::string> keys;
  for (std::uint32_t i = 0; i < array.Length(); ++i) keys.push_back(array.Get(i).ToString().Utf8Value());
  return keys;
}

// {key: integer}; undefined values are skipped (as if the key were absent).
// Marks the call when a negative budget is given.
kvevict::ParamMap to_params(const Napi::Value& v, const std::string& what, Call& call) {
  kvevict::ParamMap params;
  if (v.IsUndefined()) return params;
  const Napi::Object object = to_object(v, what);
  for (const std::string& key : own_keys(object)) {
    const Napi::Value value = object.Get(key);
    if (value.IsUndefined()) continue;
    const std::int64_t n = to_integer(value, what + "." + key);
    if (key == "budget" && n < 0) call.negative = true;
    kvevict::set_param(params, key, n);
  }
  return params;
}

std::optional<std::int64_t> optional_integer(const Napi::Object& options, const char* key,
                                             const std::string& what) {
  const Napi::Value v = options.Get(key);
  if (v.IsUndefined()) return std::nullopt;
  return to_integer(v, what + "." + key);
}

Napi::Object params_object(Napi::Env env, const kvevict::ParamMap& params) {
  Napi::Object out = Napi::Object::New(env);
  for (const auto& [key, value] : params) out.Set(key, Napi::Number::New(env, static_cast<double>(value)));
  return out;
}

// ---- step signals (docs/signals.md) ------------------------------------------------

kvevict::Attention attention_arg(Napi::Env env, const Napi::Value& a, std::vector<float>& scratch,
                                 const std::string& what);

// Conversion buffers for a step's number[] signals; a Float32Array is read in place.
struct StepScratch {
  std::vector<float> attention, key, value, queries;
};

// onStep's {attention, key, value, queries} / onOrigin's {key, value, queries}:
// each field a Float32Array or number[]; undefined or null is not given (for
// attention: no information). An unknown field is a TypeError, not ignored,
// so a misspelt "keys" cannot silently leave a key-aware policy without one.
kvevict::StepInputs step_inputs_arg(Napi::Env env, const Napi::Value& v, StepScratch& scratch, const std::string& what,
                                    bool origin) {
  kvevict::StepInputs in;
  if (absent(v)) return in;
  if (!v.IsObject() || v.IsArray() || v.IsTypedArray()) {
    throw Napi::TypeError::New(env, what + " must be an object {" + (origin ? "" : "attention, ") +
                                        "key, value, queries}, got " + type_name(v));
  }
  const Napi::Object o = v.As<Napi::Object>();
  for (const std::string& key : own_keys(o)) {
    const bool known = key == "key" || key == "value" || key == "queries" || (!origin && key == "attention");
    if (!known) {
      throw Napi::TypeError::New(env, what + ": unknown signal '" + key + "' (known: " +
                                          (origin ? "" : "attention, ") + "key, value, queries)");
    }
  }
  if (!origin) in.attention = attention_arg(env, o.Get("attention"), scratch.attention, what + ".attention");
  const auto given = [&](const char* field, std::vector<float>& buffer) -> std::span<const float> {
    const kvevict::Attention a = attention_arg(env, o.Get(field), buffer, what + "." + field);
    return a ? *a : std::span<const float>{};
  };
  in.key = given("key", scratch.key);
  in.value = given("value", scratch.value);
  in.queries = given("queries", scratch.queries);
  return in;
}

// A Signals mask as names in bit order: ["attention"], ["key"], [].
Napi::Array signal_array(Napi::Env env, kvevict::Signals signals) {
  static constexpr std::pair<kvevict::Signal, const char*> kNames[] = {{kvevict::kSignalAttention, "attention"},
                                                                       {kvevict::kSignalKey, "key"},
                                                                       {kvevict::kSignalValue, "value"},
                                                                       {kvevict::kSignalQueries, "queries"}};
  Napi::Array out = Napi::Array::New(env);
  std::uint32_t n = 0;
  for (const auto& [bit, name] : kNames) {
    if ((signals & bit) != 0) out.Set(n++, Napi::String::New(env, name));
  }
  return out;
}

// ---- Policy ----------------------------------------------------------------------

class PolicyWrap : public Napi::ObjectWrap<PolicyWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativePolicy",
                       {InstanceMethod<&PolicyWrap::OnDecodeStep>("onDecodeStep"),
                        InstanceMethod<&PolicyWrap::OnStep>("onStep"),
                        InstanceMethod<&PolicyWrap::OnOrigin>("onOrigin"),
                        InstanceAccessor<&PolicyWrap::Signals>("signals"),
                        InstanceMethod<&PolicyWrap::Evict>("evict"),
                        InstanceMethod<&PolicyWrap::KeptCount>("keptCount"),
                        InstanceMethod<&PolicyWrap::MemoryBytes>("memoryBytes"),
                        InstanceMethod<&PolicyWrap::Query>("query"),
                        InstanceAccessor<&PolicyWrap::Name>("name"),
                        InstanceAccessor<&PolicyWrap::Params>("params")});
  }

  // new NativePolicy(name, params?)
  explicit PolicyWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PolicyWrap>(info) {
    guard(info.Env(), [&](Call& call) {
      const std::string name = to_string(info[0], "policy name");
      given_ = to_params(info[1], "params", call);
      info_ = &kvevict::find_policy(name);
      policy_ = info_->make(given_);
    });
    // Tell V8 what this small object holds natively, so that dropped policies
    // are collected before their storage piles up.
    external_ = static_cast<std::int64_t>(policy_->memory_bytes() + sizeof(*this));
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), external_);
  }

  ~PolicyWrap() override {
    if (external_ != 0) Napi::MemoryManagement::AdjustExternalMemory(Env(), -external_);
  }

  PolicyWrap(const PolicyWrap&) = delete;
  PolicyWrap& operator=(const PolicyWrap&) = delete;

  kvevict::Policy& core() noexcept { return *policy_; }
  const kvevict::PolicyInfo& info() const noexcept { return *info_; }
  const kvevict::ParamMap& given() const noexcept { return given_; }
  // The Decoder driving this policy (null: none, or that decoder is gone: a
  // decoder's token dies with it) and the head it serves there.
  const char* driver() const noexcept {
    const std::shared_ptr<char> d = driver_.lock();
    return d.get();
  }
  std::uint32_t driver_head() const noexcept { return driver_head_; }
  void set_driver(const std::shared_ptr<char>& token, std::uint32_t head) noexcept {
    driver_ = token;
    driver_head_ = head;
  }

 private:
  // A policy a Decoder drives is stepped by that decoder only.
  void check_not_driven(Napi::Env env) const {
    if (driver() != nullptr) {
      throw make_error(env, Kind::kContract,
                       info_->title + ": this policy is driven by a Decoder (head " +
                           std::to_string(driver_head_) +
                           "); it cannot be stepped or evicted by hand meanwhile");
    }
  }

  // onDecodeStep(pos, attn: Float32Array | number[] | null | undefined)
  Napi::Value OnDecodeStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      check_not_driven(env);
      const std::int64_t pos = to_integer(info[0], "onDecodeStep: pos");
      if (pos < 0) call.negative = true;
      const Napi::Value a = info[1];
      if (absent(a)) {
        policy_->on_decode_step(pos, std::nullopt);
        return;
      }
      if (a.IsTypedArray()) {
        const auto typed = a.As<Napi::TypedArray>();
        if (typed.TypedArrayType() != napi_float32_array) {
          throw Napi::TypeError::New(env, "onDecodeStep: attn must be a Float32Array, an array of numbers or null, got another typed array");
        }
        // Read in place: no copy of the weights.
        const auto weights = a.As<Napi::Float32Array>();
        policy_->on_decode_step(pos, std::span<const float>(weights.Data(), weights.ElementLength()));
        return;
      }
      if (a.IsArray()) {
        const auto array = a.As<Napi::Array>();
        const std::uint32_t n = array.Length();
        scratch_.resize(n);
        for (std::uint32_t i = 0; i < n; ++i) {
          const Napi::Value w = array.Get(i);
          if (!w.IsNumber()) {
            throw Napi::TypeError::New(env, "onDecodeStep: attn[" + std::to_string(i) + "] must be a number, got " + type_name(w));
          }
          scratch_[i] = static_cast<float>(w.As<Napi::Number>().DoubleValue());
        }
        policy_->on_decode_step(pos, std::span<const float>(scratch_.data(), n));
        return;
      }
      throw Napi::TypeError::New(env, "onDecodeStep: attn must be a Float32Array, an array of numbers or null, got " + type_name(a));
    });
    return env.Undefined();
  }

  // onStep(pos, {attention, key, value, queries}): for an attention policy
  // exactly onDecodeStep(pos, attention).
  Napi::Value OnStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      check_not_driven(env);
      const std::int64_t pos = to_integer(info[0], "onStep: pos");
      if (pos < 0) call.negative = true;
      policy_->on_step(pos, step_inputs_arg(env, info[1], step_scratch_, "onStep: signals", false));
    });
    return env.Undefined();
  }

  // onOrigin({key, value, queries}): position 0's signals, before step 1.
  Napi::Value OnOrigin(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call&) {
      check_not_driven(env);
      policy_->on_origin(step_inputs_arg(env, info[0], step_scratch_, "onOrigin: signals", true));
    });
    return env.Undefined();
  }

  Napi::Value Signals(const Napi::CallbackInfo& info) { return signal_array(info.Env(), policy_->signals()); }

  Napi::Value Evict(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    return guard(env, [&](Call& call) -> Napi::Value {
      check_not_driven(env);
      const std::int64_t budget = to_integer(info[0], "evict: budget");
      if (budget < 0) call.negative = true;
      const std::span<const kvevict::Position> victims = policy_->evict(budget);
      Napi::Array out = Napi::Array::New(env, victims.size());
      for (std::size_t i = 0; i < victims.size(); ++i) {
        out.Set(static_cast<std::uint32_t>(i), Napi::Number::New(env, victims[i]));
      }
      return out;
    });
  }

  Napi::Value KeptCount(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(policy_->kept_count()));
  }

  Napi::Value MemoryBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(policy_->memory_bytes()));
  }

  // query(name, args: number[]) -- the registry's introspection queries.
  Napi::Value Query(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    return guard(env, [&](Call&) -> Napi::Value {
      const std::string name = to_string(info[0], "query name");
      const kvevict::QueryInfo* query = info_->find_query(name);
      if (query == nullptr) {
        std::string known;
        for (const auto& q : info_->queries) known += (known.empty() ? "" : ", ") + q.name;
        throw Napi::TypeError::New(env, info_->name + " has no query '" + name + "' (it has: " +
                                            (known.empty() ? "none" : known) + ")");
      }
      std::vector<std::int64_t> args;
      if (!absent(info[1])) {
        if (!info[1].IsArray()) throw Napi::TypeError::New(env, name + ": the arguments must be an array");
        const auto array = info[1].As<Napi::Array>();
        for (std::uint32_t i = 0; i < array.Length(); ++i) {
          args.push_back(to_integer(array.Get(i), name + ": pos"));
        }
      }
      if (args.size() != query->arity) {
        throw Napi::TypeError::New(env, name + " takes " + std::to_string(query->arity) +
                                            " argument(s), got " + std::to_string(args.size()));
      }
      return Napi::Number::New(env, query->call(*policy_, args));
    });
  }

  Napi::Value Name(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), info_->name); }

  Napi::Value Params(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) { return params_object(info.Env(), info_->effective(given_)); });
  }

  std::unique_ptr<kvevict::Policy> policy_;
  const kvevict::PolicyInfo* info_ = nullptr;
  kvevict::ParamMap given_;
  std::vector<float> scratch_;  // plain-array attention, converted to float32
  StepScratch step_scratch_;  // plain-array signals of onStep/onOrigin
  std::int64_t external_ = 0;   // bytes reported to V8 as external memory
  std::weak_ptr<char> driver_;
  std::uint32_t driver_head_ = 0;
};

// ---- paged caches (docs/paged.md) ------------------------------------------------

// Attention for an adapter's step: a Float32Array (read in place), a number[]
// (converted into `scratch`), or null/undefined (an absent step).
kvevict::Attention attention_arg(Napi::Env env, const Napi::Value& a, std::vector<float>& scratch,
                                 const std::string& what) {
  if (absent(a)) return std::nullopt;
  if (a.IsTypedArray()) {
    const auto typed = a.As<Napi::TypedArray>();
    if (typed.TypedArrayType() != napi_float32_array) {
      throw Napi::TypeError::New(env, what + " must be a Float32Array, an array of numbers or null, got another typed array");
    }
    const auto weights = a.As<Napi::Float32Array>();
    return std::span<const float>(weights.Data(), weights.ElementLength());
  }
  if (a.IsArray()) {
    const auto array = a.As<Napi::Array>();
    const std::uint32_t n = array.Length();
    scratch.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      const Napi::Value w = array.Get(i);
      if (!w.IsNumber()) throw Napi::TypeError::New(env, what + "[" + std::to_string(i) + "] must be a number, got " + type_name(w));
      scratch[i] = static_cast<float>(w.As<Napi::Number>().DoubleValue());
    }
    return std::span<const float>(scratch.data(), n);
  }
  throw Napi::TypeError::New(env, what + " must be a Float32Array, an array of numbers or null, got " + type_name(a));
}

template <class T>
Napi::Array number_array(Napi::Env env, std::span<const T> values) {
  Napi::Array out = Napi::Array::New(env, values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    out.Set(static_cast<std::uint32_t>(i), Napi::Number::New(env, static_cast<double>(values[i])));
  }
  return out;
}

// query(policy, name, args) on a policy an adapter drives.
Napi::Value adapter_query(Napi::Env env, const kvevict::Policy& policy, const std::string& name, const Napi::Value& args_v) {
  const kvevict::PolicyInfo& info = kvevict::find_policy(policy.name());
  const kvevict::QueryInfo* query = info.find_query(name);
  if (query == nullptr) {
    std::string known;
    for (const auto& q : info.queries) known += (known.empty() ? "" : ", ") + q.name;
    throw Napi::TypeError::New(env, info.name + " has no query '" + name + "' (it has: " + (known.empty() ? "none" : known) + ")");
  }
  std::vector<std::int64_t> args;
  if (!absent(args_v)) {
    if (!args_v.IsArray()) throw Napi::TypeError::New(env, name + ": the arguments must be an array");
    const auto array = args_v.As<Napi::Array>();
    for (std::uint32_t i = 0; i < array.Length(); ++i) args.push_back(to_integer(array.Get(i), name + ": pos"));
  }
  if (args.size() != query->arity) {
    throw Napi::TypeError::New(env, name + " takes " + std::to_string(query->arity) + " argument(s), got " +
                                        std::to_string(args.size()));
  }
  return Napi::Number::New(env, query->call(policy, args));
}

// new NativeBlockEvictor(policy, blockBudget, {blockSize, startBlocks, recentBlocks, blockScore}?, params?)
class BlockEvictorWrap : public Napi::ObjectWrap<BlockEvictorWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeBlockEvictor",
                       {InstanceMethod<&BlockEvictorWrap::OnDecodeStep>("onDecodeStep"),
                        InstanceMethod<&BlockEvictorWrap::OnStep>("onStep"),
                        InstanceMethod<&BlockEvictorWrap::OnOrigin>("onOrigin"),
                        InstanceMethod<&BlockEvictorWrap::EvictBlocks>("evictBlocks"),
                        InstanceMethod<&BlockEvictorWrap::EvictedPositions>("evictedPositions"),
                        InstanceMethod<&BlockEvictorWrap::RemovedBefore>("removedBefore"),
                        InstanceMethod<&BlockEvictorWrap::Positions>("positions"),
                        InstanceMethod<&BlockEvictorWrap::BlockScoreOf>("blockScoreOf"),
                        InstanceMethod<&BlockEvictorWrap::KeptCount>("keptCount"),
                        InstanceMethod<&BlockEvictorWrap::BlockCount>("blockCount"),
                        InstanceMethod<&BlockEvictorWrap::MemoryBytes>("memoryBytes"),
                        InstanceMethod<&BlockEvictorWrap::Query>("query"),
                        InstanceAccessor<&BlockEvictorWrap::Name>("policy"),
                        InstanceAccessor<&BlockEvictorWrap::BlockSize>("blockSize")});
  }

  explicit BlockEvictorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<BlockEvictorWrap>(info) {
    guard(info.Env(), [&](Call& call) {
      const kvevict::PolicyInfo& policy = kvevict::find_policy(to_string(info[0], "BlockEvictor: policy name"));
      kvevict::BlockParams bp;
      bp.block_budget = to_integer(info[1], "BlockEvictor: blockBudget");
      if (!absent(info[2])) {
        const Napi::Object o = to_object(info[2], "BlockEvictor: options");
        for (const std::string& key : own_keys(o)) {
          if (key != "blockSize" && key != "startBlocks" && key != "recentBlocks" && key != "blockScore") {
            throw Napi::TypeError::New(info.Env(), "BlockEvictor: unknown option '" + key +
                                                       "' (known: blockSize, startBlocks, recentBlocks, blockScore)");
          }
        }
        bp.block_size = optional_integer(o, "blockSize", "BlockEvictor").value_or(bp.block_size);
        bp.start_blocks = optional_integer(o, "startBlocks", "BlockEvictor").value_or(bp.start_blocks);
        bp.recent_blocks = optional_integer(o, "recentBlocks", "BlockEvictor").value_or(bp.recent_blocks);
        const Napi::Value score = o.Get("blockScore");
        if (!score.IsUndefined()) bp.score = kvevict::parse_block_score(to_string(score, "BlockEvictor: options.blockScore"));
      }
      impl_ = std::make_unique<kvevict::BlockEvictor>(policy.name, to_params(info[3], "BlockEvictor: params", call), bp);
    });
  }

 private:
  Napi::Value OnDecodeStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      const std::int64_t pos = to_integer(info[0], "onDecodeStep: pos");
      if (pos < 0) call.negative = true;
      impl_->on_decode_step(pos, attention_arg(env, info[1], scratch_, "onDecodeStep: attn"));
    });
    return env.Undefined();
  }
  Napi::Value OnStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      const std::int64_t pos = to_integer(info[0], "onStep: pos");
      if (pos < 0) call.negative = true;
      impl_->on_step(pos, step_inputs_arg(env, info[1], step_scratch_, "onStep: signals", false));
    });
    return env.Undefined();
  }
  Napi::Value OnOrigin(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call&) { impl_->on_origin(step_inputs_arg(env, info[0], step_scratch_, "onOrigin: signals", true)); });
    return env.Undefined();
  }
  Napi::Value EvictBlocks(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call& call) -> Napi::Value {
      const std::int64_t budget = to_integer(info[0], "evictBlocks: blockBudget");
      if (budget < 0) call.negative = true;
      return number_array(info.Env(), impl_->evict_blocks(budget));
    });
  }
  Napi::Value EvictedPositions(const Napi::CallbackInfo& info) { return number_array(info.Env(), impl_->evicted_positions()); }
  Napi::Value RemovedBefore(const Napi::CallbackInfo& info) { return number_array(info.Env(), impl_->removed_before()); }
  Napi::Value Positions(const Napi::CallbackInfo& info) { return number_array(info.Env(), impl_->positions()); }
  // The block's score; "protected" for a full block that is not a candidate; -1 for no such full block.
  Napi::Value BlockScoreOf(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      const double s = impl_->block_score_of(to_integer(info[0], "blockScoreOf: block"));
      if (std::isinf(s)) return Napi::String::New(info.Env(), "protected");
      return Napi::Number::New(info.Env(), s);
    });
  }
  Napi::Value KeptCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->kept_count())); }
  Napi::Value BlockCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->block_count())); }
  Napi::Value MemoryBytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->memory_bytes())); }
  Napi::Value Query(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) { return adapter_query(info.Env(), impl_->policy(), to_string(info[0], "query name"), info[1]); });
  }
  Napi::Value Name(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), std::string(impl_->policy().name())); }
  Napi::Value BlockSize(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->block_size())); }

  std::unique_ptr<kvevict::BlockEvictor> impl_;
  std::vector<float> scratch_;
  StepScratch step_scratch_;
};

// new NativeLayerBudget(policy, heads, layerBudget, headFloor?, params?)
class LayerBudgetWrap : public Napi::ObjectWrap<LayerBudgetWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeLayerBudget",
                       {InstanceMethod<&LayerBudgetWrap::OnDecodeStep>("onDecodeStep"),
                        InstanceMethod<&LayerBudgetWrap::OnStep>("onStep"),
                        InstanceMethod<&LayerBudgetWrap::OnOrigin>("onOrigin"),
                        InstanceMethod<&LayerBudgetWrap::Evict>("evict"),
                        InstanceMethod<&LayerBudgetWrap::Victims>("victims"),
                        InstanceMethod<&LayerBudgetWrap::KeptCount>("keptCount"),
                        InstanceMethod<&LayerBudgetWrap::TotalKept>("totalKept"),
                        InstanceMethod<&LayerBudgetWrap::MemoryBytes>("memoryBytes"),
                        InstanceMethod<&LayerBudgetWrap::Query>("query"),
                        InstanceAccessor<&LayerBudgetWrap::Heads>("heads"),
                        InstanceAccessor<&LayerBudgetWrap::HeadFloor>("headFloor"),
                        InstanceAccessor<&LayerBudgetWrap::HeadBudget>("headBudget")});
  }

  explicit LayerBudgetWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<LayerBudgetWrap>(info) {
    guard(info.Env(), [&](Call& call) {
      const kvevict::PolicyInfo& policy = kvevict::find_policy(to_string(info[0], "LayerBudget: policy name"));
      kvevict::LayerBudgetParams lp;
      lp.heads = to_integer(info[1], "LayerBudget: heads");
      lp.layer_budget = to_integer(info[2], "LayerBudget: layerBudget");
      if (!absent(info[3])) lp.head_floor = to_integer(info[3], "LayerBudget: headFloor");
      impl_ = std::make_unique<kvevict::LayerBudget>(policy.name, to_params(info[4], "LayerBudget: params", call), lp);
    });
  }

 private:
  std::size_t head_of(const Napi::Value& v, const std::string& what) const {
    const std::int64_t h = to_integer(v, what);
    if (h < 0 || static_cast<std::uint64_t>(h) >= impl_->heads()) {
      throw Napi::RangeError::New(v.Env(), what + " (" + std::to_string(h) + ") must be in 0 ... " +
                                               std::to_string(impl_->heads() - 1));
    }
    return static_cast<std::size_t>(h);
  }
  Napi::Value OnDecodeStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      const std::size_t head = head_of(info[0], "onDecodeStep: head");
      const std::int64_t pos = to_integer(info[1], "onDecodeStep: pos");
      if (pos < 0) call.negative = true;
      impl_->on_decode_step(head, pos, attention_arg(env, info[2], scratch_, "onDecodeStep: attn"));
    });
    return env.Undefined();
  }
  Napi::Value OnStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      const std::size_t head = head_of(info[0], "onStep: head");
      const std::int64_t pos = to_integer(info[1], "onStep: pos");
      if (pos < 0) call.negative = true;
      impl_->on_step(head, pos, step_inputs_arg(env, info[2], step_scratch_, "onStep: signals", false));
    });
    return env.Undefined();
  }
  Napi::Value OnOrigin(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call&) {
      const std::size_t head = head_of(info[0], "onOrigin: head");
      impl_->on_origin(head, step_inputs_arg(env, info[1], step_scratch_, "onOrigin: signals", true));
    });
    return env.Undefined();
  }
  Napi::Value Evict(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call& call) -> Napi::Value {
      const std::int64_t budget = to_integer(info[0], "evict: layerBudget");
      if (budget < 0) call.negative = true;
      return Napi::Number::New(info.Env(), static_cast<double>(impl_->evict(budget)));
    });
  }
  Napi::Value Victims(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      return number_array(info.Env(), impl_->victims(head_of(info[0], "victims: head")));
    });
  }
  Napi::Value KeptCount(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      return Napi::Number::New(info.Env(), static_cast<double>(impl_->kept_count(head_of(info[0], "keptCount: head"))));
    });
  }
  Napi::Value TotalKept(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->total_kept())); }
  Napi::Value MemoryBytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->memory_bytes())); }
  Napi::Value Query(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) {
      const std::size_t head = head_of(info[0], "query: head");
      return adapter_query(info.Env(), impl_->head(head), to_string(info[1], "query name"), info[2]);
    });
  }
  Napi::Value Heads(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->heads())); }
  Napi::Value HeadFloor(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->head_floor())); }
  Napi::Value HeadBudget(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(impl_->head_budget())); }

  std::unique_ptr<kvevict::LayerBudget> impl_;
  std::vector<float> scratch_;
  StepScratch step_scratch_;
};

// ---- Trace -----------------------------------------------------------------------

class TraceWrap : public Napi::ObjectWrap<TraceWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeTrace",
                       {InstanceMethod<&TraceWrap::Next>("next"),
                        InstanceAccessor<&TraceWrap::Id>("id"),
                        InstanceAccessor<&TraceWrap::Length>("length"),
                        InstanceAccessor<&TraceWrap::Steps>("steps")});
  }

  // new NativeTrace(id?, steps?)
  explicit TraceWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TraceWrap>(info) {
    guard(info.Env(), [&](Call&) {
      const std::string id = info[0].IsUndefined() ? "decode-4096" : to_string(info[0], "trace id");
      trace_ = kvevict::open_trace(id);
      limit_ = info[1].IsUndefined() ? trace_->steps()
                                     : kvevict::checked_steps(*trace_, to_integer(info[1], "steps"));
    });
  }

 private:
  // The next step's weights as a new Float32Array, or undefined after the last.
  Napi::Value Next(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    return guard(env, [&](Call&) -> Napi::Value {
      if (trace_->step() >= limit_) return env.Undefined();
      const std::span<const float> w = trace_->next();
      Napi::Float32Array out = Napi::Float32Array::New(env, w.size());
      if (!w.empty()) std::memcpy(out.Data(), w.data(), w.size_bytes());
      return out;
    });
  }
  Napi::Value Id(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), trace_->id()); }
  Napi::Value Length(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), trace_->length()); }
  Napi::Value Steps(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), limit_); }

  std::unique_ptr<kvevict::Trace> trace_;
  std::uint32_t limit_ = 0;
};

// ---- free functions ----------------------------------------------------------------

// policies(): [{name, title, summary, params: [{name, default, help}], queries: [{name, arity}]}]
Napi::Value Policies(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const auto all = kvevict::policies();
    Napi::Array out = Napi::Array::New(env, all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const kvevict::PolicyInfo& p = *all[i];
      Napi::Object entry = Napi::Object::New(env);
      entry.Set("name", p.name);
      entry.Set("title", p.title);
      entry.Set("summary", p.summary);
      Napi::Array params = Napi::Array::New(env, p.params.size());
      for (std::size_t j = 0; j < p.params.size(); ++j) {
        Napi::Object param = Napi::Object::New(env);
        param.Set("name", p.params[j].name);
        param.Set("default", Napi::Number::New(env, static_cast<double>(p.params[j].default_value)));
        param.Set("help", p.params[j].help);
        params.Set(static_cast<std::uint32_t>(j), param);
      }
      entry.Set("params", params);
      Napi::Array queries = Napi::Array::New(env, p.queries.size());
      for (std::size_t j = 0; j < p.queries.size(); ++j) {
        Napi::Object query = Napi::Object::New(env);
        query.Set("name", p.queries[j].name);
        query.Set("arity", Napi::Number::New(env, static_cast<double>(p.queries[j].arity)));
        queries.Set(static_cast<std::uint32_t>(j), query);
      }
      entry.Set("queries", queries);
      entry.Set("signals", signal_array(env, p.signals));
      out.Set(static_cast<std::uint32_t>(i), entry);
    }
    return out;
  });
}

Napi::Value PyramidBudget(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const std::int64_t budget = to_integer(info[0], "pyramidBudget: budget");
    const std::int64_t layer = to_integer(info[1], "pyramidBudget: layer");
    const std::int64_t num_layers = to_integer(info[2], "pyramidBudget: numLayers");
    const std::int64_t ratio = to_integer(info[3], "pyramidBudget: ratio");
    if (budget < 0) call.negative = true;
    return Napi::Number::New(env, static_cast<double>(kvevict::pyramid_budget(budget, layer, num_layers, ratio)));
  });
}

// simd() -> {compiled, supported, active}: the kernels' SIMD targets, lowest first.
Napi::Value Simd(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const auto list = [&](const std::vector<std::string>& names) {
      Napi::Array out = Napi::Array::New(env, names.size());
      for (std::size_t i = 0; i < names.size(); ++i) out.Set(static_cast<std::uint32_t>(i), names[i]);
      return out;
    };
    Napi::Object out = Napi::Object::New(env);
    out.Set("compiled", list(kvevict::simd::compiled_targets()));
    out.Set("supported", list(kvevict::simd::supported_targets()));
    out.Set("active", kvevict::simd::active_target());
    return out;
  });
}

// selectSimd(name): every kernel at `name` from now on ("best": the CPU's best).
Napi::Value SelectSimd(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    kvevict::simd::select_target(to_string(info[0], "target"));
    return env.Undefined();
  });
}

Napi::Value TraceHash(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const std::string id = info[0].IsUndefined() ? "decode-4096" : to_string(info[0], "trace id");
    const std::unique_ptr<kvevict::Trace> trace = kvevict::open_trace(id);
    const std::uint32_t steps =
        info[1].IsUndefined() ? trace->steps() : kvevict::checked_steps(*trace, to_integer(info[1], "steps"));
    return Napi::Number::New(env, kvevict::trace_hash(*trace, steps));
  });
}

// A granularity (eval/paged.h): 'head', 'layer' or 'sequence'; TypeError for a
// non-string, ParameterError naming `what` and the core's message otherwise.
kvevict::Granularity granularity_of(const Napi::Value& v, const std::string& what) {
  if (!v.IsString()) {
    throw Napi::TypeError::New(v.Env(), what + " must be 'head', 'layer' or 'sequence', got " + type_name(v));
  }
  try {
    return kvevict::parse_granularity(v.As<Napi::String>().Utf8Value());
  } catch (const kvevict::ParameterError& e) {
    throw kvevict::ParameterError(what + ": " + e.what());
  }
}

// {blockSize, startBlocks, recentBlocks, blockScore, granularity, layerBudget,
// headFloor} (docs/paged.md), as the tool's --block-size ... --head-floor.
kvevict::PagedOptions paged_options(const Napi::Object& options, const std::string& what) {
  kvevict::PagedOptions p;
  if (const auto size = optional_integer(options, "blockSize", what)) {
    p.block_size = kvevict::given_block_size(*size, what + ".blockSize");
  }
  p.start_blocks = optional_integer(options, "startBlocks", what).value_or(0);
  p.recent_blocks = optional_integer(options, "recentBlocks", what).value_or(0);
  const Napi::Value score = options.Get("blockScore");
  if (!score.IsUndefined()) p.block_score = kvevict::parse_block_score(to_string(score, what + ".blockScore"));
  const Napi::Value layer = options.Get("layerBudget");
  if (!layer.IsUndefined()) {
    if (!layer.IsBoolean()) throw Napi::TypeError::New(options.Env(), what + ".layerBudget must be a boolean, got " + type_name(layer));
    p.layer_budget = layer.As<Napi::Boolean>().Value();
  }
  // layerBudget is the older spelling of granularity 'layer': both may be
  // given, but only when they agree (as the tool's --layer-budget with
  // --granularity).
  const Napi::Value granularity = options.Get("granularity");
  if (!granularity.IsUndefined()) {
    const kvevict::Granularity g = granularity_of(granularity, what + ".granularity");
    if (!layer.IsUndefined() && p.layer_budget != (g == kvevict::Granularity::kLayer)) {
      throw kvevict::ParameterError(what + ".layerBudget (" + (p.layer_budget ? "true" : "false") +
                                    ") and .granularity ('" + std::string(kvevict::granularity_name(g)) +
                                    "') disagree: layerBudget true is granularity 'layer'");
    }
    p.set_granularity(g);
  }
  p.head_floor = optional_integer(options, "headFloor", what).value_or(-1);
  kvevict::check_paged(p);
  return p;
}

kvevict::EvaluateOptions evaluate_options(const Napi::Object& options, const std::string& what) {
  kvevict::EvaluateOptions out;
  out.paged = paged_options(options, what);
  const Napi::Value trace = options.Get("trace");
  if (!trace.IsUndefined()) out.trace = to_string(trace, what + ".trace");
  out.steps = optional_integer(options, "steps", what);
  // keys, values, queries: the .npy files recorded beside an .npy trace
  // (kvevict record --keys/--values/--queries), for the key-aware policies.
  const auto file = [&](const char* key) {
    const Napi::Value v = options.Get(key);
    return absent(v) ? std::string() : to_string(v, what + "." + key);
  };
  out.signals.keys = file("keys");
  out.signals.values = file("values");
  out.signals.queries = file("queries");
  if (!out.signals.empty() && !kvevict::is_npy_id(out.trace)) {
    throw make_error(options.Env(), Kind::kParameter,
                     what + ".keys, .values and .queries go with the attention recorded beside them: give trace: "
                            "'FILE.npy' (kvevict record writes all four), not the generated trace '" + out.trace + "'");
  }
  return out;
}

// Refuses a policy that reads a signal the replay does not supply, naming the
// signal and the option that would supply it.
void check_replay(Napi::Env env, const kvevict::PolicyInfo& info, const kvevict::SignalFiles& files,
                  const std::string& what) {
  const kvevict::Signals missing = info.signals & ~files.supplied();
  if (missing == 0) return;
  kvevict::Signals first = 1;
  while ((missing & first) == 0) first <<= 1;
  const std::string option = first == kvevict::kSignalKey ? "keys" : first == kvevict::kSignalValue ? "values" : "queries";
  throw make_error(env, Kind::kParameter,
                   what + ": " + info.name + " reads the new token's " +
                       std::string(kvevict::signal_name(static_cast<kvevict::Signal>(first))) + " (" +
                       kvevict::signal_names(info.signals) + "), which " + kvevict::replay_source(files) +
                       " does not supply: give " + option + ": 'FILE.npy' recorded beside an .npy trace (kvevict "
                       "record --" + option + " writes it)");
}

// Builds the object of a run row (or the compare document) from the row
// schema's walk: the same keys, order and values as JSON.parse of the tool's
// JSON, without the text in between. Integers become Numbers exactly as
// JSON.parse reads them; non-finite numbers become null, as JSON writes them.
class ObjectBuilder final : public kvevict::RowVisitor {
 public:
  explicit ObjectBuilder(Napi::Env env) : env_(env), stack_{Napi::Object::New(env)} {}
  Napi::Object take() { return stack_.front().As<Napi::Object>(); }

  void string(const kvevict::FieldInfo& f, const std::string& value) override {
    put(f, Napi::String::New(env_, value));
  }
  void integer(const kvevict::FieldInfo& f, std::int64_t value) override {
    put(f, Napi::Number::New(env_, static_cast<double>(value)));
  }
  void number(const kvevict::FieldInfo& f, double value) override {
    put(f, std::isfinite(value) ? Napi::Value(Napi::Number::New(env_, value)) : env_.Null());
  }
  void null(const kvevict::FieldInfo& f) override { put(f, env_.Null()); }
  void params(const kvevict::FieldInfo& f, const kvevict::ParamMap& params) override {
    Napi::Object o = Napi::Object::New(env_);
    for (const auto& [k, v] : params) o.Set(k, Napi::Number::New(env_, static_cast<double>(v)));
    put(f, o);
  }
  void begin(const kvevict::FieldInfo& f) override {
    stack_.push_back(f.type == kvevict::FieldType::kArray ? Napi::Value(Napi::Array::New(env_))
                                                          : Napi::Value(Napi::Object::New(env_)));
  }
  void end(const kvevict::FieldInfo& f) override { put(f, pop()); }
  void begin_element() override { stack_.push_back(Napi::Object::New(env_)); }
  void end_element() override {
    const Napi::Value element = pop();
    Napi::Array array = stack_.back().As<Napi::Array>();
    array.Set(array.Length(), element);
  }

 private:
  void put(const kvevict::FieldInfo& f, const Napi::Value& value) {
    stack_.back().As<Napi::Object>().Set(std::string(f.name), value);
  }
  Napi::Value pop() {
    Napi::Value top = stack_.back();
    stack_.pop_back();
    return top;
  }
  Napi::Env env_;
  std::vector<Napi::Value> stack_;
};

Napi::Object row_schema_object(Napi::Env env, const kvevict::RunRow& row) {
  ObjectBuilder builder(env);
  kvevict::for_each_field(row, builder);
  return builder.take();
}

// A trace command's whole document, the envelope the tool prints:
// {command, model: null, rows: [...], trace}.
Napi::Object row_schema_object(Napi::Env env, const std::vector<kvevict::RunRow>& rows, std::string_view command) {
  ObjectBuilder builder(env);
  kvevict::for_each_field(rows, command, builder);
  return builder.take();
}

// run({policy, budget?, params?, trace?, steps?}) -> the run row object
Napi::Value Run(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const Napi::Object options = to_object(info[0], "run: options");
    const std::string name = to_string(options.Get("policy"), "run: options.policy");
    kvevict::ParamMap params = to_params(options.Get("params"), "run: options.params", call);
    const kvevict::EvaluateOptions evaluate = evaluate_options(options, "run: options");
    // The budget: options.budget, else params.budget, else the policy's default.
    std::int64_t budget = kvevict::find_policy(name).effective(params).front().second;
    if (const auto b = optional_integer(options, "budget", "run: options")) {
      budget = *b;
      call.negative = call.negative || budget < 0;
    }
    check_replay(env, kvevict::find_policy(name), evaluate.signals, "run");
    const std::vector<kvevict::RunRow> rows = kvevict::evaluate({{name, params, budget}}, evaluate);
    return row_schema_object(env, rows.front());
  });
}

// {policies?, budgets?, overrides?} of compare() and compareModel(); `what`
// names the function in messages.
// options.overrides: {"policy.param": n}, {param: n} (every policy that has
// it) or {policy: {param: n}}.
kvevict::ParamMap overrides_of(const Napi::Object& options, const std::string& what) {
  kvevict::ParamMap out;
  const Napi::Value overrides = options.Get("overrides");
  if (!overrides.IsUndefined()) {
    const Napi::Object object = to_object(overrides, what + ": options.overrides");
    for (const std::string& key : own_keys(object)) {
      const Napi::Value value = object.Get(key);
      if (value.IsUndefined()) continue;
      const std::string where = what + ": options.overrides." + key;
      if (value.IsNumber()) {
        kvevict::set_param(out, key, to_integer(value, where));
        continue;
      }
      // {policy: {param: value}} means "policy.param".
      const Napi::Object nested = to_object(value, where);
      for (const std::string& param : own_keys(nested)) {
        const Napi::Value v = nested.Get(param);
        if (v.IsUndefined()) continue;
        kvevict::set_param(out, key + "." + param, to_integer(v, where + "." + param));
      }
    }
  }
  return out;
}

// `files`: compare's keys (values, queries) recorded beside its trace: "all"
// is every policy they can feed, a named one is checked against them.
kvevict::CompareRequest compare_request(const Napi::Object& options, const std::string& what, Call& call,
                                        const kvevict::SignalFiles* files = nullptr) {
  const Napi::Env env = options.Env();
  kvevict::CompareRequest request;
  const Napi::Value names = options.Get("policies");
  const bool replay = files != nullptr && !files->empty();
  // A compare over a trace replays attention: "all" is what attention can
  // feed. compareModel's key-aware runs replay each window's full-cache keys
  // (kvevict::model_compare_policies): named ones run, "all" is the seven.
  const bool model = what == "compareModel";
  if (replay && names.IsString()) {
    const std::string text = names.As<Napi::String>().Utf8Value();
    if (text == "all") {
      request.policies = kvevict::policy_names(files->supplied());
    } else {
      for (const std::string& item : kvevict::split_list(text, what + ": options.policies")) {
        const kvevict::PolicyInfo& info = kvevict::find_policy(item);
        check_replay(env, info, *files, what);
        request.policies.push_back(info.name);
      }
    }
  } else if (names.IsString()) {
    request.policies = model ? kvevict::model_compare_policies(names.As<Napi::String>().Utf8Value())
                             : kvevict::parse_policy_list(names.As<Napi::String>().Utf8Value(),
                                                          kvevict::kSignalAttention,
                                                          what + " (it replays attention weights only)");
  } else if (names.IsArray()) {
    const auto array = names.As<Napi::Array>();
    for (std::uint32_t i = 0; i < array.Length(); ++i) {
      const std::string name = to_string(array.Get(i), what + ": options.policies[" + std::to_string(i) + "]");
      const kvevict::PolicyInfo& info = kvevict::find_policy(name);
      if (replay) {
        check_replay(env, info, *files, what);
      } else if (!model) {
        kvevict::check_signals_available(info, kvevict::kSignalAttention, what + " (it replays attention weights only)");
      }
      request.policies.push_back(info.name);
    }
    if (request.policies.empty()) {
      throw Napi::TypeError::New(env, what + ": options.policies is empty (omit it, or give \"all\", for every policy)");
    }
  } else if (!names.IsUndefined()) {
    throw Napi::TypeError::New(env, what + ": options.policies must be an array of names or a string, got " + type_name(names));
  }
  const Napi::Value budgets = options.Get("budgets");
  if (!budgets.IsUndefined()) {
    if (!budgets.IsArray()) {
      throw Napi::TypeError::New(env, what + ": options.budgets must be an array of numbers, got " + type_name(budgets));
    }
    const auto array = budgets.As<Napi::Array>();
    request.budgets.clear();
    for (std::uint32_t i = 0; i < array.Length(); ++i) {
      const std::int64_t b = to_integer(array.Get(i), what + ": options.budgets[" + std::to_string(i) + "]");
      call.negative = call.negative || b < 0;
      request.budgets.push_back(b);
    }
  }
  request.overrides = overrides_of(options, what);
  return request;
}

// compare({policies?, budgets?, overrides?, trace?, steps?}) -> the compare document object
Napi::Value Compare(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const Napi::Object options =
        info[0].IsUndefined() ? Napi::Object::New(env) : to_object(info[0], "compare: options");
    const kvevict::EvaluateOptions evaluate = evaluate_options(options, "compare: options");
    const kvevict::CompareRequest request = compare_request(options, "compare", call, &evaluate.signals);
    const std::vector<kvevict::RunRow> rows = kvevict::compare(request, evaluate);
    return row_schema_object(env, rows, "compare");
  });
}

// runVectors(paths: string | string[]) -> {passed, failed, failures: [...]}
Napi::Value RunVectors(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    std::vector<std::filesystem::path> paths;
    if (info[0].IsString()) {
      paths.emplace_back(info[0].As<Napi::String>().Utf8Value());
    } else if (info[0].IsArray()) {
      const auto array = info[0].As<Napi::Array>();
      for (std::uint32_t i = 0; i < array.Length(); ++i) {
        paths.emplace_back(to_string(array.Get(i), "runVectors: paths[" + std::to_string(i) + "]"));
      }
    } else {
      throw Napi::TypeError::New(env, "runVectors: paths must be a string or an array of strings, got " + type_name(info[0]));
    }
    const kvevict::VectorReport report = kvevict::run_vectors(paths);
    Napi::Object out = Napi::Object::New(env);
    out.Set("passed", Napi::Number::New(env, static_cast<double>(report.passed)));
    out.Set("failed", Napi::Number::New(env, static_cast<double>(report.failed)));
    Napi::Array failures = Napi::Array::New(env, report.failures.size());
    for (std::size_t i = 0; i < report.failures.size(); ++i) {
      const kvevict::VectorFailure& f = report.failures[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("file", f.file);
      o.Set("caseName", f.case_name);
      o.Set("step", Napi::Number::New(env, static_cast<double>(f.step)));
      o.Set("expected", f.expected);
      o.Set("actual", f.actual);
      o.Set("message", f.message);
      o.Set("description", kvevict::describe(f));
      failures.Set(static_cast<std::uint32_t>(i), o);
    }
    out.Set("failures", failures);
    return out;
  });
}

// ---- the real model (kvevict/model/decoder/model.h, perplexity.h, persistence.h) -------------------

// A float as the shortest decimal that reads back to it (1e-5F -> 1e-05, not 9.99999974e-06).
double shortest(float x) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc{} ? std::stod(std::string(buf, end)) : static_cast<double>(x);
}

kvevict::ModelOptions model_load_options(const Napi::Value& v);

class ModelWrap : public Napi::ObjectWrap<ModelWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeModel",
                       {InstanceAccessor<&ModelWrap::Config>("config"),
                        InstanceAccessor<&ModelWrap::ParameterCount>("parameterCount"),
                        InstanceAccessor<&ModelWrap::Path>("path"),
                        InstanceAccessor<&ModelWrap::Matmul>("matmul")});
  }

  // new NativeModel(path, {context?, matmul?}?): reads and checks the whole
  // model file (.kvm, .gguf, safetensors).
  explicit ModelWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelWrap>(info) {
    guard(info.Env(), [&](Call&) {
      const std::string file = to_string(info[0], "Model: path");
      model_ = kvevict::Model::load(file, model_load_options(info[1]));
    });
    external_ = static_cast<std::int64_t>(model_->parameter_count() * sizeof(float));
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), external_);
  }
  ~ModelWrap() override {
    if (external_ != 0) Napi::MemoryManagement::AdjustExternalMemory(Env(), -external_);
  }
  ModelWrap(const ModelWrap&) = delete;
  ModelWrap& operator=(const ModelWrap&) = delete;

  const std::shared_ptr<const kvevict::Model>& shared() const noexcept { return model_; }

 private:
  Napi::Value Config(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const kvevict::ModelConfig& c = model_->config();
    Napi::Object out = Napi::Object::New(env);
    out.Set("vocab", Napi::Number::New(env, c.vocab));
    out.Set("layers", Napi::Number::New(env, c.layers));
    out.Set("heads", Napi::Number::New(env, c.heads));
    out.Set("kvHeads", Napi::Number::New(env, c.kv_heads));
    out.Set("width", Napi::Number::New(env, c.width));
    out.Set("ff", Napi::Number::New(env, c.ff));
    out.Set("context", Napi::Number::New(env, c.context));
    out.Set("ropeBase", Napi::Number::New(env, shortest(c.rope_base)));
    out.Set("normEps", Napi::Number::New(env, shortest(c.norm_eps)));
    return out;
  }
  Napi::Value ParameterCount(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(model_->parameter_count()));
  }
  Napi::Value Path(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), model_->path()); }
  Napi::Value Matmul(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), kvevict::matmul_mode_name(model_->matmul_mode()));
  }

  std::shared_ptr<const kvevict::Model> model_;
  std::int64_t external_ = 0;
};

// The native object behind `v` when it is an instance of `cls` (subclasses too), else null.
template <class Wrap>
Wrap* unwrap_as(const Napi::Value& v, const Napi::FunctionReference& cls) {
  if (!v.IsObject() || cls.IsEmpty()) return nullptr;
  const Napi::Object object = v.As<Napi::Object>();
  if (!object.InstanceOf(cls.Value())) return nullptr;
  return Wrap::Unwrap(object);  // null for an object made from the prototype alone
}

PolicyWrap* policy_wrap(const Napi::Value& v) {
  return unwrap_as<PolicyWrap>(v, v.Env().GetInstanceData<AddonData>()->policy_class);
}

const std::shared_ptr<const kvevict::Model>& model_of(const Napi::Value& v, const std::string& what) {
  ModelWrap* m = unwrap_as<ModelWrap>(v, v.Env().GetInstanceData<AddonData>()->model_class);
  if (m == nullptr) throw Napi::TypeError::New(v.Env(), what + " must be a kvevict.Model, got " + type_name(v));
  return m->shared();
}

// The text's bytes (copied): a Buffer or another Uint8Array. A string is
// refused: text or path?
std::vector<std::uint8_t> text_of(const Napi::Value& v, const std::string& what) {
  const Napi::Env env = v.Env();
  if (v.IsString()) {
    throw Napi::TypeError::New(env, what + ": text must be a Buffer or Uint8Array, not a string: pass "
                                           "Buffer.from(s) for a string, or fs.readFileSync(path) for a file");
  }
  if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint8_array) {
    const auto bytes = v.As<Napi::Uint8Array>();
    return {bytes.Data(), bytes.Data() + bytes.ElementLength()};
  }
  throw Napi::TypeError::New(env, what + ": text must be a Buffer or Uint8Array, got " + type_name(v));
}

// A 32-bit count: RangeError (the binding's message) outside 0 ... 2^32-1.
std::uint32_t to_u32(const Napi::Value& v, const std::string& what, const std::string& rule) {
  const std::int64_t n = to_integer(v, what);
  if (n < 0 || n > static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max())) {
    throw Napi::RangeError::New(v.Env(), what + " (" + std::to_string(n) + ") " + rule);
  }
  return static_cast<std::uint32_t>(n);
}

// One position mode (rope.h): 'original' or 'cache'; TypeError for a
// non-string, ParameterError naming `what` and the text otherwise.
kvevict::PositionMode position_mode_of(const Napi::Value& v, const std::string& what) {
  if (!v.IsString()) {
    throw Napi::TypeError::New(v.Env(), what + " must be 'original' or 'cache', got " + type_name(v));
  }
  try {
    return kvevict::parse_position_mode(v.As<Napi::String>().Utf8Value());
  } catch (const kvevict::InputError& e) {
    throw kvevict::ParameterError(what + ": " + e.what());
  }
}

// A string naming one of the library's choices, parsed by `parse`
// (`fallback` when undefined); TypeError for a non-string, the parse's
// ParameterError prefixed with `what` otherwise.
template <typename T, typename Parse>
T choice_of(const Napi::Value& v, const std::string& what, const char* choices, T fallback, Parse parse) {
  if (v.IsUndefined()) return fallback;
  if (!v.IsString()) throw Napi::TypeError::New(v.Env(), what + " must be " + choices + ", got " + type_name(v));
  try {
    return parse(v.As<Napi::String>().Utf8Value());
  } catch (const kvevict::ParameterError& e) {
    throw kvevict::ParameterError(what + ": " + e.what());
  }
}

// JSON.parse(text): the library's one description of its rows, as an object.
Napi::Value parse_json(Napi::Env env, const std::string& text) {
  const Napi::Object json = env.Global().Get("JSON").As<Napi::Object>();
  return json.Get("parse").As<Napi::Function>().Call(json, {Napi::String::New(env, text)});
}

// A policy (a name or a Policy instance, whose given parameters are the base),
// a budget (absent: params.budget, else the policy's own) and more parameters.
kvevict::RunSpec spec_of(const Napi::Value& policy, const Napi::Value& budget, const Napi::Value& params,
                         const std::string& what, Call& call) {
  const kvevict::PolicyInfo* info = nullptr;
  kvevict::ParamMap base;
  if (PolicyWrap* p = policy_wrap(policy)) {
    info = &p->info();
    base = p->given();
  } else if (policy.IsString()) {
    info = &kvevict::find_policy(policy.As<Napi::String>().Utf8Value());
  } else {
    throw Napi::TypeError::New(policy.Env(), what + ": the policy must be a name or a Policy, got " + type_name(policy));
  }
  for (const auto& [key, value] : to_params(params, what + ".params", call)) kvevict::set_param(base, key, value);
  kvevict::RunSpec spec;
  spec.policy = info->name;
  spec.budget = 512;
  for (const auto& [key, value] : info->effective(base)) {
    if (key == "budget") spec.budget = value;
  }
  if (!absent(budget)) {
    spec.budget = to_integer(budget, what + ".budget");
    call.negative = call.negative || spec.budget < 0;
  }
  spec.params = std::move(base);
  return spec;
}

// runs: [name | Policy | [policy, budget?, params?] | {policy, budget?, params?}]
std::vector<kvevict::RunSpec> runs_of(const Napi::Value& runs, Call& call) {
  const Napi::Env env = runs.Env();
  std::vector<kvevict::RunSpec> out;
  if (absent(runs)) return out;
  if (!runs.IsArray()) {
    throw Napi::TypeError::New(env, "perplexity: runs must be an array of runs (a policy name or Policy, "
                                    "[policy, budget, params?] or {policy, budget?, params?}), got " + type_name(runs));
  }
  const auto array = runs.As<Napi::Array>();
  for (std::uint32_t i = 0; i < array.Length(); ++i) {
    const Napi::Value item = array.Get(i);
    const std::string what = "perplexity: runs[" + std::to_string(i) + "]";
    if (item.IsString() || policy_wrap(item) != nullptr) {
      out.push_back(spec_of(item, env.Undefined(), env.Undefined(), what, call));
    } else if (item.IsArray()) {
      const auto tuple = item.As<Napi::Array>();
      if (tuple.Length() < 1 || tuple.Length() > 3) {
        throw Napi::TypeError::New(env, what + " must be [policy, budget?, params?], got " +
                                            std::to_string(tuple.Length()) + " item(s)");
      }
      out.push_back(spec_of(tuple.Get(0u), tuple.Get(1u), tuple.Get(2u), what, call));
    } else if (item.IsObject() && !item.IsFunction() && !item.IsTypedArray()) {
      const auto object = item.As<Napi::Object>();
      out.push_back(spec_of(object.Get("policy"), object.Get("budget"), object.Get("params"), what, call));
    } else {
      throw Napi::TypeError::New(env, what + " must be a policy name, a Policy, [policy, budget, params?] or "
                                             "{policy, budget?, params?}, got " + type_name(item));
    }
  }
  return out;
}

kvevict::ModelRunOptions model_options(const Napi::Object& options, const std::string& what) {
  kvevict::ModelRunOptions out;
  out.paged = paged_options(options, what + ": options");
  const Napi::Value v = options.Get("maxWindows");
  if (!v.IsUndefined()) {
    out.max_windows = to_u32(v, what + ": options.maxWindows", "must be at least 0 (0 = every window of the text)");
  }
  const Napi::Value prefill = options.Get("prefill");
  if (!prefill.IsUndefined()) {
    out.prefill = to_u32(prefill, what + ": options.prefill", "must be at least 0 (0 = evict while decoding)");
  }
  const Napi::Value window = options.Get("prefillWindow");
  if (!window.IsUndefined()) {
    const std::string rule = "must be at least 1 (the attention rows the compression scores from)";
    out.prefill_window = to_u32(window, what + ": options.prefillWindow", rule);
    if (out.prefill_window < 1) throw Napi::RangeError::New(options.Env(), what + ": options.prefillWindow (0) " + rule);
  }
  // The store's precision (docs/paged.md): checked against the model by the library.
  const Napi::Value precision = options.Get("kvPrecision");
  if (!precision.IsUndefined()) {
    if (!precision.IsString()) {
      throw Napi::TypeError::New(options.Env(), what + ": options.kvPrecision must be a string (fp32, fp16, int8 or int4)");
    }
    out.kv.precision = kvevict::parse_precision(precision.As<Napi::String>().Utf8Value(), what + ": options.kvPrecision");
  }
  const Napi::Value residual = options.Get("kvResidual");
  if (!residual.IsUndefined()) {
    out.kv.residual = to_u32(residual, what + ": options.kvResidual", "must be at least 0");
  }
  return out;
}

// Rows as the tool's --format json prints them, walked from their row's one
// description (kvevict/model/evaluation/perplexity_rows.h, serve_bench.h).
template <class Row>
Napi::Array row_array(Napi::Env env, const std::vector<Row>& rows) {
  Napi::Array out = Napi::Array::New(env, rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ObjectBuilder builder(env);
    kvevict::for_each_field(rows[i], builder);
    out.Set(static_cast<std::uint32_t>(i), builder.take());
  }
  return out;
}

Napi::Object options_object(const Napi::Value& v, const std::string& what) {
  return v.IsUndefined() ? Napi::Object::New(v.Env()) : to_object(v, what + ": options");
}

// perplexity(model, text, runs?, {maxWindows}?) -> rows, the full cache first
Napi::Value Perplexity(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "perplexity: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "perplexity");
    const std::vector<kvevict::RunSpec> specs = runs_of(info[2], call);
    const kvevict::ModelRunOptions options = model_options(options_object(info[3], "perplexity"), "perplexity");
    return row_array(env, kvevict::perplexity(*model, text, specs, options));
  });
}

// compareModel(model, text, {policies?, budgets?, overrides?, maxWindows?}?) -> ranked rows
Napi::Value CompareModel(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "compareModel: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "compareModel");
    const Napi::Object options = options_object(info[2], "compareModel");
    kvevict::CompareRequest request = compare_request(options, "compareModel", call);
    if (options.Get("budgets").IsUndefined()) request.budgets = {64, 128, 256, 512};
    const kvevict::ModelRunOptions run = model_options(options, "compareModel");
    return row_array(env, kvevict::compare_model(*model, text, request, run));
  });
}

// sweepModel(model, text, {policy, param, values, budgets?, params?, maxWindows?,
// kvPrecision?, kvResidual?}) -> perplexity rows (kvevict sweep --model)
Napi::Value SweepModel(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "sweepModel: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "sweepModel");
    const Napi::Object options = options_object(info[2], "sweepModel");
    kvevict::SweepRequest request;
    request.policy = kvevict::find_policy(to_string(options.Get("policy"), "sweepModel: options.policy")).name;
    request.param = to_string(options.Get("param"), "sweepModel: options.param");
    const auto list = [&](const char* key) {
      const Napi::Value v = options.Get(key);
      const std::string what = std::string("sweepModel: options.") + key;
      if (!v.IsArray()) throw Napi::TypeError::New(env, what + " must be an array of numbers, got " + type_name(v));
      const auto array = v.As<Napi::Array>();
      std::vector<std::int64_t> out;
      for (std::uint32_t i = 0; i < array.Length(); ++i) {
        out.push_back(to_integer(array.Get(i), what + "[" + std::to_string(i) + "]"));
      }
      return out;
    };
    request.values = list("values");
    request.budgets = options.Get("budgets").IsUndefined() ? std::vector<std::int64_t>{64, 128, 256} : list("budgets");
    request.params = to_params(options.Get("params"), "sweepModel: options.params", call);
    const Napi::Value skip = options.Get("skipRefused");
    if (!skip.IsUndefined()) {
      if (!skip.IsBoolean()) {
        throw Napi::TypeError::New(env, "sweepModel: options.skipRefused must be a boolean, got " + type_name(skip));
      }
      request.skip_refused = skip.As<Napi::Boolean>().Value();
    }
    std::vector<std::string> skipped;
    const std::vector<kvevict::RunSpec> specs = kvevict::sweep_specs(request, &skipped);
    const kvevict::ModelRunOptions run = model_options(options, "sweepModel");
    Napi::Array rows = row_array(env, kvevict::perplexity(*model, text, specs, run));
    // The pairs skipRefused left out, one line each, as a non-enumerable
    // property: the rows stay a plain array to JSON and deepEqual.
    Napi::Array lines = Napi::Array::New(env, skipped.size());
    for (std::size_t i = 0; i < skipped.size(); ++i) lines.Set(static_cast<std::uint32_t>(i), skipped[i]);
    rows.DefineProperty(Napi::PropertyDescriptor::Value("skipped", lines, napi_default));
    return rows;
  });
}

// A string "a,b" (split as the tool splits it) or an array of strings.
std::vector<std::string> string_items(const Napi::Value& v, const std::string& what) {
  if (v.IsString()) return kvevict::split_list(v.As<Napi::String>().Utf8Value(), what);
  if (!v.IsArray()) {
    throw Napi::TypeError::New(v.Env(), what + " must be a string or an array of strings, got " + type_name(v));
  }
  const auto array = v.As<Napi::Array>();
  std::vector<std::string> out;
  for (std::uint32_t i = 0; i < array.Length(); ++i) {
    out.push_back(to_string(array.Get(i), what + "[" + std::to_string(i) + "]"));
  }
  if (out.empty()) throw Napi::TypeError::New(v.Env(), what + " is empty");
  return out;
}

std::vector<std::uint32_t> u32_items(const Napi::Value& v, const std::string& what, const std::string& rule) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), what + " must be an array of numbers, got " + type_name(v));
  const auto array = v.As<Napi::Array>();
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < array.Length(); ++i) {
    out.push_back(to_u32(array.Get(i), what + "[" + std::to_string(i) + "]", rule));
  }
  if (out.empty()) throw Napi::TypeError::New(v.Env(), what + " is empty");
  return out;
}

// serveBench(model, text, {sequences?, policies?, budget?, modes?, sharing?, chunks?, sharedPrefix?, tokens?,
// prompt?, window?, blockSize?, poolBlocks?, positions?, granularity?}?) -> rows as `kvevict serve-bench --format json` prints them.
Napi::Value ServeBench(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const auto& model = model_of(info[0], "serveBench: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "serveBench");
    const Napi::Object o = options_object(info[2], "serveBench");
    const std::string w = "serveBench: options.";
    auto u32_or = [&](const char* key, std::uint32_t fallback, const std::string& rule) {
      const Napi::Value v = o.Get(key);
      return v.IsUndefined() ? fallback : to_u32(v, w + key, rule);
    };
    std::vector<std::uint32_t> sequences{4};
    if (!o.Get("sequences").IsUndefined()) {
      sequences = u32_items(o.Get("sequences"), w + "sequences", "must be 1 ... 4096");
      for (const std::uint32_t n : sequences) {
        if (n < 1 || n > 4096) throw Napi::RangeError::New(env, w + "sequences: " + std::to_string(n) + " is not 1 ... 4096");
      }
    }
    std::vector<std::string> policies{"none"};
    if (!o.Get("policies").IsUndefined()) {
      policies.clear();
      for (const std::string& item : string_items(o.Get("policies"), w + "policies")) {
        for (std::string& name : kvevict::serve_policy_names(item)) policies.push_back(std::move(name));
      }
    }
    const std::int64_t budget = o.Get("budget").IsUndefined() ? 128 : to_integer(o.Get("budget"), w + "budget");
    const std::vector<std::string> modes =
        o.Get("modes").IsUndefined() ? std::vector<std::string>{"token"} : string_items(o.Get("modes"), w + "modes");
    std::vector<bool> sharing{true};
    const Napi::Value share = o.Get("sharing");
    if (share.IsBoolean()) {
      sharing = {share.As<Napi::Boolean>().Value()};
    } else if (share.IsArray()) {
      sharing.clear();
      const auto array = share.As<Napi::Array>();
      for (std::uint32_t i = 0; i < array.Length(); ++i) {
        const Napi::Value v = array.Get(i);
        if (!v.IsBoolean()) throw Napi::TypeError::New(env, w + "sharing must hold booleans, got " + type_name(v));
        sharing.push_back(v.As<Napi::Boolean>().Value());
      }
      if (sharing.empty()) throw Napi::TypeError::New(env, w + "sharing is empty");
    } else if (!share.IsUndefined()) {
      throw Napi::TypeError::New(env, w + "sharing must be a boolean or an array of booleans, got " + type_name(share));
    }
    std::vector<std::uint32_t> chunks{0};
    if (!o.Get("chunks").IsUndefined()) {
      chunks = u32_items(o.Get("chunks"), w + "chunks", "must be at least 0 (0 = evict while decoding)");
    }
    kvevict::ServeBenchRequest request;
    request.runs = kvevict::serve_runs(sequences, policies, budget, modes, sharing, chunks);
    request.shared_prefix = u32_or("sharedPrefix", 512, "must be at least 0");
    request.tokens = u32_or("tokens", 0, "must be at least 0 (0 = the model's context)");
    request.prompt = u32_or("prompt", 0, "must be at least 0 (0 = every token)");
    request.window = u32_or("window", 32, "must be at least 1");
    request.block_size = u32_or("blockSize", 16, "must be at least 1");
    request.pool_blocks = u32_or("poolBlocks", 0, "must be at least 0 (0 = every cache at capacity)");
    if (!o.Get("positions").IsUndefined()) request.positions = position_mode_of(o.Get("positions"), w + "positions");
    // blockSize here is the pool's, not a paged option: granularity is read on its own.
    if (!o.Get("granularity").IsUndefined()) request.granularity = granularity_of(o.Get("granularity"), w + "granularity");
    return row_array(env, kvevict::serve_bench(model, text, request));
  });
}

// Refuses an option `options` has that is not in `known`, naming it (a
// misspelt option would otherwise be ignored silently).
void check_known_options(const Napi::Object& options, std::initializer_list<const char*> known, const std::string& what) {
  for (const std::string& key : own_keys(options)) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      std::string names;
      for (const char* k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      throw Napi::TypeError::New(options.Env(), what + ": unknown option '" + key + "' (known: " + names + ")");
    }
  }
}

// new Model(path, {context?, matmul?}): the tool's --context and --matmul.
kvevict::ModelOptions model_load_options(const Napi::Value& v) {
  kvevict::ModelOptions options;
  if (v.IsUndefined()) return options;
  const Napi::Object o = to_object(v, "Model: options");
  check_known_options(o, {"context", "matmul"}, "Model");
  if (!o.Get("context").IsUndefined()) {
    options.context = to_u32(o.Get("context"), "Model: options.context",
                             "must be at least 0 (0: the trained context, at most " +
                                 std::to_string(kvevict::ModelOptions::kDefaultContextCap) + ")");
  }
  options.matmul = choice_of(o.Get("matmul"), "Model: options.matmul", "'exact' or 'int8'", kvevict::MatmulMode::kExact,
                             [](const std::string& name) { return kvevict::parse_matmul_mode(name); });
  return options;
}

// The policies a model run names (its decoder feeds every signal), as the
// tool's --policies: "all" is all ten; a string "a,b" or an array of names.
std::vector<std::string> model_policy_names(const Napi::Value& v, const std::string& what) {
  if (v.IsString()) return kvevict::parse_policy_list(v.As<Napi::String>().Utf8Value());
  std::vector<std::string> names;
  for (const std::string& name : string_items(v, what)) names.push_back(kvevict::find_policy(name).name);
  return names;
}

std::vector<std::int64_t> integer_items(const Napi::Value& v, const std::string& what, Call& call) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), what + " must be an array of numbers, got " + type_name(v));
  const auto array = v.As<Napi::Array>();
  std::vector<std::int64_t> out;
  for (std::uint32_t i = 0; i < array.Length(); ++i) {
    out.push_back(to_integer(array.Get(i), what + "[" + std::to_string(i) + "]"));
    call.negative = call.negative || out.back() < 0;
  }
  if (out.empty()) throw Napi::TypeError::New(v.Env(), what + " is empty");
  return out;
}

// tasks(model, text, {tasks?, lengths?, depths?, samples?, policies?, budgets?, moments?, overrides?, seed?,
// window?, chunk?, kvPrecision?, kvResidual?, granularity?}?) -> the rows `kvevict tasks --format json` prints: the
// library's tasks_json, parsed (kvevict/model/evaluation/tasks.h).
Napi::Value Tasks(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "tasks: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "tasks");
    const Napi::Object o = options_object(info[2], "tasks");
    check_known_options(o, {"tasks", "lengths", "depths", "samples", "policies", "budgets", "moments", "overrides",
                            "seed", "window", "chunk", "kvPrecision", "kvResidual", "granularity"},
                        "tasks");
    const std::string w = "tasks: options.";
    kvevict::TaskRequest request;
    if (!o.Get("tasks").IsUndefined()) {
      const std::vector<std::string> names = string_items(o.Get("tasks"), w + "tasks");
      request.tasks.clear();
      if (names.size() == 1 && names.front() == "all") {
        request.tasks = kvevict::task_names();
      } else {
        for (const std::string& t : names) request.tasks.push_back(kvevict::task_names()[kvevict::task_index(t)]);
      }
    }
    if (!o.Get("lengths").IsUndefined()) {
      request.lengths.clear();
      for (const std::int64_t l : integer_items(o.Get("lengths"), w + "lengths", call)) {
        if (l < 1 || l > std::int64_t{1} << 20) {
          throw Napi::RangeError::New(env, w + "lengths: " + std::to_string(l) + " is not a length (1 ... 1048576 positions)");
        }
        request.lengths.push_back(static_cast<std::uint32_t>(l));
      }
    }
    // The tool's ranges (kvevict tasks --depths, --samples, --window, --chunk).
    const auto in_range = [&](const char* key, std::uint32_t fallback, std::int64_t low, std::int64_t high) {
      const Napi::Value v = o.Get(key);
      if (v.IsUndefined()) return fallback;
      const std::int64_t n = to_integer(v, w + key);
      if (n < low || n > high) {
        throw Napi::RangeError::New(env, w + key + " (" + std::to_string(n) + ") must be in " + std::to_string(low) +
                                             " ... " + std::to_string(high));
      }
      return static_cast<std::uint32_t>(n);
    };
    request.depths = in_range("depths", 5, 1, 100);
    request.samples = in_range("samples", 20, 1, 100000);
    request.seed = in_range("seed", 1, 0, std::numeric_limits<std::uint32_t>::max());
    request.window = in_range("window", 32, 1, std::int64_t{1} << 20);
    request.chunk = in_range("chunk", 0, 0, std::int64_t{1} << 20);
    // policies null or 'none': the full cache only (budgets are then not read).
    const Napi::Value policies = o.Get("policies");
    if (policies.IsNull() || (policies.IsString() && policies.As<Napi::String>().Utf8Value() == "none")) {
      request.budgets.clear();
    } else {
      request.policies = policies.IsUndefined() ? kvevict::policy_names() : model_policy_names(policies, w + "policies");
      if (!o.Get("budgets").IsUndefined()) request.budgets = integer_items(o.Get("budgets"), w + "budgets", call);
    }
    if (!o.Get("moments").IsUndefined()) {
      request.moments.clear();
      for (const std::string& m : string_items(o.Get("moments"), w + "moments")) {
        request.moments.push_back(kvevict::parse_moment(m));
      }
    }
    request.overrides = overrides_of(o, "tasks");
    const kvevict::ModelRunOptions run = model_options(o, "tasks");
    const std::vector<kvevict::TaskRow> rows = kvevict::run_tasks(model, text, request, run);
    // The rows of the tool's envelope ({command, model, rows}).
    return parse_json(env, kvevict::tasks_json(rows, {"tasks", model->path()})).As<Napi::Object>().Get("rows");
  });
}

// benchModel(model, text?, {tokens?, rounds?, policies?, budgets?, prompt?, threads?, together?, prefillChunk?,
// promptLogits?}?) -> the rows `kvevict bench --model
// --format json` prints: the library's decode_bench_json, parsed (kvevict/model/serving/decode_bench.h). text
// undefined or null: model/heldout-sample.txt from the working folder, the tool's default --text.
Napi::Value BenchModel(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "benchModel: model");
    const std::vector<std::uint8_t> text =
        absent(info[1]) ? kvevict::read_text("model/heldout-sample.txt") : text_of(info[1], "benchModel");
    const Napi::Object o = options_object(info[2], "benchModel");
    check_known_options(o, {"tokens", "rounds", "policies", "budgets", "prompt", "threads", "together", "prefillChunk",
                            "promptLogits"},
                        "benchModel");
    const std::string w = "benchModel: options.";
    kvevict::DecodeBenchRequest request;
    if (!o.Get("tokens").IsUndefined()) {
      request.tokens = to_u32(o.Get("tokens"), w + "tokens", "must be at least 1 (tokens decoded a pass)");
      if (request.tokens < 1) throw Napi::RangeError::New(env, w + "tokens (0) must be at least 1 (tokens decoded a pass)");
    }
    if (!o.Get("rounds").IsUndefined()) {
      const std::int64_t rounds = to_integer(o.Get("rounds"), w + "rounds");
      if (rounds < 1 || rounds > 1000) {
        throw Napi::RangeError::New(env, w + "rounds (" + std::to_string(rounds) + ") must be in 1 ... 1000 (passes a run)");
      }
      request.rounds = static_cast<int>(rounds);
    }
    if (!o.Get("prompt").IsUndefined()) {
      request.prompt = to_u32(o.Get("prompt"), w + "prompt", "must be at least 0 (tokens prefilled before the timed ones)");
    }
    if (!o.Get("prefillChunk").IsUndefined()) {
      request.prefill_chunk = to_u32(o.Get("prefillChunk"), w + "prefillChunk", "must be in 1 ... 4096");
      if (request.prefill_chunk < 1 || request.prefill_chunk > 4096) {
        throw Napi::RangeError::New(env, w + "prefillChunk (" + std::to_string(request.prefill_chunk) +
                                             ") must be in 1 ... 4096");
      }
    }
    request.prompt_logits = choice_of(o.Get("promptLogits"), w + "promptLogits", "'all' or 'last'",
                                      kvevict::PromptLogits::kEvery,
                                      [](const std::string& name) { return kvevict::parse_prompt_logits(name); });
    if (!o.Get("threads").IsUndefined()) {
      request.threads.clear();
      for (const std::int64_t t : integer_items(o.Get("threads"), w + "threads", call)) {
        if (t < 0 || t > 1024) {
          throw Napi::RangeError::New(env, w + "threads: " + std::to_string(t) + " is not in 0 ... 1024 (0: every core)");
        }
        request.threads.push_back(static_cast<int>(t));
      }
    }
    if (!o.Get("together").IsUndefined()) {
      if (!o.Get("together").IsBoolean()) throw Napi::TypeError::New(env, w + "together must be a boolean");
      request.together = o.Get("together").As<Napi::Boolean>().Value();
    }
    const std::vector<std::string> names = o.Get("policies").IsUndefined()
                                               ? std::vector<std::string>{"h2o", "scissorhands", "snapkv", "sliding-window"}
                                               : model_policy_names(o.Get("policies"), w + "policies");
    const std::vector<std::int64_t> budgets =
        o.Get("budgets").IsUndefined() ? std::vector<std::int64_t>{128} : integer_items(o.Get("budgets"), w + "budgets", call);
    for (const std::string& name : names) {
      for (const std::int64_t b : budgets) request.runs.push_back({name, {}, b});
    }
    return parse_json(env, kvevict::decode_bench_json(kvevict::bench_decoder(model, text, request)));
  });
}

// stream(model, text, {policies?, budgets?, positions?, tokens?, segment?, fullCache?, recompute?,
// recomputeTokens?, kvPrecision?, kvResidual?, overrides?, granularity?}?) -> what `kvevict stream --format json` prints:
// the library's stream_json, parsed (kvevict/model/evaluation/stream.h).
Napi::Value Stream(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "stream: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "stream");
    const Napi::Object o = options_object(info[2], "stream");
    check_known_options(o, {"policies", "budgets", "positions", "tokens", "segment", "fullCache", "recompute",
                            "recomputeTokens", "kvPrecision", "kvResidual", "overrides", "granularity"},
                        "stream");
    const std::string w = "stream: options.";
    // policies: 'default' (the default), 'none' or null (no policy), 'a,b:key=value' or an array of items.
    std::string policies = "default";
    const Napi::Value p = o.Get("policies");
    if (p.IsNull()) {
      policies = "none";
    } else if (!p.IsUndefined()) {
      policies.clear();
      for (const std::string& item : string_items(p, w + "policies")) policies += (policies.empty() ? "" : ",") + item;
    }
    const std::vector<std::int64_t> budgets = o.Get("budgets").IsUndefined()
                                                  ? std::vector<std::int64_t>{256, 512}
                                                  : integer_items(o.Get("budgets"), w + "budgets", call);
    kvevict::StreamRequest request;
    const kvevict::ParamMap overrides = overrides_of(o, "stream");
    if (policies != "none") request.specs = kvevict::stream_specs(policies, budgets, overrides);
    const Napi::Value positions = o.Get("positions");
    if (!positions.IsUndefined()) {
      request.positions.clear();
      if (positions.IsString()) {
        for (const std::string& item : kvevict::split_list(positions.As<Napi::String>().Utf8Value(), w + "positions")) {
          request.positions.push_back(position_mode_of(Napi::String::New(env, item), w + "positions"));
        }
      } else if (positions.IsArray()) {
        const auto array = positions.As<Napi::Array>();
        for (std::uint32_t i = 0; i < array.Length(); ++i) {
          request.positions.push_back(position_mode_of(array.Get(i), w + "positions[" + std::to_string(i) + "]"));
        }
        if (request.positions.empty()) {
          throw Napi::TypeError::New(env, w + "positions is empty (give 'original', 'cache' or both)");
        }
      } else {
        throw Napi::TypeError::New(env, w + "positions must be a string or an array of strings, got " +
                                            type_name(positions));
      }
    }
    auto u32_or = [&](const char* key, const std::string& rule) -> std::uint32_t {
      const Napi::Value v = o.Get(key);
      return v.IsUndefined() ? 0 : to_u32(v, w + key, rule);
    };
    request.tokens = u32_or("tokens", "must be at least 0 (0 = the whole text)");
    request.segment = u32_or("segment", "must be at least 0 (0 = the model's context)");
    request.recompute_window = u32_or("recompute", "must be at least 0 (0 = not run)");
    request.recompute_tokens = u32_or("recomputeTokens", "must be at least 0 (the stream's first N tokens)");
    const Napi::Value full = o.Get("fullCache");
    if (!full.IsUndefined()) {
      if (!full.IsBoolean()) throw Napi::TypeError::New(env, w + "fullCache must be a boolean, got " + type_name(full));
      request.full_cache = full.As<Napi::Boolean>().Value();
    }
    const kvevict::ModelRunOptions run = model_options(o, "stream");
    return parse_json(env, kvevict::stream_json(kvevict::stream_perplexity(*model, text, request, run),
                                                {"stream", model->path()}));
  });
}

// choose(model, text, {budget?, policies?, minutes?, windows?, samples?, granularity?}?) -> what `kvevict choose
// --format json` prints: the library's choose_json, parsed (kvevict/model/evaluation/choose.h).
Napi::Value Choose(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const auto& model = model_of(info[0], "choose: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "choose");
    const Napi::Object o = options_object(info[2], "choose");
    check_known_options(o, {"budget", "policies", "minutes", "windows", "samples", "granularity"}, "choose");
    const std::string w = "choose: options.";
    kvevict::ChooseRequest request;
    if (!o.Get("budget").IsUndefined()) {
      request.budget = to_integer(o.Get("budget"), w + "budget");
      call.negative = request.budget < 0;
    }
    // Omitted or null: every policy the granularity can run, as the tool without --policies.
    if (!absent(o.Get("policies"))) request.policies = model_policy_names(o.Get("policies"), w + "policies");
    const Napi::Value minutes = o.Get("minutes");
    if (!minutes.IsUndefined()) {
      if (!minutes.IsNumber()) {
        throw Napi::TypeError::New(env, w + "minutes must be a number, got " + type_name(minutes));
      }
      request.minutes = minutes.As<Napi::Number>().DoubleValue();  // its range: the library's, with the tool's message
    }
    // Omitted, null or 0 (the tool's spelling): planned from the probes' timings.
    const std::string planned = "must be at least 0 (omitted or 0: planned from the time)";
    if (!absent(o.Get("windows"))) request.windows = to_u32(o.Get("windows"), w + "windows", planned);
    if (!absent(o.Get("samples"))) request.samples = to_u32(o.Get("samples"), w + "samples", planned);
    // The library refuses 'layer' with the tool's message.
    if (!o.Get("granularity").IsUndefined()) {
      request.granularity.set_granularity(granularity_of(o.Get("granularity"), w + "granularity"));
    }
    // The narrowing commands name the model's path as given; the text came as
    // bytes, so it is the library's placeholder there.
    const kvevict::ChooseResult result = kvevict::choose(model, text, request, {}, model->path(), "TEXT");
    return parse_json(env, kvevict::choose_json(result, {"choose", model->path()}));
  });
}

// sinkShares(model, text, {tokens?}?) -> [{layer, first, firstFour, evenFirst, evenFirstFour}]
Napi::Value SinkShares(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const auto& model = model_of(info[0], "sinkShares: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "sinkShares");
    const Napi::Object o = options_object(info[2], "sinkShares");
    check_known_options(o, {"tokens"}, "sinkShares");
    const std::uint32_t tokens =
        o.Get("tokens").IsUndefined()
            ? 0
            : to_u32(o.Get("tokens"), "sinkShares: options.tokens", "must be at least 0 (0 = the model's context)");
    const Napi::Value parsed =
        parse_json(env, kvevict::sinks_json(kvevict::sink_shares(*model, text, tokens), {"stream", model->path()}));
    return parsed.As<Napi::Object>().Get("rows");
  });
}

// recordAttention(model, text, tokens = 0) -> {shape: [heads, N, N], data: Float32Array}
Napi::Value RecordAttention(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const auto& model = model_of(info[0], "recordAttention: model");
    const std::vector<std::uint8_t> text = text_of(info[1], "recordAttention");
    const std::uint32_t tokens =
        absent(info[2]) ? 0
                        : to_u32(info[2], "recordAttention: tokens",
                                 "must be in 2 ... " + std::to_string(model->config().context) +
                                     " (the model's context), or 0 for the whole context");
    const auto heads = kvevict::record_heads(*model, text, tokens);
    const std::size_t h = heads.size();
    const std::size_t n = heads.empty() ? 0 : heads.front()->length();
    Napi::Float32Array data = Napi::Float32Array::New(env, h * n * n);  // zeroed
    float* out = data.Data();
    for (std::size_t i = 0; i < h; ++i) {
      for (std::size_t t = 1; t < n; ++t) {
        const std::span<const float> row = heads[i]->row(static_cast<std::uint32_t>(t));
        std::copy(row.begin(), row.end(), out + (i * n + t) * n);
      }
    }
    Napi::Array shape = Napi::Array::New(env, 3);
    shape.Set(0u, Napi::Number::New(env, static_cast<double>(h)));
    shape.Set(1u, Napi::Number::New(env, static_cast<double>(n)));
    shape.Set(2u, Napi::Number::New(env, static_cast<double>(n)));
    Napi::Object result = Napi::Object::New(env);
    result.Set("shape", shape);
    result.Set("data", data);
    return result;
  });
}

// persistence({shape: [heads, N, N] | [N, N], data: Float32Array}, lags: number[])
Napi::Value Persistence(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    const Napi::Object attention = to_object(info[0], "persistence: attention");
    const Napi::Value shape_value = attention.Get("shape");
    if (!shape_value.IsArray()) {
      throw Napi::TypeError::New(env, "persistence: attention.shape must be an array ([heads, N, N] or [N, N]), got " +
                                          type_name(shape_value));
    }
    const auto shape_array = shape_value.As<Napi::Array>();
    std::vector<std::int64_t> shape;
    std::string shown;
    for (std::uint32_t i = 0; i < shape_array.Length(); ++i) {
      shape.push_back(to_integer(shape_array.Get(i), "persistence: attention.shape[" + std::to_string(i) + "]"));
      shown += (i == 0 ? "" : ", ") + std::to_string(shape.back());
    }
    const std::size_t nd = shape.size();
    if ((nd != 2 && nd != 3) || shape[nd - 1] != shape[nd - 2] || shape[nd - 1] < 2 || (nd == 3 && shape[0] < 1) ||
        shape[nd - 1] > static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max())) {
      throw Napi::RangeError::New(env, "persistence: attention must be [heads, N, N] or [N, N] with N >= 2 (row t: the "
                                       "weights step t gave positions 0 ... t-1), got shape [" + shown + "]");
    }
    const Napi::Value data_value = attention.Get("data");
    if (!data_value.IsTypedArray() || data_value.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
      throw Napi::TypeError::New(env, "persistence: attention.data must be a Float32Array, got " + type_name(data_value));
    }
    const auto data = data_value.As<Napi::Float32Array>();
    const std::int64_t heads = nd == 3 ? shape[0] : 1;
    const std::int64_t n = shape[nd - 1];
    if (static_cast<double>(data.ElementLength()) != static_cast<double>(heads) * static_cast<double>(n) * static_cast<double>(n)) {
      throw Napi::RangeError::New(env, "persistence: attention.data has " + std::to_string(data.ElementLength()) +
                                           " values, the shape [" + shown + "] needs " + std::to_string(heads * n * n));
    }
    const Napi::Value lag_value = info[1];
    if (!lag_value.IsArray()) {
      throw Napi::TypeError::New(env, "persistence: lags must be an array of numbers, got " + type_name(lag_value));
    }
    const auto lag_array = lag_value.As<Napi::Array>();
    std::vector<std::uint32_t> lags;
    for (std::uint32_t i = 0; i < lag_array.Length(); ++i) {
      const std::int64_t lag = to_integer(lag_array.Get(i), "persistence: lags[" + std::to_string(i) + "]");
      // Out-of-range lags are clamped to values the core refuses with its message.
      lags.push_back(static_cast<std::uint32_t>(
          std::clamp<std::int64_t>(lag, 0, std::numeric_limits<std::uint32_t>::max())));
    }
    const float* base = data.Data();
    std::vector<std::unique_ptr<kvevict::MatrixTrace>> traces;
    std::vector<kvevict::Trace*> views;
    for (std::int64_t h = 0; h < heads; ++h) {
      traces.push_back(std::make_unique<kvevict::MatrixTrace>("head" + std::to_string(h), static_cast<std::uint32_t>(n)));
      for (std::int64_t t = 1; t < n; ++t) {
        const std::span<float> row = traces.back()->row(static_cast<std::uint32_t>(t));
        std::copy_n(base + (h * n + t) * n, t, row.begin());
      }
      views.push_back(traces.back().get());
    }
    const std::vector<kvevict::PersistenceRow> rows = kvevict::persistence(views, std::move(lags));
    Napi::Array out = Napi::Array::New(env, rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const kvevict::PersistenceRow& r = rows[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("lag", Napi::Number::New(env, r.lag));
      o.Set("important", Napi::Number::New(env, static_cast<double>(r.important)));
      o.Set("persisted", Napi::Number::New(env, static_cast<double>(r.persisted)));
      o.Set("share", Napi::Number::New(env, r.share));
      o.Set("baseRate", Napi::Number::New(env, r.base_rate));
      out.Set(static_cast<std::uint32_t>(i), o);
    }
    return out;
  });
}

Napi::Array position_array(Napi::Env env, std::span<const kvevict::Position> positions) {
  Napi::Array out = Napi::Array::New(env, positions.size());
  for (std::size_t i = 0; i < positions.size(); ++i) {
    out.Set(static_cast<std::uint32_t>(i), Napi::Number::New(env, static_cast<double>(positions[i])));
  }
  return out;
}

// prefill(policy, window: (Float32Array | number[])[], budget, params?): the
// kept positions, ascending (kvevict/core/prefill.h). Every row must have the same
// length n, the prompt's; number rows are converted to float32.
Napi::Value Prefill(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const std::string name = to_string(info[0], "prefill: policy");
    const Napi::Value window_value = info[1];
    if (!window_value.IsArray()) {
      throw Napi::TypeError::New(env, "prefill: window must be an array of rows (each a Float32Array or number[]), got " +
                                          type_name(window_value));
    }
    const auto rows_array = window_value.As<Napi::Array>();
    const std::int64_t budget = to_integer(info[2], "prefill: budget");
    if (budget < 0) call.negative = true;
    const kvevict::ParamMap params = to_params(info[3], "prefill: params", call);
    std::vector<float> flat;
    std::size_t length = 0;
    const std::uint32_t rows = rows_array.Length();
    for (std::uint32_t i = 0; i < rows; ++i) {
      const Napi::Value row = rows_array.Get(i);
      const std::string what = "prefill: window[" + std::to_string(i) + "]";
      std::size_t n = 0;
      if (row.IsTypedArray() && row.As<Napi::TypedArray>().TypedArrayType() == napi_float32_array) {
        const auto f = row.As<Napi::Float32Array>();
        n = f.ElementLength();
        flat.insert(flat.end(), f.Data(), f.Data() + n);
      } else if (row.IsArray()) {
        const auto a = row.As<Napi::Array>();
        n = a.Length();
        for (std::uint32_t j = 0; j < n; ++j) {
          const Napi::Value w = a.Get(j);
          if (!w.IsNumber()) {
            throw Napi::TypeError::New(env, what + "[" + std::to_string(j) + "] must be a number, got " + type_name(w));
          }
          flat.push_back(static_cast<float>(w.As<Napi::Number>().DoubleValue()));
        }
      } else {
        throw Napi::TypeError::New(env, what + " must be a Float32Array or a number[], got " + type_name(row));
      }
      if (i == 0) {
        length = n;
      } else if (n != length) {
        throw Napi::RangeError::New(env, what + " has " + std::to_string(n) + " weights and window[0] " +
                                             std::to_string(length) + ": every row covers the prompt's n positions");
      }
    }
    const auto kept = kvevict::prefill(name, params, budget, {flat, rows, length});
    return position_array(env, kept);
  });
}


Napi::Float32Array float_array(Napi::Env env, std::span<const float> w) {
  Napi::Float32Array out = Napi::Float32Array::New(env, w.size());
  if (!w.empty()) std::memcpy(out.Data(), w.data(), w.size_bytes());
  return out;
}

// Sequences on one block pool (kvevict/model/serving/batch.h).
class BatchWrap : public Napi::ObjectWrap<BatchWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeBatch",
                       {InstanceMethod<&BatchWrap::Join>("join"), InstanceMethod<&BatchWrap::Step>("step"),
                        InstanceMethod<&BatchWrap::StepAll>("stepAll"), InstanceMethod<&BatchWrap::Leave>("leave"),
                        InstanceMethod<&BatchWrap::Held>("held"),
                        InstanceMethod<&BatchWrap::PoolStats>("poolStats"),
                        InstanceAccessor<&BatchWrap::Sequences>("sequences")});
  }

  // new NativeBatch(model, {poolBlocks, capacity = 0, blockSize = 16, sharePrefix = true, positions = 'original'})
  explicit BatchWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<BatchWrap>(info) {
    guard(info.Env(), [&](Call&) {
      const auto& model = model_of(info[0], "Batch: model");
      const Napi::Object o = to_object(info[1], "Batch: options");
      kvevict::BatchOptions options;
      const Napi::Value pool = o.Get("poolBlocks");
      if (pool.IsUndefined()) throw Napi::TypeError::New(info.Env(), "Batch: options.poolBlocks is required");
      options.pool_blocks = to_u32(pool, "Batch: options.poolBlocks", "must be at least 1");
      if (!o.Get("capacity").IsUndefined()) {
        options.capacity = to_u32(o.Get("capacity"), "Batch: options.capacity", "must be at least 0 (0 = the context)");
      }
      if (!o.Get("blockSize").IsUndefined()) {
        options.block_size = to_u32(o.Get("blockSize"), "Batch: options.blockSize", "must be at least 1");
      }
      const Napi::Value share = o.Get("sharePrefix");
      if (!share.IsUndefined()) {
        if (!share.IsBoolean()) {
          throw Napi::TypeError::New(info.Env(), "Batch: options.sharePrefix must be a boolean, got " + type_name(share));
        }
        options.share_prefix = share.As<Napi::Boolean>().Value();
      }
      if (!o.Get("positions").IsUndefined()) {
        options.positions = position_mode_of(o.Get("positions"), "Batch: options.positions");
      }
      batch_ = std::make_unique<kvevict::Batch>(model, options);
    });
  }

 private:
  kvevict::SequenceId id_of(const Napi::Value& v, const std::string& what) const {
    const std::int64_t id = to_integer(v, what + ": id");
    if (id < 0) throw Napi::RangeError::New(v.Env(), what + ": id (" + std::to_string(id) + ") must be at least 0");
    return static_cast<kvevict::SequenceId>(id);
  }

  // join(policy = null, budget?, params?, mode = 'token') -> id
  Napi::Value Join(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call& call) -> Napi::Value {
      const std::string mode = absent(info[3]) ? "token" : to_string(info[3], "Batch.join: mode");
      if (mode != "token" && mode != "block") {
        throw Napi::RangeError::New(info.Env(), "Batch.join: mode must be 'token' or 'block', got '" + mode + "'");
      }
      if (absent(info[0])) {
        if (mode == "block") throw Napi::RangeError::New(info.Env(), "Batch.join: mode 'block' needs a policy");
        return Napi::Number::New(info.Env(), static_cast<double>(batch_->join()));
      }
      const Napi::Value none = info.Env().Undefined();  // null: as if not given
      const kvevict::RunSpec spec =
          spec_of(info[0], absent(info[1]) ? none : info[1], absent(info[2]) ? none : info[2], "Batch.join", call);
      kvevict::PagedOptions paged;
      if (mode == "block") paged.block_size = batch_->pool().block_size();
      return Napi::Number::New(info.Env(), static_cast<double>(batch_->join(&spec, paged)));
    });
  }

  // step(id, token) -> the next byte's logits, a new Float32Array
  Napi::Value Step(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      const kvevict::SequenceId id = id_of(info[0], "Batch.step");
      const std::int64_t token = to_integer(info[1], "Batch.step: token");
      const std::int64_t top = std::int64_t{batch_->config().vocab} - 1;
      if (token < 0 || token > top) {
        throw Napi::RangeError::New(info.Env(), "Batch.step: token (" + std::to_string(token) + ") must be in 0 ... " +
                                                    std::to_string(top) + " (the model's vocabulary)");
      }
      return float_array(info.Env(), batch_->step(id, static_cast<kvevict::Token>(token)));
    });
  }

  // stepAll(ids, tokens) -> one Float32Array of logits per listed sequence, each equal to what step(id,
  // token) returns, all views of one buffer: a tick in one call. Every id and token is checked before
  // any sequence steps; a step that fails throws as step() does, after the ones before it have stepped.
  Napi::Value StepAll(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    return guard(env, [&](Call&) -> Napi::Value {
      const auto items = [&](const Napi::Value& v, const std::string& what) {
        if (!v.IsArray()) throw Napi::TypeError::New(env, "Batch.stepAll: " + what + " must be an array of numbers, got " + type_name(v));
        const auto array = v.As<Napi::Array>();
        std::vector<std::int64_t> out(array.Length());
        for (std::uint32_t i = 0; i < array.Length(); ++i) {
          out[i] = to_integer(array.Get(i), "Batch.stepAll: " + what + "[" + std::to_string(i) + "]");
        }
        return out;
      };
      const std::vector<std::int64_t> ids = items(info[0], "ids");
      const std::vector<std::int64_t> tokens = items(info[1], "tokens");
      if (ids.size() != tokens.size()) {
        throw Napi::RangeError::New(env, "Batch.stepAll: ids has " + std::to_string(ids.size()) + " items and tokens " +
                                             std::to_string(tokens.size()) + ": one token per listed sequence");
      }
      const std::int64_t top = std::int64_t{batch_->config().vocab} - 1;
      std::vector<kvevict::SequenceId> seqs;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        std::string at = "[";  // built in steps: "[" + to_string(i) trips gcc 12's -Wrestrict
        at += std::to_string(i);
        at += ']';
        if (ids[i] < 0) {
          throw Napi::RangeError::New(env, "Batch.stepAll: ids" + at + " (" + std::to_string(ids[i]) + ") must be at least 0");
        }
        const auto id = static_cast<kvevict::SequenceId>(ids[i]);
        if (std::find(seqs.begin(), seqs.end(), id) != seqs.end()) {
          throw Napi::RangeError::New(env, "Batch.stepAll: ids: sequence " + std::to_string(id) +
                                               " is listed twice (a call steps each once)");
        }
        (void)batch_->decoder(id);  // an id not in the batch: the library's error, before any step
        if (tokens[i] < 0 || tokens[i] > top) {
          throw Napi::RangeError::New(env, "Batch.stepAll: tokens" + at + " (" + std::to_string(tokens[i]) +
                                               ") must be in 0 ... " + std::to_string(top) + " (the model's vocabulary)");
        }
        seqs.push_back(id);
      }
      const std::size_t vocab = batch_->config().vocab;
      Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, seqs.size() * vocab * sizeof(float));
      auto* data = static_cast<float*>(buffer.Data());
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        const std::span<const float> logits = batch_->step(seqs[i], static_cast<kvevict::Token>(tokens[i]));
        std::copy(logits.begin(), logits.end(), data + i * vocab);
      }
      Napi::Array out = Napi::Array::New(env, seqs.size());
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        out.Set(static_cast<std::uint32_t>(i), Napi::Float32Array::New(env, vocab, buffer, i * vocab * sizeof(float)));
      }
      return out;
    });
  }

  Napi::Value Leave(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      batch_->leave(id_of(info[0], "Batch.leave"));
      return info.Env().Undefined();
    });
  }

  // held(id, cache) -> positions, ascending
  Napi::Value Held(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      const kvevict::Decoder& d = batch_->decoder(id_of(info[0], "Batch.held"));
      const std::int64_t h = to_integer(info[1], "Batch.held: cache");
      if (h < 0 || h >= static_cast<std::int64_t>(d.config().head_count())) {
        throw Napi::RangeError::New(info.Env(), "Batch.held: cache (" + std::to_string(h) + ") must be in 0 ... " +
                                                    std::to_string(d.config().head_count() - 1));
      }
      const std::span<const kvevict::Position> held = d.held(static_cast<std::uint32_t>(h));
      Napi::Array out = Napi::Array::New(info.Env(), held.size());
      for (std::size_t i = 0; i < held.size(); ++i) {
        out.Set(static_cast<std::uint32_t>(i), Napi::Number::New(info.Env(), static_cast<double>(held[i])));
      }
      return out;
    });
  }

  Napi::Value PoolStats(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const kvevict::BlockPool& pool = batch_->pool();
    const kvevict::PoolStats& s = pool.stats();
    Napi::Object out = Napi::Object::New(env);
    auto put = [&](const char* key, std::uint64_t v) { out.Set(key, Napi::Number::New(env, static_cast<double>(v))); };
    put("blocks", s.blocks);
    put("freeBlocks", pool.free_blocks());
    put("inUse", s.in_use);
    put("peakInUse", s.peak_in_use);
    put("references", s.references);
    put("peakSaved", s.peak_saved);
    put("shared", s.shared);
    put("copies", s.copies);
    return out;
  }

  Napi::Value Sequences(const Napi::CallbackInfo& info) {
    const std::vector<kvevict::SequenceId> ids = batch_->sequences();
    Napi::Array out = Napi::Array::New(info.Env(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      out.Set(static_cast<std::uint32_t>(i), Napi::Number::New(info.Env(), static_cast<double>(ids[i])));
    }
    return out;
  }

  std::unique_ptr<kvevict::Batch> batch_;
};

// One sequence through a model, token by token. Holds a reference to every
// policy it drives and marks each as driven (through a token that dies with
// the decoder), so a policy serves one head of one decoder at a time.
class DecoderWrap : public Napi::ObjectWrap<DecoderWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeDecoder",
                       {InstanceMethod<&DecoderWrap::Step>("step"),
                        InstanceMethod<&DecoderWrap::SetPolicy>("setPolicy"),
                        InstanceMethod<&DecoderWrap::PolicyOf>("policy"),
                        InstanceMethod<&DecoderWrap::Reset>("reset"),
                        InstanceMethod<&DecoderWrap::Held>("held"),
                        InstanceMethod<&DecoderWrap::Attended>("attended"),
                        InstanceMethod<&DecoderWrap::Attention>("attention"),
                        InstanceAccessor<&DecoderWrap::Position>("position"),
                        InstanceAccessor<&DecoderWrap::Evicted>("evicted"),
                        InstanceAccessor<&DecoderWrap::Capacity>("capacity"),
                        InstanceAccessor<&DecoderWrap::HeadCount>("headCount")});
  }

  // new NativeDecoder(model, capacity = 0, {positions = 'original'}?), or
  // new NativeDecoder(model, {capacity = 0, positions = 'original'})
  explicit DecoderWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DecoderWrap>(info) {
    guard(info.Env(), [&](Call&) {
      const auto& model = model_of(info[0], "Decoder: model");
      const std::string rule = "must be at least 0 (0 = the model's context)";
      kvevict::DecoderOptions options;
      // (model, {capacity?, positions?}) or (model, capacity?, {positions?}?)
      const bool object_form =
          info[1].IsObject() && !info[1].IsArray() && !info[1].IsFunction() && !info[1].IsTypedArray();
      if (object_form && !info[2].IsUndefined()) {
        throw Napi::TypeError::New(info.Env(), "Decoder: give (model, capacity?, {positions}?) or "
                                               "(model, {capacity?, positions?})");
      }
      if (!object_form && !absent(info[1])) options.capacity = to_u32(info[1], "Decoder: capacity", rule);
      const Napi::Value rest = object_form ? info[1] : info[2];
      if (!absent(rest)) {
        const Napi::Object o = to_object(rest, "Decoder: options");
        if (object_form) {
          check_known_options(o, {"capacity", "positions"}, "Decoder");
          const Napi::Value c = o.Get("capacity");
          if (!c.IsUndefined()) options.capacity = to_u32(c, "Decoder: options.capacity", rule);
        } else {
          check_known_options(o, {"positions"}, "Decoder");
        }
        if (!o.Get("positions").IsUndefined()) {
          options.positions = position_mode_of(o.Get("positions"), "Decoder: options.positions");
        }
      }
      decoder_ = std::make_unique<kvevict::Decoder>(model, options);
      capacity_ = options.capacity == 0 ? model->config().context : options.capacity;
      policies_.resize(model->config().head_count());
      drivers_.assign(model->config().head_count(), nullptr);
    });
  }

 private:
  std::uint32_t head_count() const noexcept { return decoder_->config().head_count(); }

  std::uint32_t head_of(const Napi::Value& v, const std::string& what) const {
    const std::int64_t h = to_integer(v, what + ": head");
    if (h < 0 || h >= static_cast<std::int64_t>(head_count())) {
      throw Napi::RangeError::New(v.Env(), what + ": head (" + std::to_string(h) + ") must be in 0 ... " +
                                               std::to_string(head_count() - 1) + " (layer * kvHeads + KV head)");
    }
    return static_cast<std::uint32_t>(h);
  }

  void release(std::uint32_t h) {
    if (drivers_[h] != nullptr && drivers_[h]->driver() == token_.get()) drivers_[h]->set_driver(nullptr, 0);
    drivers_[h] = nullptr;
    policies_[h].Reset();
  }

  // step(token) -> the next byte's logits, a new Float32Array
  Napi::Value Step(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    return guard(env, [&](Call&) -> Napi::Value {
      const std::int64_t token = to_integer(info[0], "step: token");
      const std::int64_t top = std::int64_t{decoder_->config().vocab} - 1;
      if (token < 0 || token > top) {
        throw Napi::RangeError::New(env, "step: token (" + std::to_string(token) + ") must be in 0 ... " +
                                             std::to_string(top) + " (the model's vocabulary)");
      }
      return float_array(env, decoder_->step(static_cast<kvevict::Token>(token)));
    });
  }

  // setPolicy(head, policy | null, budget?)
  Napi::Value SetPolicy(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
      const std::uint32_t h = head_of(info[0], "setPolicy");
      if (absent(info[1])) {
        decoder_->set_policy(h, nullptr, 0);  // refused after the first token
        release(h);
        return;
      }
      PolicyWrap* p = policy_wrap(info[1]);
      if (p == nullptr) {
        throw Napi::TypeError::New(env, "setPolicy: policy must be a Policy or null, got " + type_name(info[1]));
      }
      std::int64_t budget = 512;
      for (const auto& [key, value] : p->info().effective(p->given())) {
        if (key == "budget") budget = value;
      }
      if (!absent(info[2])) {
        budget = to_integer(info[2], "setPolicy: budget");
        call.negative = budget < 0;
      }
      if (p->driver() != nullptr && (p->driver() != token_.get() || p->driver_head() != h)) {
        throw make_error(env, Kind::kContract,
                         p->info().title + ": this policy already serves head " + std::to_string(p->driver_head()) +
                             (p->driver() == token_.get() ? "" : " of another Decoder") +
                             ": give each head its own policy");
      }
      decoder_->set_policy(h, &p->core(), budget);  // may refuse; nothing changed then
      release(h);
      policies_[h] = Napi::Persistent(info[1].As<Napi::Object>());
      drivers_[h] = p;
      p->set_driver(token_, h);
    });
    return env.Undefined();
  }

  Napi::Value PolicyOf(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      const std::uint32_t h = head_of(info[0], "policy");
      return policies_[h].IsEmpty() ? info.Env().Null() : policies_[h].Value();
    });
  }

  // Back to an empty cache, every policy detached (give new ones).
  Napi::Value Reset(const Napi::CallbackInfo& info) {
    guard(info.Env(), [&](Call&) {
      decoder_->reset();
      for (std::uint32_t h = 0; h < head_count(); ++h) {
        decoder_->set_policy(h, nullptr, 0);
        release(h);
      }
    });
    return info.Env().Undefined();
  }

  Napi::Value Held(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      return position_array(info.Env(), decoder_->held(head_of(info[0], "held")));
    });
  }
  Napi::Value Attended(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      return position_array(info.Env(), decoder_->attended(head_of(info[0], "attended")));
    });
  }
  Napi::Value Attention(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&](Call&) -> Napi::Value {
      return float_array(info.Env(), decoder_->attention(head_of(info[0], "attention")));
    });
  }
  Napi::Value Position(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), decoder_->position()); }
  Napi::Value Evicted(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(decoder_->evicted()));
  }
  Napi::Value Capacity(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), capacity_); }
  Napi::Value HeadCount(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), head_count()); }

  std::unique_ptr<kvevict::Decoder> decoder_;
  std::uint32_t capacity_ = 0;
  std::vector<Napi::ObjectReference> policies_;  // per head; empty: none
  std::vector<PolicyWrap*> drivers_;             // the native side of policies_ (alive while referenced)
  std::shared_ptr<char> token_ = std::make_shared<char>('\0');  // marks the policies this decoder drives
};

// ---- signals (kvevict/core/attention.h) ---------------------------------------------

// A Float32Array (read in place) or number[] (converted into `scratch`), not null.
std::span<const float> floats_arg(Napi::Env env, const Napi::Value& v, std::vector<float>& scratch, const std::string& what) {
  if (absent(v)) throw Napi::TypeError::New(env, what + " must be a Float32Array or an array of numbers, got " + type_name(v));
  return *attention_arg(env, v, scratch, what);
}

// attentionFromKeys(queries, keys, headDim, scale?) -> Float32Array of n weights: queries groups x headDim
// floats (head-major, rotated), keys n x headDim (row-major); scale undefined: 1/sqrt(headDim).
Napi::Value AttentionFromKeys(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    std::vector<float> q_scratch;
    std::vector<float> k_scratch;
    const std::span<const float> queries = floats_arg(env, info[0], q_scratch, "attentionFromKeys: queries");
    const std::span<const float> keys = floats_arg(env, info[1], k_scratch, "attentionFromKeys: keys");
    const std::int64_t head_dim = to_integer(info[2], "attentionFromKeys: headDim");
    if (head_dim < 1 || head_dim > 1 << 20) {
      throw Napi::RangeError::New(env, "attentionFromKeys: headDim (" + std::to_string(head_dim) + ") must be in 1 ... 1048576");
    }
    const auto d = static_cast<std::size_t>(head_dim);
    if (queries.empty() || queries.size() % d != 0) {
      throw Napi::RangeError::New(env, "attentionFromKeys: queries has " + std::to_string(queries.size()) +
                                           " floats, not a whole number (at least 1) of heads of headDim " + std::to_string(d));
    }
    if (keys.size() % d != 0) {
      throw Napi::RangeError::New(env, "attentionFromKeys: keys has " + std::to_string(keys.size()) +
                                           " floats, not a whole number of keys of headDim " + std::to_string(d));
    }
    float scale = 1.0F / std::sqrt(static_cast<float>(d));
    if (!absent(info[3])) {
      if (!info[3].IsNumber()) throw Napi::TypeError::New(env, "attentionFromKeys: scale must be a number, got " + type_name(info[3]));
      const double s = info[3].As<Napi::Number>().DoubleValue();
      if (!std::isfinite(s)) throw Napi::RangeError::New(env, "attentionFromKeys: scale must be finite, got " + info[3].ToString().Utf8Value());
      scale = static_cast<float>(s);
    }
    const std::size_t n = keys.size() / d;
    Napi::Float32Array out = Napi::Float32Array::New(env, n);
    std::vector<float> scratch(n);
    kvevict::attention_from_keys(queries, queries.size() / d, keys, n, d, scale, {out.Data(), n}, scratch);
    return out;
  });
}

// ropeNeox(x, pos, base = 10000) -> a new Float32Array: x (headDim floats, even) rotated to `pos`.
Napi::Value RopeNeox(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call&) -> Napi::Value {
    std::vector<float> scratch;
    const std::span<const float> x = floats_arg(env, info[0], scratch, "ropeNeox: x");
    if (x.size() % 2 != 0) {
      throw Napi::RangeError::New(env, "ropeNeox: x has " + std::to_string(x.size()) +
                                           " floats: headDim must be even (NeoX pairs i with i + headDim/2)");
    }
    const std::int64_t pos = to_integer(info[1], "ropeNeox: pos");
    double base = 10000.0;
    if (!info[2].IsUndefined()) {
      if (!info[2].IsNumber()) throw Napi::TypeError::New(env, "ropeNeox: base must be a number, got " + type_name(info[2]));
      base = info[2].As<Napi::Number>().DoubleValue();
      if (!(base > 0.0) || !std::isfinite(base)) {
        throw Napi::RangeError::New(env, "ropeNeox: base must be a positive finite number (the RoPE base), got " +
                                             info[2].ToString().Utf8Value());
      }
    }
    Napi::Float32Array out = Napi::Float32Array::New(env, x.size());
    std::copy(x.begin(), x.end(), out.Data());
    kvevict::rope_neox({out.Data(), x.size()}, pos, base);
    return out;
  });
}

// setErrorClasses({KvevictError, ParameterError, ContractError, InputError})
Napi::Value SetErrorClasses(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  const Napi::Object classes = to_object(info[0], "error classes");
  auto* data = env.GetInstanceData<AddonData>();
  auto take = [&](Napi::FunctionReference& slot, const char* key) {
    const Napi::Value v = classes.Get(key);
    if (!v.IsFunction()) throw Napi::TypeError::New(env, std::string(key) + " must be a class");
    slot = Napi::Persistent(v.As<Napi::Function>());
  };
  take(data->base_error, "KvevictError");
  take(data->parameter_error, "ParameterError");
  take(data->contract_error, "ContractError");
  take(data->input_error, "InputError");
  return env.Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData(data);
  const Napi::Function policy = PolicyWrap::Define(env);
  data->policy_class = Napi::Persistent(policy);
  exports.Set("Policy", policy);
  const Napi::Function model = ModelWrap::Define(env);
  data->model_class = Napi::Persistent(model);
  exports.Set("Model", model);
  exports.Set("Decoder", DecoderWrap::Define(env));
  exports.Set("Batch", BatchWrap::Define(env));
  exports.Set("perplexity", Napi::Function::New<Perplexity>(env, "perplexity"));
  exports.Set("serveBench", Napi::Function::New<ServeBench>(env, "serveBench"));
  exports.Set("compareModel", Napi::Function::New<CompareModel>(env, "compareModel"));
  exports.Set("sweepModel", Napi::Function::New<SweepModel>(env, "sweepModel"));
  exports.Set("tasks", Napi::Function::New<Tasks>(env, "tasks"));
  exports.Set("benchModel", Napi::Function::New<BenchModel>(env, "benchModel"));
  exports.Set("stream", Napi::Function::New<Stream>(env, "stream"));
  exports.Set("choose", Napi::Function::New<Choose>(env, "choose"));
  exports.Set("sinkShares", Napi::Function::New<SinkShares>(env, "sinkShares"));
  exports.Set("attentionFromKeys", Napi::Function::New<AttentionFromKeys>(env, "attentionFromKeys"));
  exports.Set("ropeNeox", Napi::Function::New<RopeNeox>(env, "ropeNeox"));
  exports.Set("recordAttention", Napi::Function::New<RecordAttention>(env, "recordAttention"));
  exports.Set("persistence", Napi::Function::New<Persistence>(env, "persistence"));
  exports.Set("prefill", Napi::Function::New<Prefill>(env, "prefill"));
  exports.Set("Trace", TraceWrap::Define(env));
  exports.Set("BlockEvictor", BlockEvictorWrap::Define(env));
  exports.Set("LayerBudget", LayerBudgetWrap::Define(env));
  exports.Set("policies", Napi::Function::New<Policies>(env, "policies"));
  exports.Set("simd", Napi::Function::New<Simd>(env, "simd"));
  exports.Set("selectSimd", Napi::Function::New<SelectSimd>(env, "selectSimd"));
  exports.Set("pyramidBudget", Napi::Function::New<PyramidBudget>(env, "pyramidBudget"));
  exports.Set("traceHash", Napi::Function::New<TraceHash>(env, "traceHash"));
  exports.Set("run", Napi::Function::New<Run>(env, "run"));
  exports.Set("compare", Napi::Function::New<Compare>(env, "compare"));
  // The schema as `kvevict schema` prints it (index.js parses it once).
  exports.Set("rowSchemaJson", Napi::String::New(env, kvevict::result_schema_json(-1)));
  exports.Set("runVectors", Napi::Function::New<RunVectors>(env, "runVectors"));
  exports.Set("setErrorClasses", Napi::Function::New<SetErrorClasses>(env, "setErrorClasses"));
  return exports;
}

}  // namespace

NODE_API_MODULE(kvevict, Init)
