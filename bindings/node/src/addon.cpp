// The Node.js binding: an N-API addon over the C++ library. Every policy is
// built through the registry (find_policy(name).make(params)), so whatever the
// registry holds is reachable from JavaScript. index.js wraps this module in
// the public API (one class per policy, generators, JSON.parse of results).
//
// Errors: every entry point runs inside guard(), so no C++ exception reaches
// N-API. Wrong JavaScript types become TypeError; numbers that are not integers
// (fractions, NaN, infinities, beyond 2^53) become RangeError with the
// binding's own message; everything the core refuses keeps the core's message
// unchanged and becomes ParameterError / ContractError / InputError (classes
// defined in index.js) -- except that the refusal of a negative budget or
// position is a RangeError, still with the core's message.
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvevict/errors.h"
#include "kvevict/evaluate.h"
#include "kvevict/json.h"
#include "kvevict/params.h"
#include "kvevict/policies/pyramidkv.h"
#include "kvevict/registry.h"
#include "kvevict/trace.h"
#include "kvevict/vectors.h"

namespace {

// Per-environment state (the addon may be loaded by several worker threads).
struct AddonData {
  Napi::FunctionReference base_error;  // KvevictError
  Napi::FunctionReference parameter_error;
  Napi::FunctionReference contract_error;
  Napi::FunctionReference input_error;
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

// ---- Policy ----------------------------------------------------------------------

class PolicyWrap : public Napi::ObjectWrap<PolicyWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativePolicy",
                       {InstanceMethod<&PolicyWrap::OnDecodeStep>("onDecodeStep"),
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

 private:
  // onDecodeStep(pos, attn: Float32Array | number[] | null | undefined)
  Napi::Value OnDecodeStep(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    guard(env, [&](Call& call) {
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

  Napi::Value Evict(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    return guard(env, [&](Call& call) -> Napi::Value {
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
  std::int64_t external_ = 0;   // bytes reported to V8 as external memory
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

kvevict::EvaluateOptions evaluate_options(const Napi::Object& options, const std::string& what) {
  kvevict::EvaluateOptions out;
  const Napi::Value trace = options.Get("trace");
  if (!trace.IsUndefined()) out.trace = to_string(trace, what + ".trace");
  out.steps = optional_integer(options, "steps", what);
  return out;
}

// runJson({policy, budget?, params?, trace?, steps?}) -> kvevict::run_json text
Napi::Value RunJson(const Napi::CallbackInfo& info) {
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
    const std::vector<kvevict::RunRow> rows = kvevict::evaluate({{name, params, budget}}, evaluate);
    return Napi::String::New(env, kvevict::run_json(rows.front(), -1));
  });
}

// compareJson({policies?, budgets?, overrides?, trace?, steps?}) -> kvevict::rows_json text
Napi::Value CompareJson(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  return guard(env, [&](Call& call) -> Napi::Value {
    const Napi::Object options =
        info[0].IsUndefined() ? Napi::Object::New(env) : to_object(info[0], "compare: options");
    kvevict::CompareRequest request;
    const Napi::Value names = options.Get("policies");
    if (names.IsString()) {
      request.policies = kvevict::parse_policy_list(names.As<Napi::String>().Utf8Value());
    } else if (names.IsArray()) {
      const auto array = names.As<Napi::Array>();
      for (std::uint32_t i = 0; i < array.Length(); ++i) {
        const std::string name = to_string(array.Get(i), "compare: options.policies[" + std::to_string(i) + "]");
        request.policies.push_back(kvevict::find_policy(name).name);
      }
      if (request.policies.empty()) {
        throw Napi::TypeError::New(env, "compare: options.policies is empty (omit it, or give \"all\", for every policy)");
      }
    } else if (!names.IsUndefined()) {
      throw Napi::TypeError::New(env, "compare: options.policies must be an array of names or a string, got " + type_name(names));
    }
    const Napi::Value budgets = options.Get("budgets");
    if (!budgets.IsUndefined()) {
      if (!budgets.IsArray()) {
        throw Napi::TypeError::New(env, "compare: options.budgets must be an array of numbers, got " + type_name(budgets));
      }
      const auto array = budgets.As<Napi::Array>();
      request.budgets.clear();
      for (std::uint32_t i = 0; i < array.Length(); ++i) {
        const std::int64_t b = to_integer(array.Get(i), "compare: options.budgets[" + std::to_string(i) + "]");
        call.negative = call.negative || b < 0;
        request.budgets.push_back(b);
      }
    }
    const Napi::Value overrides = options.Get("overrides");
    if (!overrides.IsUndefined()) {
      const Napi::Object object = to_object(overrides, "compare: options.overrides");
      for (const std::string& key : own_keys(object)) {
        const Napi::Value value = object.Get(key);
        if (value.IsUndefined()) continue;
        const std::string what = "compare: options.overrides." + key;
        if (value.IsNumber()) {
          kvevict::set_param(request.overrides, key, to_integer(value, what));
          continue;
        }
        // {policy: {param: value}} means "policy.param".
        const Napi::Object nested = to_object(value, what);
        for (const std::string& param : own_keys(nested)) {
          const Napi::Value v = nested.Get(param);
          if (v.IsUndefined()) continue;
          kvevict::set_param(request.overrides, key + "." + param, to_integer(v, what + "." + param));
        }
      }
    }
    const kvevict::EvaluateOptions evaluate = evaluate_options(options, "compare: options");
    const std::vector<kvevict::RunRow> rows = kvevict::compare(request, evaluate);
    return Napi::String::New(env, kvevict::rows_json(rows, -1));
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
  env.SetInstanceData(new AddonData());
  exports.Set("Policy", PolicyWrap::Define(env));
  exports.Set("Trace", TraceWrap::Define(env));
  exports.Set("policies", Napi::Function::New<Policies>(env, "policies"));
  exports.Set("pyramidBudget", Napi::Function::New<PyramidBudget>(env, "pyramidBudget"));
  exports.Set("traceHash", Napi::Function::New<TraceHash>(env, "traceHash"));
  exports.Set("runJson", Napi::Function::New<RunJson>(env, "runJson"));
  exports.Set("compareJson", Napi::Function::New<CompareJson>(env, "compareJson"));
  exports.Set("runVectors", Napi::Function::New<RunVectors>(env, "runVectors"));
  exports.Set("setErrorClasses", Napi::Function::New<SetErrorClasses>(env, "setErrorClasses"));
  return exports;
}

}  // namespace

NODE_API_MODULE(kvevict, Init)
