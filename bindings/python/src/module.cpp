// kvevict._kvevict -- the compiled half of the Python binding.
//
// Everything goes through the registry (kvevict::find_policy(name).make(...)),
// so every registered policy is reachable from Python by name; the named
// classes (Scissorhands, H2O, ...) are thin subclasses defined in
// kvevict/__init__.py. Results of run() and compare() are built by walking the
// library's row schema (kvevict/eval/row_schema.h), the same walk the tool's JSON comes
// from, so the binding and the tool cannot drift apart.
//
// The real model (kvevict/model/decoder/model.h, kvevict/model/evaluation/perplexity.h): Model, Decoder and
// the evaluations over a text. Their rows come from the library's one
// description of each row (perplexity_rows.h, serve_bench.h, tasks_json,
// stream_json, decode_bench_json, choose_json), with the keys the tool prints; the
// evaluations run without the GIL on the core's OpenMP threads.
//
// Errors: kvevict::ParameterError -> ValueError, every other kvevict::Error ->
// RuntimeError, with the core's message unchanged. Arguments of the wrong type
// (a float budget, a string weight) are refused here with TypeError, before the
// core sees them.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvevict/core/attention.h"
#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/npy.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/core/params.h"
#include "kvevict/model/evaluation/choose.h"
#include "kvevict/model/evaluation/command_schema.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/perplexity_rows.h"
#include "kvevict/model/serving/batch.h"
#include "kvevict/model/serving/decode_bench.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/serving/serve_bench.h"
#include "kvevict/model/evaluation/stream.h"
#include "kvevict/model/evaluation/tasks.h"
#include "kvevict/eval/persistence.h"
#include "kvevict/core/policies/pyramidkv.h"
#include "kvevict/core/prefill.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/core/simd.h"
#include "kvevict/eval/trace.h"
#include "kvevict/eval/vectors.h"

#ifndef KVEVICT_VERSION
#define KVEVICT_VERSION "0.0.0"
#endif

namespace py = pybind11;

// Arguments are taken as plain Python objects and checked by the functions
// below (so a float budget gets "budget must be an integer", not pybind11's
// "incompatible function arguments"); these wrappers only give the generated
// signatures and help() the Python types the argument accepts.
#define KVEVICT_PY_ARG(Type, python_type)                                                  \
  namespace kvevict_py {                                                                   \
  struct Type {                                                                            \
    py::object obj;                                                                        \
  };                                                                                       \
  }                                                                                        \
  template <>                                                                              \
  struct pybind11::detail::type_caster<kvevict_py::Type> {                                 \
    PYBIND11_TYPE_CASTER(kvevict_py::Type, const_name(python_type));                       \
    bool load(handle src, bool) {                                                          \
      value.obj = reinterpret_borrow<object>(src);                                         \
      return true;                                                                         \
    }                                                                                      \
    static handle cast(const kvevict_py::Type& v, return_value_policy, handle) {           \
      return v.obj.inc_ref();                                                              \
    }                                                                                      \
  };

KVEVICT_PY_ARG(Int, "int")
KVEVICT_PY_ARG(OptionalInt, "Optional[int]")
KVEVICT_PY_ARG(Str, "str")
KVEVICT_PY_ARG(TraceId, "Union[str, os.PathLike]")
KVEVICT_PY_ARG(Attention, "Optional[numpy.typing.ArrayLike]")
KVEVICT_PY_ARG(PolicyArg, "Union[str, Policy]")
KVEVICT_PY_ARG(PolicyList, "Union[str, Sequence[str]]")
KVEVICT_PY_ARG(IntList, "Sequence[int]")
KVEVICT_PY_ARG(Overrides, "Optional[Dict[str, Union[int, Dict[str, int]]]]")
KVEVICT_PY_ARG(Paths, "Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]")
KVEVICT_PY_ARG(PathArg, "Union[str, os.PathLike]")
KVEVICT_PY_ARG(ModelArg, "Model")
KVEVICT_PY_ARG(Text, "Union[bytes, bytearray, memoryview, os.PathLike]")
KVEVICT_PY_ARG(Runs, "Optional[Sequence[Union[str, Policy, Tuple[Union[str, Policy], Optional[int]], "
                     "Tuple[Union[str, Policy], Optional[int], Dict[str, int]]]]]")
KVEVICT_PY_ARG(OptionalPolicy, "Optional[Policy]")
KVEVICT_PY_ARG(AttentionStack, "numpy.typing.ArrayLike")
#undef KVEVICT_PY_ARG

using kvevict_py::Attention;
using kvevict_py::AttentionStack;
using kvevict_py::Int;
using kvevict_py::IntList;
using kvevict_py::ModelArg;
using kvevict_py::OptionalInt;
using kvevict_py::OptionalPolicy;
using kvevict_py::Overrides;
using kvevict_py::PathArg;
using kvevict_py::Paths;
using kvevict_py::PolicyArg;
using kvevict_py::PolicyList;
using kvevict_py::Runs;
using kvevict_py::Str;
using kvevict_py::Text;
using kvevict_py::TraceId;

namespace {

// ---- argument conversion ------------------------------------------------------

std::string type_name(py::handle h) {
  return py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>();
}

// repr() of a value for a message, cut short so a huge list cannot flood it.
std::string short_repr(py::handle h) {
  std::string r = py::repr(h).cast<std::string>();
  constexpr std::size_t kMax = 60;
  if (r.size() > kMax) r = r.substr(0, kMax - 3) + "...";
  return r;
}

// A Python int (or anything with __index__, such as numpy.int64) as int64.
// bool, float (even 3.0), str and None are refused with TypeError; an int
// outside int64 with ValueError.
std::int64_t to_int(py::handle value, const std::string& what) {
  if (py::isinstance<py::bool_>(value) || PyIndex_Check(value.ptr()) == 0) {
    throw py::type_error(what + " must be an integer, got " + type_name(value) + " (" +
                         short_repr(value) + ")");
  }
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    throw py::value_error(what + " (" + short_repr(index) + ") is out of range for a 64-bit integer");
  }
  if (x == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return static_cast<std::int64_t>(x);
}

std::optional<std::int64_t> to_optional_int(py::handle value, const std::string& what) {
  if (value.is_none()) return std::nullopt;
  return to_int(value, what);
}

// A trace id, or a path (str or os.PathLike) where the core accepts files.
std::string to_trace_id(py::handle value) {
  if (!py::isinstance<py::str>(value) && py::hasattr(value, "__fspath__")) {
    return py::module_::import("os").attr("fspath")(value).cast<std::string>();
  }
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error("trace must be a str, got " + type_name(value) + " (" + short_repr(value) + ")");
  }
  return value.cast<std::string>();
}

std::string to_str(py::handle value, const std::string& what) {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(what + " must be a str, got " + type_name(value) + " (" +
                         short_repr(value) + ")");
  }
  return value.cast<std::string>();
}

// "recent_window" -> "recentWindow"; keys without '_' are returned unchanged.
std::string camel_case(std::string_view key) {
  std::string out;
  bool upper = false;
  for (const char c : key) {
    if (c == '_') {
      upper = !out.empty();
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

// "votesOf" -> "votes_of".
std::string snake_case(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (std::isupper(static_cast<unsigned char>(c)) != 0) {
      out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

bool has_param(const kvevict::PolicyInfo& info, std::string_view key) {
  return std::any_of(info.params.begin(), info.params.end(),
                     [&](const kvevict::ParamInfo& p) { return p.name == key; });
}

bool any_policy_has_param(std::string_view key) {
  const auto all = kvevict::policies();
  return std::any_of(all.begin(), all.end(),
                     [&](const kvevict::PolicyInfo* info) { return has_param(*info, key); });
}

// The registry name of a parameter given in snake_case or camelCase. A key the
// policy does not know is returned as given, so the core's message names it
// exactly as the caller wrote it.
std::string resolve_key(const kvevict::PolicyInfo& info, const std::string& key) {
  if (has_param(info, key)) return key;
  std::string camel = camel_case(key);
  return has_param(info, camel) ? camel : key;
}

// Keyword arguments -> the registry's ParamMap (camelCase keys, int64 values).
// An unknown key is refused with the core's own ParameterError message.
kvevict::ParamMap params_of(const kvevict::PolicyInfo& info, const py::dict& given,
                            kvevict::ParamMap base = {}) {
  std::vector<std::pair<std::string, std::string>> spelled;  // registry key, as given
  for (const auto& [k, v] : given) {
    const std::string as_given = to_str(k, "a parameter name");
    const std::string key = resolve_key(info, as_given);
    if (!has_param(info, key)) {
      // The core's factory checks names before it builds anything, so this
      // throws its ParameterError ("<Title>: unknown parameter 'x' (known: ...)").
      info.make(kvevict::ParamMap{{key, 0}});
    }
    for (const auto& [seen_key, seen_as] : spelled) {
      if (seen_key == key) {
        throw py::value_error(info.title + ": parameter '" + key + "' given twice (as '" + seen_as +
                              "' and '" + as_given + "')");
      }
    }
    spelled.emplace_back(key, as_given);
    kvevict::set_param(base, key, to_int(v, as_given));
  }
  return base;
}

std::int64_t default_of(const kvevict::PolicyInfo& info, std::string_view key, std::int64_t fallback) {
  for (const kvevict::ParamInfo& p : info.params) {
    if (p.name == key) return p.default_value;
  }
  return fallback;
}

std::int64_t value_of(const kvevict::ParamMap& params, std::string_view key, std::int64_t fallback) {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  return fallback;
}

py::dict dict_of(const kvevict::ParamMap& params) {
  py::dict out;
  for (const auto& [k, v] : params) out[py::str(k)] = py::int_(v);
  return out;
}

// Queries whose C++ value is an integer come back as Python int.
bool integer_query(std::string_view name) {
  return name == "votesOf" || name == "effectiveBudget" || name == "sinkCount";
}

// ---- attention ----------------------------------------------------------------

// The weights handed to on_decode_step, kept alive for the call.
struct AttentionView {
  py::object keep;  // the array whose buffer `weights` points into
  std::span<const float> weights;
  bool copied = false;
};

// `what` names the argument: "attention", or a step's "key", "value", "queries".
[[noreturn]] void refuse_shape(const py::array& arr, py::handle original, std::string_view what) {
  std::string shape = "(";
  for (py::ssize_t d = 0; d < arr.ndim(); ++d) {
    shape += (d == 0 ? "" : ", ") + std::to_string(arr.shape(d));
  }
  shape += arr.ndim() == 1 ? ",)" : ")";
  const std::string rule = what == "attention" ? "attention must be 1-D (one weight per held position, ascending)"
                                               : std::string(what) + " must be 1-D (head-major floats)";
  throw py::value_error(rule + ", got a " + std::to_string(arr.ndim()) + "-D " + type_name(original) +
                        " of shape " + shape);
}

void check_numeric(const py::array& arr, py::handle original, std::string_view what) {
  const char kind = arr.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u') {
    const std::string subject = what == "attention" ? "attention weights" : std::string(what);
    throw py::type_error(subject + " must be real numbers, got " + type_name(original) +
                         " with dtype " + py::str(arr.dtype()).cast<std::string>());
  }
}

// A float32, C-contiguous, aligned, native-order ndarray is used in place;
// anything else (other dtypes, strided views, lists, tensors' __array__) is
// converted to a fresh float32 array first.
AttentionView attention_of(py::handle obj, std::string_view what = "attention") {
  using Float32 = py::array_t<float, py::array::c_style>;
  using Convert = py::array_t<float, py::array::c_style | py::array::forcecast>;
  constexpr int kAligned = py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  constexpr int kOwnsData = py::detail::npy_api::NPY_ARRAY_OWNDATA_;

  py::array arr;
  bool fresh = false;  // `arr` is a buffer numpy just made from `obj`
  if (py::isinstance<py::array>(obj)) {
    arr = py::reinterpret_borrow<py::array>(obj);
  } else {
    // Let numpy choose the dtype first, so strings and objects are refused
    // rather than parsed as numbers by a forced cast.
    arr = py::array::ensure(obj);
    if (!arr || arr.ndim() == 0) {
      throw py::type_error(
          std::string(what) + " must be None or a 1-D sequence of " +
          (what == "attention" ? "weights" : "floats") +
          " (a float32 numpy array is used without copying), got " + type_name(obj) + " (" + short_repr(obj) +
          ")");
    }
    fresh = (arr.flags() & kOwnsData) != 0;
  }
  if (arr.ndim() != 1) refuse_shape(arr, obj, what);
  check_numeric(arr, obj, what);
  if (Float32::check_(arr) && (arr.flags() & kAligned) != 0) {
    const auto n = static_cast<std::size_t>(arr.size());
    return {arr, {static_cast<const float*>(arr.data()), n}, fresh};
  }
  Convert converted = Convert::ensure(arr);
  if (!converted) {
    throw py::type_error(std::string(what) + " of dtype " + py::str(arr.dtype()).cast<std::string>() +
                         " could not be converted to float32");
  }
  const auto n = static_cast<std::size_t>(converted.size());
  const float* data = converted.data();
  return {std::move(converted), {data, n}, true};
}

// One step's signals (docs/signals.md), each read like the attention: a
// float32 C-contiguous array in place, anything else converted. None is not
// given (attention: absent); the views keep the buffers alive for the call.
struct StepView {
  AttentionView attention, key, value, queries;
  bool has_attention = false;

  kvevict::StepInputs inputs() const {
    kvevict::StepInputs in;
    if (has_attention) in.attention = attention.weights;
    in.key = key.weights;
    in.value = value.weights;
    in.queries = queries.weights;
    return in;
  }
};

StepView step_view_of(py::handle attention, py::handle key, py::handle value, py::handle queries) {
  StepView v;
  if (!attention.is_none()) {
    v.attention = attention_of(attention);
    v.has_attention = true;
  }
  if (!key.is_none()) v.key = attention_of(key, "key");
  if (!value.is_none()) v.value = attention_of(value, "value");
  if (!queries.is_none()) v.queries = attention_of(queries, "queries");
  return v;
}

// A Signals mask as names in bit order: ("attention",), ("key",), ().
py::tuple signal_tuple(kvevict::Signals signals) {
  static constexpr std::pair<kvevict::Signal, const char*> kNames[] = {{kvevict::kSignalAttention, "attention"},
                                                                       {kvevict::kSignalKey, "key"},
                                                                       {kvevict::kSignalValue, "value"},
                                                                       {kvevict::kSignalQueries, "queries"}};
  py::list out;
  for (const auto& [bit, name] : kNames) {
    if ((signals & bit) != 0) out.append(py::str(name));
  }
  return py::tuple(out);
}

// ---- the policy object ----------------------------------------------------------

class PyPolicy {
 public:
  PyPolicy(const kvevict::PolicyInfo& info, kvevict::ParamMap given)
      : info_(&info),
        given_(std::move(given)),
        policy_(info.make(given_)),
        effective_(info.effective(given_)) {}

  const kvevict::PolicyInfo& info() const noexcept { return *info_; }
  const kvevict::ParamMap& given() const noexcept { return given_; }
  const kvevict::ParamMap& effective() const noexcept { return effective_; }
  bool last_copied() const noexcept { return last_copied_; }
  std::uintptr_t last_address() const noexcept { return last_address_; }

  void on_decode_step(py::handle pos_obj, py::handle attn_obj) {
    refuse_if_driven("on_decode_step");
    const std::int64_t pos = to_int(pos_obj, "pos");
    if (attn_obj.is_none()) {
      last_copied_ = false;
      last_address_ = 0;
      policy_->on_decode_step(pos, std::nullopt);
      return;
    }
    const AttentionView view = attention_of(attn_obj);
    last_copied_ = view.copied;
    last_address_ = reinterpret_cast<std::uintptr_t>(view.weights.data());
    policy_->on_decode_step(pos, view.weights);
  }

  void on_step(py::handle pos_obj, py::handle attention, py::handle key, py::handle value, py::handle queries) {
    refuse_if_driven("on_step");
    const std::int64_t pos = to_int(pos_obj, "pos");
    const StepView view = step_view_of(attention, key, value, queries);
    policy_->on_step(pos, view.inputs());
    last_copied_ = view.has_attention && view.attention.copied;
    last_address_ = view.has_attention ? reinterpret_cast<std::uintptr_t>(view.attention.weights.data()) : 0;
  }

  void on_origin(py::handle key, py::handle value, py::handle queries) {
    refuse_if_driven("on_origin");
    const StepView view = step_view_of(py::none(), key, value, queries);
    policy_->on_origin(view.inputs());
  }

  kvevict::Signals signals() const noexcept { return policy_->signals(); }

  py::list evict(py::handle budget_obj) {
    refuse_if_driven("evict");
    const std::int64_t budget = to_int(budget_obj, "budget");
    std::span<const kvevict::Position> victims;
    try {
      victims = policy_->evict(budget);
    } catch (const kvevict::ContractError& e) {
      // A negative budget is a bad value, not a broken contract: ValueError,
      // with the core's message.
      if (budget < 0) throw py::value_error(e.what());
      throw;
    }
    py::list out(victims.size());
    for (std::size_t i = 0; i < victims.size(); ++i) out[i] = py::int_(victims[i]);
    return out;
  }

  // The core policy, for a Decoder to drive.
  kvevict::Policy& core() noexcept { return *policy_; }
  // The Decoder driving this policy (null: none) and the head it serves there.
  // While driven, stepping it by hand is refused: the decoder owns its steps.
  const void* driver() const noexcept { return driver_; }
  std::uint32_t driver_head() const noexcept { return driver_head_; }
  void set_driver(const void* decoder, std::uint32_t head) noexcept {
    driver_ = decoder;
    driver_head_ = head;
  }

  std::size_t kept_count() const noexcept { return policy_->kept_count(); }
  std::size_t memory_bytes() const noexcept { return policy_->memory_bytes(); }
  std::string name() const { return info_->name; }

  // The registry query for a name in camelCase ("votesOf") or snake_case.
  const kvevict::QueryInfo* find_query(const std::string& name) const {
    if (const kvevict::QueryInfo* q = info_->find_query(name)) return q;
    return info_->find_query(camel_case(name));
  }

  std::string query_list() const {
    std::string names;
    for (const auto& q : info_->queries) names += (names.empty() ? "" : ", ") + snake_case(q.name);
    return names.empty() ? "none" : names;
  }

  py::object query(const std::string& name, const py::args& args) const {
    const kvevict::QueryInfo* q = find_query(name);
    if (q == nullptr) {
      throw py::value_error(info_->name + " has no query '" + name + "' (its queries: " +
                            query_list() + ")");
    }
    const std::string method = snake_case(q->name);
    if (args.size() != q->arity) {
      throw py::type_error(method + "() takes " + std::to_string(q->arity) + " argument" +
                           (q->arity == 1 ? "" : "s") + " (" + std::to_string(args.size()) +
                           " given)");
    }
    std::vector<std::int64_t> ints;
    for (std::size_t i = 0; i < args.size(); ++i) ints.push_back(to_int(args[i], "pos"));
    const double value = q->call(*policy_, ints);
    if (integer_query(q->name)) return py::int_(static_cast<std::int64_t>(value));
    return py::float_(value);
  }

 private:
  void refuse_if_driven(const char* method) const {
    if (driver_ == nullptr) return;
    throw kvevict::ContractError(info_->title + ": " + method + "() refused: this policy is driven by a "
                                 "Decoder (head " + std::to_string(driver_head_) +
                                 "); detach it with set_policy(head, None) or reset() first");
  }

  const kvevict::PolicyInfo* info_;
  kvevict::ParamMap given_;
  std::unique_ptr<kvevict::Policy> policy_;
  kvevict::ParamMap effective_;
  bool last_copied_ = false;
  std::uintptr_t last_address_ = 0;
  const void* driver_ = nullptr;
  std::uint32_t driver_head_ = 0;
};

std::unique_ptr<PyPolicy> make_policy(const Str& name, const py::kwargs& kwargs) {
  const kvevict::PolicyInfo& info = kvevict::find_policy(to_str(name.obj, "policy name"));
  return std::make_unique<PyPolicy>(info, params_of(info, kwargs));
}

// ---- traces -------------------------------------------------------------------

class TraceIterator {
 public:
  TraceIterator(std::unique_ptr<kvevict::Trace> trace, std::uint32_t steps)
      : trace_(std::move(trace)), steps_(steps) {}

  py::array_t<float> next() {
    if (trace_->step() >= steps_) throw py::stop_iteration();
    const std::span<const float> w = trace_->next();
    // A copy: the span is reused by the following step.
    return py::array_t<float>(static_cast<py::ssize_t>(w.size()), w.data());
  }

  std::size_t remaining() const noexcept { return steps_ - trace_->step(); }
  const std::string& id() const noexcept { return trace_->id(); }
  std::uint32_t steps() const noexcept { return steps_; }
  std::uint32_t step() const noexcept { return trace_->step(); }

 private:
  std::unique_ptr<kvevict::Trace> trace_;
  std::uint32_t steps_;
};

template <class T>
py::detail::value_and_holder holder_of(py::handle self) {
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  return inst->get_value_and_holder(py::detail::get_type_info(typeid(T)), false);
}

// Whether `self`'s __init__ has run.
template <class T>
bool checked_ok(py::handle self) {
  const py::detail::value_and_holder v_h = holder_of<T>(self);
  return v_h && v_h.holder_constructed();
}

// The C++ object behind `self`. pybind11 hands methods raw, unconstructed
// storage for an instance whose __init__ never ran (Policy.__new__(Policy));
// this refuses it instead.
template <class T>
T& checked(py::handle self) {
  if (!checked_ok<T>(self)) {
    throw py::type_error(type_name(self) + " object is not initialised: its __init__ was not called");
  }
  return *holder_of<T>(self).template value_ptr<T>();
}

// ---- the real model -------------------------------------------------------------

// A loaded .kvm model (immutable; shared by the decoders built from it).
class PyModel {
 public:
  explicit PyModel(std::shared_ptr<const kvevict::Model> model) : model_(std::move(model)) {}
  const kvevict::Model& get() const noexcept { return *model_; }
  const std::shared_ptr<const kvevict::Model>& shared() const noexcept { return model_; }

 private:
  std::shared_ptr<const kvevict::Model> model_;
};

// A float32 as the Python float with the same shortest decimal form (1e-05,
// not 9.999999747378752e-06).
py::float_ shortest(float x) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc{} ? py::float_(std::stod(std::string(buf, end))) : py::float_(x);
}

py::dict config_dict(const kvevict::ModelConfig& c) {
  py::dict d;
  d["vocab"] = py::int_(c.vocab);
  d["layers"] = py::int_(c.layers);
  d["heads"] = py::int_(c.heads);
  d["kv_heads"] = py::int_(c.kv_heads);
  d["width"] = py::int_(c.width);
  d["ff"] = py::int_(c.ff);
  d["context"] = py::int_(c.context);
  d["rope_base"] = shortest(c.rope_base);
  d["norm_eps"] = shortest(c.norm_eps);
  return d;
}

// A non-negative integer that fits in 32 bits; `rule` completes the message.
std::uint32_t to_u32(py::handle value, const std::string& what, const std::string& rule) {
  const std::int64_t v = to_int(value, what);
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    throw py::value_error(what + " (" + std::to_string(v) + ") " + rule);
  }
  return static_cast<std::uint32_t>(v);
}

py::list position_list(std::span<const kvevict::Position> positions) {
  py::list out(positions.size());
  for (std::size_t i = 0; i < positions.size(); ++i) out[i] = py::int_(positions[i]);
  return out;
}

// A new float32 array holding a copy of `w`.
py::array_t<float> float_array(std::span<const float> w) {
  return py::array_t<float>(static_cast<py::ssize_t>(w.size()), w.data());
}

// One position mode (rope.h) given as a str: "original" or "cache"; anything
// else is a ValueError naming `what` and the text.
kvevict::PositionMode position_mode_of(py::handle value, const std::string& what) {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(what + " must be a str ('original' or 'cache'), got " + type_name(value) + " (" +
                         short_repr(value) + ")");
  }
  try {
    return kvevict::parse_position_mode(value.cast<std::string>());
  } catch (const kvevict::InputError& e) {
    throw py::value_error(what + ": " + e.what());
  }
}

// A str naming one of the library's choices, parsed by `parse` (whose
// ParameterError becomes ValueError, prefixed with `what`).
template <typename Parse>
auto choice_of(py::handle value, const std::string& what, const char* choices, Parse parse) {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(what + " must be a str (" + choices + "), got " + type_name(value) + " (" +
                         short_repr(value) + ")");
  }
  try {
    return parse(value.cast<std::string>());
  } catch (const kvevict::ParameterError& e) {
    throw py::value_error(what + ": " + e.what());
  }
}

// One sequence through the model. Holds a reference to every policy it
// drives (so a policy cannot be collected under it) and marks each as driven,
// so a policy serves one head of one decoder at a time.
class PyDecoder {
 public:
  PyDecoder(const std::shared_ptr<const kvevict::Model>& model, const kvevict::DecoderOptions& options)
      : decoder_(model, options),
        capacity_(options.capacity == 0 ? model->config().context : options.capacity),
        policies_(model->config().head_count()),
        drivers_(model->config().head_count(), nullptr) {}
  ~PyDecoder() {
    for (PyPolicy* p : drivers_) {
      if (p != nullptr) p->set_driver(nullptr, 0);
    }
  }
  PyDecoder(const PyDecoder&) = delete;
  PyDecoder& operator=(const PyDecoder&) = delete;

  std::uint32_t head_count() const noexcept { return decoder_.config().head_count(); }
  std::uint32_t capacity() const noexcept { return capacity_; }
  std::uint32_t position() const noexcept { return decoder_.position(); }
  std::uint64_t evicted() const noexcept { return decoder_.evicted(); }
  const kvevict::ModelConfig& config() const noexcept { return decoder_.config(); }

  std::uint32_t head_of(py::handle head) const {
    const std::int64_t h = to_int(head, "head");
    if (h < 0 || h >= static_cast<std::int64_t>(head_count())) {
      throw py::value_error("head (" + std::to_string(h) + ") must be in 0 ... " +
                            std::to_string(head_count() - 1) + " (layer * kv_heads + KV head)");
    }
    return static_cast<std::uint32_t>(h);
  }

  py::array_t<float> step(py::handle token_obj) {
    const std::int64_t token = to_int(token_obj, "token");
    const std::int64_t top = std::int64_t{decoder_.config().vocab} - 1;
    if (token < 0 || token > top) {
      throw py::value_error("token (" + std::to_string(token) + ") must be in 0 ... " + std::to_string(top) +
                            " (the model's vocabulary)");
    }
    return float_array(decoder_.step(static_cast<kvevict::Token>(token)));
  }

  void set_policy(py::handle head_obj, py::handle policy_obj, py::handle budget_obj) {
    const std::uint32_t h = head_of(head_obj);
    if (policy_obj.is_none()) {
      decoder_.set_policy(h, nullptr, 0);  // refused after the first token
      release(h);
      return;
    }
    if (!py::isinstance<PyPolicy>(policy_obj)) {
      throw py::type_error("policy must be a kvevict.Policy or None, got " + type_name(policy_obj) +
                           " (" + short_repr(policy_obj) + ")");
    }
    PyPolicy& p = checked<PyPolicy>(policy_obj);
    const std::optional<std::int64_t> b = to_optional_int(budget_obj, "budget");
    const std::int64_t budget = b ? *b : value_of(p.effective(), "budget", 512);
    if (p.driver() != nullptr && (p.driver() != this || p.driver_head() != h)) {
      throw py::value_error(p.info().title + ": this policy already serves head " +
                            std::to_string(p.driver_head()) +
                            (p.driver() == this ? "" : " of another Decoder") +
                            ": give each head its own policy");
    }
    decoder_.set_policy(h, &p.core(), budget);  // may refuse; nothing changed then
    release(h);
    policies_[h] = py::reinterpret_borrow<py::object>(policy_obj);
    drivers_[h] = &p;
    p.set_driver(this, h);
  }

  // Back to an empty cache, every policy detached (give new ones).
  void reset() {
    decoder_.reset();
    for (std::uint32_t h = 0; h < head_count(); ++h) {
      decoder_.set_policy(h, nullptr, 0);
      release(h);
    }
  }

  py::list held(py::handle head) const { return position_list(decoder_.held(head_of(head))); }
  py::list attended(py::handle head) const { return position_list(decoder_.attended(head_of(head))); }
  py::array_t<float> attention(py::handle head) const {
    return float_array(decoder_.attention(head_of(head)));
  }
  py::object policy(py::handle head) const {
    const py::object& p = policies_[head_of(head)];
    return p ? p : py::none();
  }

 private:
  void release(std::uint32_t h) {
    if (drivers_[h] != nullptr) drivers_[h]->set_driver(nullptr, 0);
    drivers_[h] = nullptr;
    policies_[h] = py::object();
  }

  kvevict::Decoder decoder_;
  std::uint32_t capacity_;
  std::vector<py::object> policies_;  // per head; empty: none
  std::vector<PyPolicy*> drivers_;    // the C++ side of policies_
};

}  // namespace

// `self` of the bound methods: checked to be an instance of the class, then
// to be initialised (checked<T>) when used.
#define KVEVICT_PY_SELF(Type, Cpp, python_type)                                            \
  namespace kvevict_py {                                                                   \
  struct Type {                                                                            \
    py::handle obj;                                                                        \
    Cpp& get() const { return checked<Cpp>(obj); }                                         \
  };                                                                                       \
  }                                                                                        \
  template <>                                                                              \
  struct pybind11::detail::type_caster<kvevict_py::Type> {                                 \
    PYBIND11_TYPE_CASTER(kvevict_py::Type, const_name(python_type));                       \
    bool load(handle src, bool) {                                                          \
      if (!isinstance<Cpp>(src)) return false;                                             \
      value.obj = src;                                                                     \
      return true;                                                                         \
    }                                                                                      \
    static handle cast(const kvevict_py::Type& v, return_value_policy, handle) {           \
      return v.obj.inc_ref();                                                              \
    }                                                                                      \
  };

KVEVICT_PY_SELF(PolicySelf, PyPolicy, "Policy")
KVEVICT_PY_SELF(TraceSelf, TraceIterator, "TraceIterator")
KVEVICT_PY_SELF(ModelSelf, PyModel, "Model")
KVEVICT_PY_SELF(DecoderSelf, PyDecoder, "Decoder")
#undef KVEVICT_PY_SELF

using kvevict_py::DecoderSelf;
using kvevict_py::ModelSelf;
using kvevict_py::PolicySelf;
using kvevict_py::TraceSelf;

namespace {

std::uint32_t steps_of(const kvevict::Trace& trace, py::handle steps) {
  const std::optional<std::int64_t> n = to_optional_int(steps, "steps");
  return n ? kvevict::checked_steps(trace, *n) : trace.steps();
}

// ---- evaluations --------------------------------------------------------------

// Raised from the progress callback when Python has a pending signal (Ctrl-C).
struct Interrupted {};

kvevict::EvaluateOptions options_of(py::handle trace, py::handle steps) {
  kvevict::EvaluateOptions options;
  options.trace = to_trace_id(trace);
  options.steps = to_optional_int(steps, "steps");
  options.progress = [](std::uint32_t step, std::uint32_t) {
    if (step % 256 != 0) return;
    const py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw Interrupted{};
  };
  return options;
}

// A granularity (eval/paged.h): "head", "layer" or "sequence"; TypeError for
// a non-str, ValueError naming `what` and the core's message otherwise.
kvevict::Granularity granularity_of(py::handle value, const std::string& what) {
  return choice_of(value, what, "'head', 'layer' or 'sequence'",
                   [](const std::string& name) { return kvevict::parse_granularity(name); });
}

// paged={"block_size", "start_blocks", "recent_blocks", "block_score",
// "granularity", "layer_budget", "head_floor"} (snake_case or camelCase;
// docs/paged.md), as the tool's --block-size ... --head-floor. None:
// token-level eviction, each cache its own budget.
kvevict::PagedOptions paged_of(py::handle paged, const std::string& what) {
  kvevict::PagedOptions p;
  if (paged.is_none()) return p;
  // layer_budget is the older spelling of granularity "layer": both may be
  // given, but only when they agree (as the tool's --layer-budget with
  // --granularity), whatever order the dict holds them in.
  std::optional<kvevict::Granularity> granularity;
  std::optional<bool> layer_budget;
  if (!py::isinstance<py::dict>(paged)) {
    throw py::type_error(what + ": paged must be a dict of paged-cache options or None, got " + type_name(paged));
  }
  for (const auto& item : paged.cast<py::dict>()) {
    const std::string key = to_str(item.first, what + ": a paged option name");
    const std::string where = what + ": paged[" + key + "]";
    if (key == "block_size" || key == "blockSize") {
      p.block_size = kvevict::given_block_size(to_int(item.second, where), where);
    } else if (key == "start_blocks" || key == "startBlocks") {
      p.start_blocks = to_int(item.second, where);
    } else if (key == "recent_blocks" || key == "recentBlocks") {
      p.recent_blocks = to_int(item.second, where);
    } else if (key == "block_score" || key == "blockScore") {
      p.block_score = kvevict::parse_block_score(to_str(item.second, where));
    } else if (key == "layer_budget" || key == "layerBudget") {
      if (!py::isinstance<py::bool_>(item.second)) {
        throw py::type_error(where + " must be a bool, got " + type_name(item.second));
      }
      layer_budget = item.second.cast<bool>();
    } else if (key == "granularity") {
      granularity = granularity_of(item.second, where);
    } else if (key == "head_floor" || key == "headFloor") {
      p.head_floor = to_int(item.second, where);
    } else {
      throw py::value_error(what + ": unknown paged option '" + key +
                            "' (known: block_size, start_blocks, recent_blocks, block_score, granularity, "
                            "layer_budget, head_floor)");
    }
  }
  if (granularity && layer_budget && *layer_budget != (*granularity == kvevict::Granularity::kLayer)) {
    throw py::value_error(what + ": paged[layer_budget] (" + (*layer_budget ? "True" : "False") +
                          ") and paged[granularity] ('" + std::string(kvevict::granularity_name(*granularity)) +
                          "') disagree: layer_budget True is granularity 'layer'");
  }
  if (granularity) {
    p.set_granularity(*granularity);
  } else if (layer_budget) {
    p.layer_budget = *layer_budget;
  }
  kvevict::check_paged(p);
  return p;
}

template <class Fn>
auto without_gil(Fn&& fn) {
  try {
    const py::gil_scoped_release release;
    return fn();
  } catch (const Interrupted&) {
    throw py::error_already_set();  // the pending KeyboardInterrupt
  }
}

py::object json_loads(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

// Builds the dict of a run row (or the compare document) from the row schema's
// walk: the same keys, order and values as json.loads of the tool's JSON,
// without the text in between. Non-finite numbers become None, as JSON writes
// them (null). Needs the GIL.
class DictBuilder final : public kvevict::RowVisitor {
 public:
  py::dict take() { return py::reinterpret_borrow<py::dict>(stack_.front()); }

  void string(const kvevict::FieldInfo& f, const std::string& value) override { put(f, py::str(value)); }
  void integer(const kvevict::FieldInfo& f, std::int64_t value) override { put(f, py::int_(value)); }
  void number(const kvevict::FieldInfo& f, double value) override {
    put(f, std::isfinite(value) ? py::object(py::float_(value)) : py::object(py::none()));
  }
  void null(const kvevict::FieldInfo& f) override { put(f, py::none()); }
  void params(const kvevict::FieldInfo& f, const kvevict::ParamMap& params) override {
    py::dict d;
    for (const auto& [k, v] : params) d[py::str(k)] = py::int_(v);
    put(f, d);
  }
  void begin(const kvevict::FieldInfo& f) override {
    stack_.push_back(f.type == kvevict::FieldType::kArray ? py::object(py::list()) : py::object(py::dict()));
  }
  void end(const kvevict::FieldInfo& f) override { put(f, pop()); }
  void begin_element() override { stack_.push_back(py::dict()); }
  void end_element() override {
    const py::object element = pop();
    py::reinterpret_borrow<py::list>(stack_.back()).append(element);
  }

 private:
  void put(const kvevict::FieldInfo& f, const py::object& value) {
    py::reinterpret_borrow<py::dict>(stack_.back())[py::str(f.name.data(), f.name.size())] = value;
  }
  py::object pop() {
    py::object top = std::move(stack_.back());
    stack_.pop_back();
    return top;
  }
  std::vector<py::object> stack_{py::dict()};
};

py::dict row_schema_dict(const kvevict::RunRow& row) {
  DictBuilder builder;
  kvevict::for_each_field(row, builder);
  return builder.take();
}

// A trace command's whole document, the envelope the tool prints:
// {"command", "model": None, "rows": [...], "trace"}.
py::dict row_schema_dict(const std::vector<kvevict::RunRow>& rows, std::string_view command) {
  DictBuilder builder;
  kvevict::for_each_field(rows, command, builder);
  return builder.take();
}

// One run: a policy name or a Policy (whose given parameters are the base),
// `params` on top, and the budget (None: the `budget` parameter, or its default).
kvevict::RunSpec spec_of(py::handle policy, py::handle budget, const py::dict& params) {
  const kvevict::PolicyInfo* info = nullptr;
  kvevict::ParamMap base;
  if (py::isinstance<PyPolicy>(policy)) {
    const auto& p = checked<PyPolicy>(policy);
    info = &p.info();
    base = p.given();
  } else if (py::isinstance<py::str>(policy)) {
    info = &kvevict::find_policy(policy.cast<std::string>());
  } else {
    throw py::type_error("policy must be a policy name (str) or a kvevict.Policy, got " +
                         type_name(policy));
  }
  kvevict::RunSpec spec;
  spec.policy = info->name;
  spec.params = params_of(*info, params, std::move(base));
  const std::optional<std::int64_t> b = to_optional_int(budget, "budget");
  spec.budget = b ? *b : value_of(spec.params, "budget", default_of(*info, "budget", 512));
  return spec;
}

std::string path_of(py::handle path, const std::string& what);

// keys, values, queries: the .npy files recorded beside an .npy trace
// (kvevict record --keys/--values/--queries), for the key-aware policies; None
// is not given. Checked here against the trace id (files need an .npy trace),
// by the library against the files' shapes.
kvevict::SignalFiles signal_files_of(const kvevict::EvaluateOptions& options, py::handle keys, py::handle values,
                                     py::handle queries) {
  kvevict::SignalFiles files;
  if (!keys.is_none()) files.keys = path_of(keys, "keys");
  if (!values.is_none()) files.values = path_of(values, "values");
  if (!queries.is_none()) files.queries = path_of(queries, "queries");
  if (!files.empty() && !kvevict::is_npy_id(options.trace)) {
    throw py::value_error("keys, values and queries go with the attention recorded beside them: give trace=FILE.npy "
                          "(kvevict record writes all four), not the generated trace '" + options.trace + "'");
  }
  return files;
}

// The argument that supplies each signal a replay can be given.
std::string signal_argument(kvevict::Signals missing) {
  if ((missing & kvevict::kSignalKey) != 0) return "keys";
  if ((missing & kvevict::kSignalValue) != 0) return "values";
  return "queries";
}

// Refuses a policy that reads a signal the replay does not supply, naming the
// signal and the argument that would supply it.
void check_replay(const kvevict::PolicyInfo& info, const kvevict::SignalFiles& files) {
  const kvevict::Signals missing = info.signals & ~files.supplied();
  if (missing == 0) return;
  const std::string arg = signal_argument(missing);
  kvevict::Signals first = 1;
  while ((missing & first) == 0) first <<= 1;
  throw py::value_error(info.name + " reads the new token's " +
                        std::string(kvevict::signal_name(static_cast<kvevict::Signal>(first))) + " (" +
                        kvevict::signal_names(info.signals) + "), which " + kvevict::replay_source(files) +
                        " does not supply: give " + arg + "=FILE.npy recorded beside an .npy trace (kvevict record --" +
                        arg + " writes it)");
}

py::object run(const PolicyArg& policy_arg, const OptionalInt& budget_arg, const TraceId& trace,
               const OptionalInt& steps, const py::object& paged, const py::object& keys, const py::object& values,
               const py::object& queries, const py::kwargs& kwargs) {
  const kvevict::RunSpec spec = spec_of(policy_arg.obj, budget_arg.obj, kwargs);
  kvevict::EvaluateOptions options = options_of(trace.obj, steps.obj);
  options.paged = paged_of(paged, "run");
  options.signals = signal_files_of(options, keys, values, queries);
  check_replay(kvevict::find_policy(spec.policy), options.signals);
  const std::vector<kvevict::RunRow> rows = without_gil([&] { return kvevict::evaluate({spec}, options); });
  return row_schema_dict(rows.front());
}

// compare() and compare_model() replay attention (a trace, or the model's
// recorded weights for retained mass): "all" is the policies attention can
// feed, and a key-aware one named is refused with the signal it lacks.
constexpr const char* kAttentionSource = "a compare (it replays attention weights only)";

// `model`: compare_model, whose key-aware runs replay each window's
// full-cache keys (kvevict::model_compare_policies): "all" is still the seven.
// `files`: a replay given keys (values, queries) recorded beside its trace:
// "all" is every policy they can feed, and a named one is checked against them.
std::vector<std::string> policy_names(py::handle policies, bool model = false,
                                      const kvevict::SignalFiles* files = nullptr) {
  if (files != nullptr && !files->empty()) {
    std::vector<std::string> names;
    if (py::isinstance<py::str>(policies)) {
      const std::string text = policies.cast<std::string>();
      if (text == "all") return kvevict::policy_names(files->supplied());
      names = kvevict::split_list(text, "policies");
    } else if (py::isinstance<py::iterable>(policies)) {
      for (const py::handle item : policies) names.push_back(to_str(item, "a policy name"));
    } else {
      throw py::type_error("policies must be \"all\", a comma-separated str or a list of names, got " +
                           type_name(policies));
    }
    if (names.empty()) throw py::value_error("compare: no policies given (use \"all\" for every policy)");
    for (std::string& name : names) {
      const kvevict::PolicyInfo& info = kvevict::find_policy(name);
      check_replay(info, *files);
      name = info.name;
    }
    return names;
  }
  if (py::isinstance<py::str>(policies)) {
    if (model) return kvevict::model_compare_policies(policies.cast<std::string>());
    return kvevict::parse_policy_list(policies.cast<std::string>(), kvevict::kSignalAttention, kAttentionSource);
  }
  if (!py::isinstance<py::iterable>(policies)) {
    throw py::type_error("policies must be \"all\", a comma-separated str or a list of names, got " +
                         type_name(policies));
  }
  std::vector<std::string> names;
  for (const py::handle item : policies) {
    const kvevict::PolicyInfo& info = kvevict::find_policy(to_str(item, "a policy name"));
    if (!model) kvevict::check_signals_available(info, kvevict::kSignalAttention, kAttentionSource);
    names.push_back(info.name);
  }
  if (names.empty()) throw py::value_error("compare: no policies given (use \"all\" for every policy)");
  return names;
}

std::vector<std::int64_t> budget_list(py::handle budgets) {
  if (py::isinstance<py::str>(budgets) || !py::isinstance<py::iterable>(budgets)) {
    throw py::type_error("budgets must be a sequence of integers, got " + type_name(budgets));
  }
  std::vector<std::int64_t> out;
  for (const py::handle b : budgets) out.push_back(to_int(b, "a budget"));
  return out;
}

// "policy.param" with the param part in either case style -> registry spelling.
std::string override_key(const std::string& policy, const std::string& param) {
  std::string resolved = param;
  try {
    resolved = resolve_key(kvevict::find_policy(policy), param);
  } catch (const kvevict::ParameterError&) {
    // Unknown policy: compare() names it with the core's message.
  }
  return policy + "." + resolved;
}

kvevict::ParamMap overrides_of(py::handle overrides) {
  kvevict::ParamMap out;
  if (overrides.is_none()) return out;
  if (!py::isinstance<py::dict>(overrides)) {
    throw py::type_error("overrides must be a dict such as {\"h2o.recent_window\": 64} or "
                         "{\"h2o\": {\"recent_window\": 64}}, got " + type_name(overrides));
  }
  for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(overrides)) {
    const std::string key = to_str(k, "an override key");
    if (py::isinstance<py::dict>(v)) {
      for (const auto& [pk, pv] : py::reinterpret_borrow<py::dict>(v)) {
        const std::string param = to_str(pk, "an override key");
        kvevict::set_param(out, override_key(key, param), to_int(pv, key + "." + param));
      }
      continue;
    }
    const std::size_t dot = key.find('.');
    std::string resolved;
    if (dot != std::string::npos) {
      resolved = override_key(key.substr(0, dot), key.substr(dot + 1));
    } else {
      resolved = (!any_policy_has_param(key) && any_policy_has_param(camel_case(key))) ? camel_case(key)
                                                                                        : key;
    }
    kvevict::set_param(out, resolved, to_int(v, key));
  }
  return out;
}

// [256, 512, 1024] (never mutated: compare() only reads its budgets).
py::list canonical_budgets() {
  py::list out;
  for (const std::int64_t b : kvevict::kCanonicalBudgets) out.append(py::int_(b));
  return out;
}

py::object compare(const PolicyList& policies, const IntList& budgets, const Overrides& overrides,
                   const TraceId& trace, const OptionalInt& steps, const py::object& paged, const py::object& keys,
                   const py::object& values, const py::object& queries) {
  kvevict::EvaluateOptions options = options_of(trace.obj, steps.obj);
  options.signals = signal_files_of(options, keys, values, queries);
  kvevict::CompareRequest request;
  request.policies = policy_names(policies.obj, false, &options.signals);
  request.budgets = budget_list(budgets.obj);
  request.overrides = overrides_of(overrides.obj);
  options.paged = paged_of(paged, "compare");
  const std::vector<kvevict::RunRow> rows = without_gil([&] { return kvevict::compare(request, options); });
  return row_schema_dict(rows, "compare");
}

py::list policy_descriptions() {
  py::list out;
  for (const kvevict::PolicyInfo* info : kvevict::policies()) {
    py::list params;
    for (const kvevict::ParamInfo& p : info->params) {
      py::dict d;
      d["name"] = p.name;
      d["default"] = py::int_(p.default_value);
      d["help"] = p.help;
      params.append(d);
    }
    py::list queries;
    for (const kvevict::QueryInfo& q : info->queries) queries.append(snake_case(q.name));
    py::dict d;
    d["name"] = info->name;
    d["title"] = info->title;
    d["summary"] = info->summary;
    d["params"] = params;
    d["queries"] = queries;
    d["signals"] = py::list(signal_tuple(info->signals));
    out.append(d);
  }
  return out;
}

py::dict run_vectors(const Paths& paths_arg) {
  const py::handle paths = paths_arg.obj;
  const py::object fspath = py::module_::import("os").attr("fspath");
  std::vector<std::filesystem::path> files;
  if (py::isinstance<py::str>(paths) || py::hasattr(paths, "__fspath__")) {
    files.emplace_back(fspath(paths).cast<std::string>());
  } else if (py::isinstance<py::iterable>(paths)) {
    for (const py::handle p : paths) {
      if (!py::isinstance<py::str>(p) && !py::hasattr(p, "__fspath__")) {
        throw py::type_error("each path must be a str or os.PathLike, got " + type_name(p));
      }
      files.emplace_back(fspath(p).cast<std::string>());
    }
  } else {
    throw py::type_error("paths must be a path or a list of paths, got " + type_name(paths));
  }
  const kvevict::VectorReport report = without_gil([&] { return kvevict::run_vectors(files); });
  py::list failures;
  for (const kvevict::VectorFailure& f : report.failures) failures.append(kvevict::describe(f));
  py::dict out;
  out["passed"] = py::int_(report.passed);
  out["failed"] = py::int_(report.failed);
  out["failures"] = failures;
  return out;
}

// ---- the real model: functions ------------------------------------------------------

std::string path_of(py::handle path, const std::string& what) {
  if (!py::isinstance<py::str>(path) && !py::hasattr(path, "__fspath__")) {
    throw py::type_error(what + " must be a str or os.PathLike, got " + type_name(path) + " (" +
                         short_repr(path) + ")");
  }
  const py::object p = py::module_::import("os").attr("fsdecode")(path);
  return p.cast<std::string>();
}

const PyModel& model_of(py::handle model) {
  if (!py::isinstance<PyModel>(model)) {
    throw py::type_error("model must be a kvevict.Model, got " + type_name(model) + " (" +
                         short_repr(model) + ")");
  }
  return checked<PyModel>(model);
}

std::unique_ptr<PyModel> load_model(const PathArg& path_arg, const Int& context_arg, const py::object& matmul_arg) {
  const std::string file = path_of(path_arg.obj, "path");
  kvevict::ModelOptions options;
  options.context = to_u32(context_arg.obj, "context",
                           "must be at least 0 (0: the trained context, at most " +
                               std::to_string(kvevict::ModelOptions::kDefaultContextCap) + ")");
  options.matmul = choice_of(matmul_arg, "matmul", "'exact' or 'int8'",
                             [](const std::string& name) { return kvevict::parse_matmul_mode(name); });
  return std::make_unique<PyModel>(without_gil([&] { return kvevict::Model::load(file, options); }));
}

// The text's bytes: any 1-D buffer of 1-byte items (bytes, bytearray,
// memoryview, a uint8 array; copied, so the caller may change it meanwhile),
// or an os.PathLike naming a file, read whole. A str is refused: text or path?
std::vector<std::uint8_t> text_of(py::handle text) {
  if (py::isinstance<py::str>(text)) {
    throw py::type_error(
        "text must be bytes, not str: pass s.encode() for a string, or read a file with "
        "open(path, \"rb\").read() (or pass a pathlib.Path)");
  }
  if (py::hasattr(text, "__fspath__")) {
    const std::string file = path_of(text, "text");
    return without_gil([&] { return kvevict::read_text(file); });
  }
  if (PyObject_CheckBuffer(text.ptr()) == 0) {
    throw py::type_error("text must be bytes-like (bytes, bytearray, memoryview, a uint8 array) or "
                         "a pathlib.Path, got " + type_name(text) + " (" + short_repr(text) + ")");
  }
  const py::buffer_info info = py::reinterpret_borrow<py::buffer>(text).request();
  if (info.itemsize != 1 || info.ndim != 1) {
    throw py::type_error("text must be a 1-D buffer of bytes, got a " + type_name(text) + " of " +
                         std::to_string(info.ndim) + " dimension(s) with " +
                         std::to_string(info.itemsize) + "-byte items");
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(info.shape[0]));
  const auto* base = static_cast<const std::uint8_t*>(info.ptr);
  for (py::ssize_t i = 0; i < info.shape[0]; ++i) {
    out[static_cast<std::size_t>(i)] = base[i * info.strides[0]];
  }
  return out;
}

const char* const kRunShape = "a run is a policy (a name or a kvevict.Policy), (policy, budget) or "
                              "(policy, budget, params)";

std::vector<kvevict::RunSpec> runs_of(py::handle runs) {
  std::vector<kvevict::RunSpec> out;
  if (runs.is_none()) return out;
  if (py::isinstance<py::str>(runs) || py::isinstance<PyPolicy>(runs) ||
      !py::isinstance<py::iterable>(runs)) {
    throw py::type_error(std::string("runs must be a list of runs (") + kRunShape + "), got " +
                         type_name(runs) + " (" + short_repr(runs) + ")");
  }
  for (const py::handle item : runs) {
    if (py::isinstance<py::str>(item) || py::isinstance<PyPolicy>(item)) {
      out.push_back(spec_of(item, py::none(), py::dict()));
      continue;
    }
    if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item)) {
      throw py::type_error(std::string(kRunShape) + ", got " + type_name(item) + " (" +
                           short_repr(item) + ")");
    }
    const auto seq = py::reinterpret_borrow<py::sequence>(item);
    if (seq.size() < 2 || seq.size() > 3) {
      throw py::value_error(std::string(kRunShape) + ", got " + std::to_string(seq.size()) +
                            " item(s): " + short_repr(item));
    }
    py::dict params;
    if (seq.size() == 3) {
      const py::object given = seq[2];
      if (!py::isinstance<py::dict>(given)) {
        throw py::type_error("a run's params must be a dict such as {\"recent_window\": 16}, got " +
                             type_name(given));
      }
      params = py::reinterpret_borrow<py::dict>(given);
    }
    out.push_back(spec_of(seq[0], seq[1], params));
  }
  return out;
}

// kv_precision (a str) and kv_residual (None: the precision's default).
kvevict::KvFormat kv_format_of(py::handle precision, py::handle residual, const std::string& what) {
  kvevict::KvFormat kv;
  if (!py::isinstance<py::str>(precision)) {
    throw py::type_error(what + ": kv_precision must be a str (fp32, fp16, int8 or int4), got " + type_name(precision));
  }
  kv.precision = kvevict::parse_precision(precision.cast<std::string>(), what + ": kv_precision");
  if (!residual.is_none()) kv.residual = to_u32(residual, "kv_residual", "must be at least 0");
  return kv;
}

kvevict::ModelRunOptions model_options(py::handle max_windows, py::handle prefill, py::handle prefill_window) {
  kvevict::ModelRunOptions options;
  options.max_windows =
      to_u32(max_windows, "max_windows", "must be at least 0 (0 = every window of the text)");
  options.prefill = to_u32(prefill, "prefill", "must be at least 0 (0 = evict while decoding)");
  const std::string window_rule = "must be at least 1 (the attention rows the compression scores from)";
  options.prefill_window = to_u32(prefill_window, "prefill_window", window_rule);
  if (options.prefill_window < 1) throw py::value_error("prefill_window (0) " + window_rule);
  return options;
}

// Rows as dicts, walked from their row's one description (perplexity_rows.h,
// serve_bench.h), as the tool's --format json writes them.
template <class Row>
py::list row_dicts(const std::vector<Row>& rows) {
  py::list out;
  for (const Row& r : rows) {
    DictBuilder builder;
    kvevict::for_each_field(r, builder);
    out.append(builder.take());
  }
  return out;
}

py::list model_perplexity(const ModelArg& model_arg, const Text& text_arg, const Runs& runs_arg,
                          const Int& max_windows, const py::object& paged, const Int& prefill,
                          const Int& prefill_window, const py::object& kv_precision, const py::object& kv_residual) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  const std::vector<kvevict::RunSpec> specs = runs_of(runs_arg.obj);
  kvevict::ModelRunOptions options = model_options(max_windows.obj, prefill.obj, prefill_window.obj);
  options.paged = paged_of(paged, "perplexity");
  options.kv = kv_format_of(kv_precision, kv_residual, "perplexity");
  return row_dicts(without_gil([&] { return kvevict::perplexity(*model, text, specs, options); }));
}

py::list model_compare(const ModelArg& model_arg, const Text& text_arg, const PolicyList& policies,
                       const IntList& budgets, const Overrides& overrides, const Int& max_windows,
                       const py::object& paged, const Int& prefill, const Int& prefill_window,
                       const py::object& kv_precision, const py::object& kv_residual) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  kvevict::CompareRequest request;
  request.policies = policy_names(policies.obj, /*model=*/true);
  request.budgets = budget_list(budgets.obj);
  request.overrides = overrides_of(overrides.obj);
  kvevict::ModelRunOptions options = model_options(max_windows.obj, prefill.obj, prefill_window.obj);
  options.paged = paged_of(paged, "compare_model");
  options.kv = kv_format_of(kv_precision, kv_residual, "compare_model");
  return row_dicts(without_gil([&] { return kvevict::compare_model(*model, text, request, options); }));
}

// The list type sweep_model returns: a list of rows with `skipped`, the
// value x budget pairs skip_refused left out (made once, in the module init).
py::object& sweep_rows_type() {
  static auto* type = new py::object();  // never destroyed: it outlives the interpreter
  return *type;
}

py::list model_sweep(const ModelArg& model_arg, const Text& text_arg, py::handle policy, py::handle param,
                     py::handle values, py::handle budgets, const py::object& params, const Int& max_windows,
                     const py::object& kv_precision, const py::object& kv_residual, const py::object& skip_refused) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  const kvevict::PolicyInfo& info = kvevict::find_policy(to_str(policy, "policy"));
  kvevict::SweepRequest request;
  request.policy = info.name;
  request.param = resolve_key(info, to_str(param, "param"));
  if (py::isinstance<py::str>(values) || !py::isinstance<py::iterable>(values)) {
    throw py::type_error("values must be a sequence of integers, got " + type_name(values));
  }
  for (const py::handle v : values) request.values.push_back(to_int(v, "a value"));
  request.budgets = budget_list(budgets);
  if (!params.is_none()) {
    if (!py::isinstance<py::dict>(params)) throw py::type_error("params must be a dict, got " + type_name(params));
    request.params = params_of(info, params.cast<py::dict>());
  }
  if (!py::isinstance<py::bool_>(skip_refused)) {
    throw py::type_error("skip_refused must be a bool, got " + type_name(skip_refused));
  }
  request.skip_refused = skip_refused.cast<bool>();
  std::vector<std::string> skipped;
  const std::vector<kvevict::RunSpec> specs = kvevict::sweep_specs(request, &skipped);
  kvevict::ModelRunOptions options = model_options(max_windows.obj, py::int_(0), py::int_(32));
  options.kv = kv_format_of(kv_precision, kv_residual, "sweep_model");
  py::list rows =
      sweep_rows_type()(row_dicts(without_gil([&] { return kvevict::perplexity(*model, text, specs, options); })));
  py::list lines;
  for (const std::string& line : skipped) lines.append(line);
  rows.attr("skipped") = lines;
  return rows;
}

std::vector<std::string> str_items(py::handle value, const std::string& what);

// The policies a model run names (its decoder feeds every signal), as the
// tool's --policies: "all" is all ten, a name any registered policy.
std::vector<std::string> model_policy_names(py::handle policies) {
  if (py::isinstance<py::str>(policies)) return kvevict::parse_policy_list(policies.cast<std::string>());
  if (!py::isinstance<py::iterable>(policies)) {
    throw py::type_error("policies must be \"all\", a comma-separated str or a list of names, got " +
                         type_name(policies));
  }
  std::vector<std::string> names;
  for (const py::handle item : policies) names.push_back(kvevict::find_policy(to_str(item, "a policy name")).name);
  if (names.empty()) throw py::value_error("policies is empty (use \"all\" for every policy)");
  return names;
}

// A real number (int, float, numpy scalar) as a double; `what` names it.
double to_real(py::handle value, const std::string& what) {
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::str>(value) || PyNumber_Check(value.ptr()) == 0 ||
      PyComplex_Check(value.ptr()) != 0) {
    throw py::type_error(what + " must be a real number, got " + type_name(value) + " (" + short_repr(value) + ")");
  }
  return py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
}

// `kvevict tasks`: retrieval tasks answered by the model (kvevict/model/evaluation/tasks.h).
// The rows are the tool's own JSON (tasks_json), parsed: the same keys, order
// and values as `kvevict tasks --format json`.
py::list model_tasks(const ModelArg& model_arg, const Text& text_arg, const PolicyList& tasks_arg,
                     const IntList& lengths_arg, const Int& depths_arg, const Int& samples_arg,
                     const py::object& policies_arg, const IntList& budgets_arg, const PolicyList& moments_arg,
                     const Overrides& overrides, const Int& seed_arg, const Int& window_arg, const Int& chunk_arg,
                     const py::object& kv_precision, const py::object& kv_residual, const py::object& granularity) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  kvevict::TaskRequest request;
  request.tasks.clear();
  const std::vector<std::string> tasks = str_items(tasks_arg.obj, "tasks");
  if (tasks.size() == 1 && tasks.front() == "all") {
    request.tasks = kvevict::task_names();
  } else {
    for (const std::string& t : tasks) {
      try {
        request.tasks.push_back(kvevict::task_names()[kvevict::task_index(t)]);
      } catch (const kvevict::InputError& e) {
        throw py::value_error(std::string("tasks: ") + e.what());
      }
    }
  }
  request.lengths.clear();
  for (const std::int64_t l : budget_list(lengths_arg.obj)) {
    if (l < 1 || l > std::int64_t{1} << 20) {
      throw py::value_error("lengths: " + std::to_string(l) + " is not a length (1 ... 1048576 positions)");
    }
    request.lengths.push_back(static_cast<std::uint32_t>(l));
  }
  if (request.lengths.empty()) throw py::value_error("lengths is empty");
  // The tool's ranges (kvevict tasks --depths, --samples, --window, --chunk).
  const auto in_range = [](py::handle v, const std::string& what, std::int64_t low, std::int64_t high) {
    const std::int64_t n = to_int(v, what);
    if (n < low || n > high) {
      throw py::value_error(what + " (" + std::to_string(n) + ") must be in " + std::to_string(low) + " ... " +
                            std::to_string(high));
    }
    return static_cast<std::uint32_t>(n);
  };
  request.depths = in_range(depths_arg.obj, "depths", 1, 100);
  request.samples = in_range(samples_arg.obj, "samples", 1, 100000);
  request.seed = to_u32(seed_arg.obj, "seed", "must be in 0 ... 4294967295");
  request.window = in_range(window_arg.obj, "window", 1, std::int64_t{1} << 20);
  request.chunk = in_range(chunk_arg.obj, "chunk", 0, std::int64_t{1} << 20);
  // policies None or "none": the full cache only (budgets are then not read).
  if (policies_arg.is_none() || (py::isinstance<py::str>(policies_arg) && policies_arg.cast<std::string>() == "none")) {
    request.budgets.clear();
  } else {
    request.policies = model_policy_names(policies_arg);
    request.budgets = budget_list(budgets_arg.obj);
    if (request.budgets.empty()) throw py::value_error("budgets is empty (give policies=None for the full cache only)");
  }
  request.moments.clear();
  for (const std::string& m : str_items(moments_arg.obj, "moments")) {
    try {
      request.moments.push_back(kvevict::parse_moment(m));
    } catch (const kvevict::InputError& e) {
      throw py::value_error(std::string("moments: ") + e.what());
    }
  }
  request.overrides = overrides_of(overrides.obj);
  kvevict::ModelRunOptions options;
  options.kv = kv_format_of(kv_precision, kv_residual, "tasks");
  // Which caches share the budget at the decode moment (the prefill moments
  // refuse any but head: the library checks).
  options.paged.set_granularity(granularity_of(granularity, "tasks: granularity"));
  const std::vector<kvevict::TaskRow> rows =
      without_gil([&] { return kvevict::run_tasks(model, text, request, options); });
  return py::list(json_loads(kvevict::tasks_json(rows, {"tasks", model->path()}))["rows"]);
}

// `kvevict bench --model`: decode speed and where a step's time goes
// (kvevict/model/serving/decode_bench.h). The rows carry the keys, order and values of
// `kvevict bench --model --format json` (tools/kvevict/output.cpp writes them;
// the library has no row description for them yet).
py::object model_bench(const ModelArg& model_arg, const py::object& text_arg, const Int& tokens_arg,
                     const Int& rounds_arg, const PolicyList& policies_arg, const IntList& budgets_arg,
                     const Int& prompt_arg, const IntList& threads_arg, const py::object& together,
                     const Int& prefill_chunk_arg, const py::object& prompt_logits_arg) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  // None: the tool's default text, model/heldout-sample.txt from the working folder.
  const std::vector<std::uint8_t> text =
      text_arg.is_none() ? text_of(py::module_::import("pathlib").attr("Path")("model/heldout-sample.txt"))
                         : text_of(text_arg);
  kvevict::DecodeBenchRequest request;
  request.tokens = to_u32(tokens_arg.obj, "tokens", "must be at least 1 (tokens decoded a pass)");
  if (request.tokens < 1) throw py::value_error("tokens (0) must be at least 1 (tokens decoded a pass)");
  const std::int64_t rounds = to_int(rounds_arg.obj, "rounds");
  if (rounds < 1 || rounds > 1000) {
    throw py::value_error("rounds (" + std::to_string(rounds) + ") must be in 1 ... 1000 (passes a run)");
  }
  request.rounds = static_cast<int>(rounds);
  request.prompt = to_u32(prompt_arg.obj, "prompt", "must be at least 0 (tokens prefilled before the timed ones)");
  request.prefill_chunk = to_u32(prefill_chunk_arg.obj, "prefill_chunk", "must be in 1 ... 4096");
  if (request.prefill_chunk < 1 || request.prefill_chunk > 4096) {
    throw py::value_error("prefill_chunk (" + std::to_string(request.prefill_chunk) + ") must be in 1 ... 4096");
  }
  request.prompt_logits = choice_of(prompt_logits_arg, "prompt_logits", "'all' or 'last'",
                                    [](const std::string& name) { return kvevict::parse_prompt_logits(name); });
  if (py::isinstance<py::str>(threads_arg.obj) || !py::isinstance<py::iterable>(threads_arg.obj)) {
    throw py::type_error("threads must be a sequence of integers, got " + type_name(threads_arg.obj));
  }
  request.threads.clear();
  for (const py::handle t : threads_arg.obj) {
    const std::int64_t n = to_int(t, "a thread count");
    if (n < 0 || n > 1024) throw py::value_error("threads: " + std::to_string(n) + " is not in 0 ... 1024 (0: every core)");
    request.threads.push_back(static_cast<int>(n));
  }
  if (!py::isinstance<py::bool_>(together)) throw py::type_error("together must be a bool, got " + type_name(together));
  request.together = together.cast<bool>();
  const std::vector<std::string> names = model_policy_names(policies_arg.obj);
  const std::vector<std::int64_t> budgets = budget_list(budgets_arg.obj);
  if (budgets.empty()) throw py::value_error("budgets is empty");
  for (const std::string& name : names) {
    for (const std::int64_t b : budgets) request.runs.push_back({name, {}, b});
  }
  const std::vector<kvevict::DecodeBenchRow> rows =
      without_gil([&] { return kvevict::bench_decoder(model, text, request); });
  return json_loads(kvevict::decode_bench_json(rows));  // the tool's one row description
}

// A float32 C-contiguous copy of `obj` with `ndims` dimensions (a 1-D input
// counts as one row where 2-D is wanted); `what` names the argument.
py::array_t<float, py::array::c_style> float_matrix(py::handle obj, const std::string& what, const std::string& rule,
                                                    bool one_d_ok) {
  using Convert = py::array_t<float, py::array::c_style | py::array::forcecast>;
  const py::array arr = py::array::ensure(obj);
  if (!arr || arr.ndim() == 0) {
    throw py::type_error(what + " must be " + rule + ", got " + type_name(obj) + " (" + short_repr(obj) + ")");
  }
  check_numeric(arr, obj, what);
  if (arr.ndim() > 2 || (arr.ndim() == 1 && !one_d_ok)) {
    std::string shape = "(";
    for (py::ssize_t d = 0; d < arr.ndim(); ++d) shape += (d == 0 ? "" : ", ") + std::to_string(arr.shape(d));
    shape += arr.ndim() == 1 ? ",)" : ")";
    throw py::value_error(what + " must be " + rule + ", got shape " + shape);
  }
  Convert out = Convert::ensure(arr);
  if (!out) throw py::type_error(what + " could not be converted to float32");
  return out;
}

// kvevict/core/attention.h: the weights the query heads pay to the keys.
py::array_t<float> signals_attention(const AttentionStack& queries_arg, const AttentionStack& keys_arg,
                                     const py::object& scale_arg) {
  const auto queries = float_matrix(queries_arg.obj, "queries", "[groups, head_dim] (or [head_dim]) floats", true);
  const auto keys = float_matrix(keys_arg.obj, "keys", "[n, head_dim] floats", false);
  const auto head_dim = static_cast<std::size_t>(queries.shape(queries.ndim() - 1));
  const auto groups = static_cast<std::size_t>(queries.ndim() == 2 ? queries.shape(0) : 1);
  const auto n = static_cast<std::size_t>(keys.shape(0));
  if (head_dim < 1 || groups < 1) throw py::value_error("queries is empty: it needs at least one head of one float");
  if (static_cast<std::size_t>(keys.shape(1)) != head_dim) {
    throw py::value_error("keys has " + std::to_string(keys.shape(1)) + " floats a row and queries " +
                          std::to_string(head_dim) + " a head: both are head_dim");
  }
  float scale = 1.0F / std::sqrt(static_cast<float>(head_dim));
  if (!scale_arg.is_none()) {
    const double s = to_real(scale_arg, "scale");
    if (!std::isfinite(s)) throw py::value_error("scale (" + short_repr(scale_arg) + ") must be finite");
    scale = static_cast<float>(s);
  }
  py::array_t<float> out(static_cast<py::ssize_t>(n));
  std::vector<float> scratch(n);
  kvevict::attention_from_keys({queries.data(), groups * head_dim}, groups, {keys.data(), n * head_dim}, n, head_dim,
                               scale, {out.mutable_data(), n}, scratch);
  return out;
}

py::array_t<float> signals_rope(const AttentionStack& x_arg, const Int& pos_arg, const py::object& base_arg) {
  const auto x = float_matrix(x_arg.obj, "x", "a 1-D array of head_dim floats (head_dim even)", true);
  if (x.ndim() != 1) throw py::value_error("x must be 1-D (head_dim floats), got " + std::to_string(x.ndim()) + "-D");
  if (x.shape(0) % 2 != 0) {
    throw py::value_error("x has " + std::to_string(x.shape(0)) +
                          " floats: head_dim must be even (NeoX pairs i with i + head_dim/2)");
  }
  const std::int64_t pos = to_int(pos_arg.obj, "pos");
  const double base = to_real(base_arg, "base");
  if (!(base > 0.0) || !std::isfinite(base)) {
    throw py::value_error("base (" + short_repr(base_arg) + ") must be a positive finite number (the RoPE base)");
  }
  py::array_t<float> out(x.shape(0));
  std::copy_n(x.data(), x.shape(0), out.mutable_data());
  kvevict::rope_neox({out.mutable_data(), static_cast<std::size_t>(x.shape(0))}, pos, base);
  return out;
}

// A str ("a,b", split as the tool splits it) or a sequence of str -> the items.
std::vector<std::string> str_items(py::handle value, const std::string& what) {
  if (py::isinstance<py::str>(value)) return kvevict::split_list(value.cast<std::string>(), what);
  if (!py::isinstance<py::iterable>(value)) {
    throw py::type_error(what + " must be a str or a sequence of str, got " + type_name(value));
  }
  std::vector<std::string> out;
  for (const py::handle item : value) out.push_back(to_str(item, "an item of " + what));
  if (out.empty()) throw py::value_error(what + " is empty");
  return out;
}

py::list model_serve_bench(const ModelArg& model_arg, const Text& text_arg, const IntList& sequences_arg,
                           const PolicyList& policies_arg, const Int& budget, const PolicyList& modes_arg,
                           const py::object& sharing_arg, const IntList& chunks_arg, const Int& shared_prefix,
                           const Int& tokens, const Int& prompt, const Int& window, const Int& block_size,
                           const Int& pool_blocks, const Overrides& overrides, const py::object& positions,
                           const py::object& granularity) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  std::vector<std::uint32_t> sequences;
  for (const std::int64_t n : budget_list(sequences_arg.obj)) {
    if (n < 1 || n > 4096) throw py::value_error("sequences: " + std::to_string(n) + " is not 1 ... 4096");
    sequences.push_back(static_cast<std::uint32_t>(n));
  }
  std::vector<std::string> policies;
  for (const std::string& item : str_items(policies_arg.obj, "policies")) {
    for (std::string& name : kvevict::serve_policy_names(item)) policies.push_back(std::move(name));
  }
  std::vector<bool> sharing;
  if (py::isinstance<py::bool_>(sharing_arg)) {
    sharing.push_back(sharing_arg.cast<bool>());
  } else if (py::isinstance<py::iterable>(sharing_arg) && !py::isinstance<py::str>(sharing_arg)) {
    for (const py::handle v : sharing_arg) {
      if (!py::isinstance<py::bool_>(v)) throw py::type_error("sharing must hold bools, got " + type_name(v));
      sharing.push_back(v.cast<bool>());
    }
  } else {
    throw py::type_error("sharing must be a bool or a sequence of bools, got " + type_name(sharing_arg));
  }
  if (sharing.empty()) throw py::value_error("sharing is empty");
  std::vector<std::uint32_t> chunks;
  for (const std::int64_t c : budget_list(chunks_arg.obj)) {
    chunks.push_back(to_u32(py::int_(c), "chunks", "must be at least 0 (0 = evict while decoding)"));
  }
  kvevict::ServeBenchRequest request;
  request.runs = kvevict::serve_runs(sequences, policies, to_int(budget.obj, "budget"),
                                     str_items(modes_arg.obj, "modes"), sharing, chunks);
  request.shared_prefix = to_u32(shared_prefix.obj, "shared_prefix", "must be at least 0");
  request.tokens = to_u32(tokens.obj, "tokens", "must be at least 0 (0 = the model's context)");
  request.prompt = to_u32(prompt.obj, "prompt", "must be at least 0 (0 = every token)");
  request.window = to_u32(window.obj, "window", "must be at least 1");
  request.block_size = to_u32(block_size.obj, "block_size", "must be at least 1");
  const std::int64_t pool = to_int(pool_blocks.obj, "pool_blocks");
  if (pool < 0) throw py::value_error("pool_blocks (" + std::to_string(pool) + ") must be at least 0");
  request.pool_blocks = static_cast<std::uint64_t>(pool);
  request.overrides = overrides_of(overrides.obj);
  request.positions = position_mode_of(positions, "serve_bench: positions");
  request.granularity = granularity_of(granularity, "serve_bench: granularity");
  return row_dicts(without_gil([&] { return kvevict::serve_bench(model, text, request); }));
}

// Position modes: "original,cache" or a sequence of them (ValueError naming a bad one).
std::vector<kvevict::PositionMode> position_modes_of(py::handle value, const std::string& what) {
  std::vector<kvevict::PositionMode> out;
  if (py::isinstance<py::str>(value)) {
    for (const std::string& item : kvevict::split_list(value.cast<std::string>(), what)) {
      out.push_back(position_mode_of(py::str(item), what));
    }
    return out;
  }
  if (!py::isinstance<py::iterable>(value)) {
    throw py::type_error(what + " must be a str or a sequence of str ('original', 'cache'), got " +
                         type_name(value) + " (" + short_repr(value) + ")");
  }
  for (const py::handle item : value) out.push_back(position_mode_of(item, what));
  if (out.empty()) throw py::value_error(what + " is empty (give 'original', 'cache' or both)");
  return out;
}

// kvevict stream (kvevict/model/evaluation/stream.h): the library's stream_json, parsed.
py::object model_stream(const ModelArg& model_arg, const Text& text_arg, const py::object& policies_arg,
                        const IntList& budgets_arg, const py::object& positions_arg, const Int& tokens_arg,
                        const Int& segment_arg, const py::object& full_cache_arg, const Int& recompute_arg,
                        const Int& recompute_tokens_arg, const py::object& kv_precision,
                        const Overrides& overrides, const py::object& kv_residual, const py::object& granularity) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  kvevict::StreamRequest request;
  // policies: "default", "none" / None, "a,b:key=value" or a sequence of such items.
  std::string policies = "none";
  if (!policies_arg.is_none()) {
    policies.clear();
    for (const std::string& item : str_items(policies_arg, "policies")) {
      policies += (policies.empty() ? "" : ",") + item;
    }
  }
  const std::vector<std::int64_t> budgets = budget_list(budgets_arg.obj);
  const kvevict::ParamMap sets = overrides_of(overrides.obj);
  if (policies != "none") request.specs = kvevict::stream_specs(policies, budgets, sets);
  request.positions = position_modes_of(positions_arg, "positions");
  request.tokens = to_u32(tokens_arg.obj, "tokens", "must be at least 0 (0 = the whole text)");
  request.segment = to_u32(segment_arg.obj, "segment", "must be at least 0 (0 = the model's context)");
  if (!py::isinstance<py::bool_>(full_cache_arg)) {
    throw py::type_error("full_cache must be a bool, got " + type_name(full_cache_arg));
  }
  request.full_cache = full_cache_arg.cast<bool>();
  request.recompute_window = to_u32(recompute_arg.obj, "recompute", "must be at least 0 (0 = not run)");
  request.recompute_tokens =
      to_u32(recompute_tokens_arg.obj, "recompute_tokens", "must be at least 0 (the stream's first N tokens)");
  kvevict::ModelRunOptions options;
  options.kv = kv_format_of(kv_precision, kv_residual, "stream");
  // head or sequence; layer is refused by the library (a head could then hold
  // more than the budget + 1 positions a stream's caches are sized to).
  options.paged.set_granularity(granularity_of(granularity, "stream: granularity"));
  const std::vector<kvevict::StreamRow> rows =
      without_gil([&] { return kvevict::stream_perplexity(*model, text, request, options); });
  return json_loads(kvevict::stream_json(rows, {"stream", model->path()}));
}

py::object model_sink_shares(const ModelArg& model_arg, const Text& text_arg, const Int& tokens_arg) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  const std::uint32_t tokens = to_u32(tokens_arg.obj, "tokens", "must be at least 0 (0 = the model's context)");
  const std::vector<kvevict::SinkShare> shares =
      without_gil([&] { return kvevict::sink_shares(*model, text, tokens); });
  return json_loads(kvevict::sinks_json(shares, {"stream", model->path()}))["rows"];
}

// `kvevict choose` (kvevict/model/evaluation/choose.h): which policy at this
// budget, and what it costs, within a time budget. The library's choose_json,
// parsed: the same keys, order and values as `kvevict choose --format json`.
py::object model_choose(const ModelArg& model_arg, const Text& text_arg, const Int& budget_arg,
                        const py::object& policies_arg, const py::object& minutes_arg, const OptionalInt& windows_arg,
                        const OptionalInt& samples_arg, const py::object& granularity) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  kvevict::ChooseRequest request;
  request.budget = to_int(budget_arg.obj, "budget");
  // None: every policy the granularity can run, as the tool without --policies.
  if (!policies_arg.is_none()) request.policies = model_policy_names(policies_arg);
  request.minutes = to_real(minutes_arg, "minutes");
  // None (or 0, the tool's spelling): planned from the probes' timings.
  const std::string planned = "must be at least 0 (None or 0: planned from the time)";
  if (!windows_arg.obj.is_none()) request.windows = to_u32(windows_arg.obj, "windows", planned);
  if (!samples_arg.obj.is_none()) request.samples = to_u32(samples_arg.obj, "samples", planned);
  // The library refuses "layer" with the tool's message.
  request.granularity.set_granularity(granularity_of(granularity, "choose: granularity"));
  // The narrowing commands name the files as the tool's do: the model's path
  // as given, and the text's when it came as a path (bytes have none: the
  // library's placeholder).
  const std::string text_label = py::hasattr(text_arg.obj, "__fspath__") ? path_of(text_arg.obj, "text") : "TEXT";
  const kvevict::ChooseResult result =
      without_gil([&] { return kvevict::choose(model, text, request, {}, model->path(), text_label); });
  return json_loads(kvevict::choose_json(result, {"choose", model->path()}));
}

// Sequences on one block pool (kvevict/model/serving/batch.h).
class PyBatch {
 public:
  PyBatch(const std::shared_ptr<const kvevict::Model>& model, const kvevict::BatchOptions& options)
      : batch_(model, options) {}

  std::uint64_t join(py::handle policy, py::handle budget, py::handle params, py::handle mode) {
    const std::string m = to_str(mode, "mode");
    if (m != "token" && m != "block") throw py::value_error("mode must be \"token\" or \"block\", got '" + m + "'");
    if (policy.is_none()) {
      if (m == "block") throw py::value_error("mode \"block\" needs a policy (the full cache evicts nothing)");
      return batch_.join();
    }
    py::dict given;
    if (!params.is_none()) {
      if (!py::isinstance<py::dict>(params)) throw py::type_error("params must be a dict, got " + type_name(params));
      given = py::reinterpret_borrow<py::dict>(params);
    }
    const kvevict::RunSpec spec = spec_of(policy, budget, given);
    kvevict::PagedOptions paged;
    if (m == "block") paged.block_size = batch_.pool().block_size();
    return batch_.join(&spec, paged);
  }
  py::array_t<float> step(py::handle id, py::handle token_obj) {
    const std::int64_t token = to_int(token_obj, "token");
    const std::int64_t top = std::int64_t{batch_.config().vocab} - 1;
    if (token < 0 || token > top) {
      throw py::value_error("token (" + std::to_string(token) + ") must be in 0 ... " + std::to_string(top) +
                            " (the model's vocabulary)");
    }
    return float_array(batch_.step(id_of(id), static_cast<kvevict::Token>(token)));
  }
  // Every listed sequence steps with its token, in order, in one call: the
  // logits as rows of one [len(ids), vocab] array, each equal to what step()
  // returns. Every id and token is checked before any sequence steps.
  py::array_t<float> step_all(py::handle ids_arg, py::handle tokens_arg) {
    const auto items = [](py::handle v, const std::string& what) {
      if (py::isinstance<py::str>(v) || py::isinstance<py::bytes>(v) || !py::isinstance<py::iterable>(v)) {
        throw py::type_error(what + " must be a sequence of integers, got " + type_name(v) + " (" + short_repr(v) +
                             ")");
      }
      std::vector<std::int64_t> out;
      for (const py::handle x : v) out.push_back(to_int(x, "an item of " + what));
      return out;
    };
    const std::vector<std::int64_t> ids = items(ids_arg, "ids");
    const std::vector<std::int64_t> tokens = items(tokens_arg, "tokens");
    if (ids.size() != tokens.size()) {
      throw py::value_error("ids has " + std::to_string(ids.size()) + " items and tokens " +
                            std::to_string(tokens.size()) + ": one token per listed sequence");
    }
    const std::int64_t top = std::int64_t{batch_.config().vocab} - 1;
    std::vector<kvevict::SequenceId> seqs;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0) {
        throw py::value_error("ids[" + std::to_string(i) + "] (" + std::to_string(ids[i]) + ") must be at least 0");
      }
      const auto id = static_cast<kvevict::SequenceId>(ids[i]);
      if (std::find(seqs.begin(), seqs.end(), id) != seqs.end()) {
        throw py::value_error("ids: sequence " + std::to_string(id) + " is listed twice (a call steps each once)");
      }
      (void)batch_.decoder(id);  // an id not in the batch: the library's error, before any step
      if (tokens[i] < 0 || tokens[i] > top) {
        throw py::value_error("tokens[" + std::to_string(i) + "] (" + std::to_string(tokens[i]) + ") must be in 0 ... " +
                              std::to_string(top) + " (the model's vocabulary)");
      }
      seqs.push_back(id);
    }
    const auto vocab = static_cast<py::ssize_t>(batch_.config().vocab);
    py::array_t<float> out({static_cast<py::ssize_t>(seqs.size()), vocab});
    float* data = out.mutable_data();
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const std::span<const float> logits = batch_.step(seqs[i], static_cast<kvevict::Token>(tokens[i]));
      std::copy(logits.begin(), logits.end(), data + static_cast<py::ssize_t>(i) * vocab);
    }
    return out;
  }
  void leave(py::handle id) { batch_.leave(id_of(id)); }
  py::list sequences() const {
    py::list out;
    for (const kvevict::SequenceId id : batch_.sequences()) out.append(id);
    return out;
  }
  py::dict pool_stats() const {
    const kvevict::BlockPool& pool = batch_.pool();
    const kvevict::PoolStats& s = pool.stats();
    py::dict d;
    d["blocks"] = s.blocks;
    d["free_blocks"] = pool.free_blocks();
    d["in_use"] = s.in_use;
    d["peak_in_use"] = s.peak_in_use;
    d["references"] = s.references;
    d["peak_saved"] = s.peak_saved;
    d["shared"] = s.shared;
    d["copies"] = s.copies;
    return d;
  }
  py::list held(py::handle id, py::handle cache) const {
    const kvevict::Decoder& d = batch_.decoder(id_of(id));
    const std::int64_t h = to_int(cache, "cache");
    if (h < 0 || h >= static_cast<std::int64_t>(d.config().head_count())) {
      throw py::value_error("cache (" + std::to_string(h) + ") must be in 0 ... " +
                            std::to_string(d.config().head_count() - 1) + " (layer * kv_heads + KV head)");
    }
    return position_list(d.held(static_cast<std::uint32_t>(h)));
  }
  std::size_t size() const noexcept { return batch_.size(); }

 private:
  static kvevict::SequenceId id_of(py::handle id) {
    const std::int64_t v = to_int(id, "id");
    if (v < 0) throw py::value_error("id (" + std::to_string(v) + ") must be at least 0");
    return static_cast<kvevict::SequenceId>(v);
  }
  kvevict::Batch batch_;
};

py::array_t<float> model_record(const ModelArg& model_arg, const Text& text_arg, const Int& tokens_arg) {
  const std::shared_ptr<const kvevict::Model> model = model_of(model_arg.obj).shared();
  const std::vector<std::uint8_t> text = text_of(text_arg.obj);
  const std::uint32_t tokens = to_u32(
      tokens_arg.obj, "tokens",
      "must be in 2 ... " + std::to_string(model->config().context) +
          " (the model's context), or 0 for the whole context");
  const auto heads = without_gil([&] { return kvevict::record_heads(*model, text, tokens); });
  const auto h = static_cast<py::ssize_t>(heads.size());
  const auto n = static_cast<py::ssize_t>(heads.empty() ? 0 : heads.front()->length());
  py::array_t<float> out({h, n, n});
  float* data = out.mutable_data();
  without_gil([&] {
    std::fill_n(data, static_cast<std::size_t>(h * n * n), 0.0F);
    for (py::ssize_t i = 0; i < h; ++i) {
      for (py::ssize_t t = 1; t < n; ++t) {
        const std::span<const float> row = heads[static_cast<std::size_t>(i)]->row(static_cast<std::uint32_t>(t));
        std::copy(row.begin(), row.end(), data + (i * n + t) * n);
      }
    }
  });
  return out;
}

// Prefill compression (kvevict/core/prefill.h): `window` is [rows, n], converted
// to float32 C order if it is not already. A bad window raises ValueError (the
// core's InputError message unchanged), like a bad parameter.
py::list prefill_positions(const Str& policy_arg, const AttentionStack& window_arg, const Int& budget_arg,
                           const py::kwargs& kwargs) {
  using Convert = py::array_t<float, py::array::c_style | py::array::forcecast>;
  const std::string name = to_str(policy_arg.obj, "policy");
  const kvevict::PolicyInfo& info = kvevict::find_policy(name);
  const kvevict::ParamMap params = params_of(info, kwargs);
  const std::int64_t budget = to_int(budget_arg.obj, "budget");
  const py::handle obj = window_arg.obj;
  const py::array arr = py::array::ensure(obj);
  if (!arr || arr.ndim() == 0) {
    throw py::type_error("window must be a [rows, n] array of attention weights, got " + type_name(obj) +
                         " (" + short_repr(obj) + ")");
  }
  check_numeric(arr, obj, "attention");
  if (arr.ndim() != 2) {
    std::string shape = "(";
    for (py::ssize_t d = 0; d < arr.ndim(); ++d) shape += (d == 0 ? "" : ", ") + std::to_string(arr.shape(d));
    shape += arr.ndim() == 1 ? ",)" : ")";
    throw py::value_error("window must be 2-D, [rows, n]: row i is the attention of query n - rows + i "
                          "over the prompt's n positions; got shape " + shape);
  }
  const Convert weights = Convert::ensure(arr);
  if (!weights) throw py::type_error("window could not be converted to float32");
  const auto rows = static_cast<std::size_t>(arr.shape(0));
  const auto n = static_cast<std::size_t>(arr.shape(1));
  const kvevict::PrefillWindow window{{weights.data(), rows * n}, rows, n};
  std::vector<kvevict::Position> kept;
  try {
    kept = without_gil([&] { return kvevict::prefill(info.name, params, budget, window); });
  } catch (const kvevict::InputError& e) {
    throw py::value_error(e.what());
  }
  py::list out;
  for (const kvevict::Position p : kept) out.append(p);
  return out;
}

py::list attention_persistence(const AttentionStack& attention, const IntList& lags_arg) {
  using Convert = py::array_t<float, py::array::c_style | py::array::forcecast>;
  const py::handle obj = attention.obj;
  const py::array arr = py::array::ensure(obj);
  if (!arr || arr.ndim() == 0) {
    throw py::type_error("attention must be a [heads, N, N] or [N, N] array, got " + type_name(obj) +
                         " (" + short_repr(obj) + ")");
  }
  check_numeric(arr, obj, "attention");
  const py::ssize_t nd = arr.ndim();
  if ((nd != 2 && nd != 3) || arr.shape(nd - 1) != arr.shape(nd - 2) || arr.shape(nd - 1) < 2) {
    std::string shape = "(";
    for (py::ssize_t d = 0; d < nd; ++d) shape += (d == 0 ? "" : ", ") + std::to_string(arr.shape(d));
    shape += nd == 1 ? ",)" : ")";
    throw py::value_error("attention must be [heads, N, N] or [N, N] with N >= 2 (row t: the weights "
                          "step t gave positions 0 ... t-1), got shape " + shape);
  }
  const Convert weights = Convert::ensure(arr);
  if (!weights) throw py::type_error("attention could not be converted to float32");
  const py::ssize_t heads = nd == 3 ? arr.shape(0) : 1;
  const py::ssize_t n = arr.shape(nd - 1);
  const py::handle lag_list = lags_arg.obj;
  if (py::isinstance<py::str>(lag_list) || !py::isinstance<py::iterable>(lag_list)) {
    throw py::type_error("lags must be a sequence of integers, got " + type_name(lag_list));
  }
  std::vector<std::uint32_t> lags;
  for (const py::handle lag : lag_list) {
    // Out-of-range lags are clamped to values the core refuses with its message.
    lags.push_back(static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(to_int(lag, "a lag"), 0, std::numeric_limits<std::uint32_t>::max())));
  }
  const float* data = weights.data();
  const auto rows = without_gil([&] {
    std::vector<std::unique_ptr<kvevict::MatrixTrace>> traces;
    std::vector<kvevict::Trace*> views;
    for (py::ssize_t h = 0; h < heads; ++h) {
      traces.push_back(std::make_unique<kvevict::MatrixTrace>("head" + std::to_string(h),
                                                              static_cast<std::uint32_t>(n)));
      for (py::ssize_t t = 1; t < n; ++t) {
        const std::span<float> row = traces.back()->row(static_cast<std::uint32_t>(t));
        std::copy_n(data + (h * n + t) * n, t, row.begin());
      }
      views.push_back(traces.back().get());
    }
    return kvevict::persistence(views, std::move(lags));
  });
  py::list out;
  for (const kvevict::PersistenceRow& r : rows) {
    py::dict d;
    d["lag"] = py::int_(r.lag);
    d["important"] = py::int_(r.important);
    d["persisted"] = py::int_(r.persisted);
    d["share"] = py::float_(r.share);
    d["baseRate"] = py::float_(r.base_rate);
    out.append(d);
  }
  return out;
}

}  // namespace

// ---- paged caches (docs/paged.md) ------------------------------------------------

template <class T>
py::list list_of(std::span<const T> values) {
  py::list out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = py::int_(values[i]);
  return out;
}

// A registry query ("votesOf" or "votes_of") on a policy an adapter drives.
py::float_ adapter_query(const kvevict::Policy& policy, const std::string& name, const py::args& args,
                         std::size_t first) {
  const kvevict::PolicyInfo& info = kvevict::find_policy(policy.name());
  const kvevict::QueryInfo* q = info.find_query(name);
  if (q == nullptr) q = info.find_query(camel_case(name));
  if (q == nullptr) throw py::value_error(info.name + " has no query '" + name + "'");
  if (args.size() != q->arity + first) {
    throw py::type_error(name + " takes " + std::to_string(q->arity) + " argument(s)");
  }
  std::vector<std::int64_t> ints;
  for (std::size_t i = first; i < args.size(); ++i) ints.push_back(to_int(args[i], "argument"));
  return py::float_(q->call(policy, ints));
}

class PyBlockEvictor {
 public:
  PyBlockEvictor(py::handle policy, py::handle block_budget, py::handle block_size, py::handle start_blocks,
                 py::handle recent_blocks, py::handle block_score, const py::kwargs& kwargs) {
    const kvevict::PolicyInfo& info = kvevict::find_policy(to_str(policy, "policy name"));
    kvevict::BlockParams bp;
    bp.block_budget = to_int(block_budget, "block_budget");
    bp.block_size = to_int(block_size, "block_size");
    bp.start_blocks = to_int(start_blocks, "start_blocks");
    bp.recent_blocks = to_int(recent_blocks, "recent_blocks");
    bp.score = kvevict::parse_block_score(to_str(block_score, "block_score"));
    impl_ = std::make_unique<kvevict::BlockEvictor>(info.name, params_of(info, kwargs), bp);
  }
  void on_decode_step(py::handle pos, py::handle attn) {
    const std::int64_t p = to_int(pos, "pos");
    if (attn.is_none()) {
      impl_->on_decode_step(p, std::nullopt);
      return;
    }
    const AttentionView view = attention_of(attn);
    impl_->on_decode_step(p, view.weights);
  }
  void on_step(py::handle pos, py::handle attention, py::handle key, py::handle value, py::handle queries) {
    const std::int64_t p = to_int(pos, "pos");
    const StepView view = step_view_of(attention, key, value, queries);
    impl_->on_step(p, view.inputs());
  }
  void on_origin(py::handle key, py::handle value, py::handle queries) {
    const StepView view = step_view_of(py::none(), key, value, queries);
    impl_->on_origin(view.inputs());
  }
  py::list evict_blocks(py::handle budget) { return list_of(impl_->evict_blocks(to_int(budget, "block_budget"))); }
  py::list evicted_positions() const { return list_of(impl_->evicted_positions()); }
  py::list removed_before() const { return list_of(impl_->removed_before()); }
  py::list positions() const { return list_of(impl_->positions()); }
  std::size_t kept_count() const { return impl_->kept_count(); }
  std::size_t block_count() const { return impl_->block_count(); }
  py::object block_score_of(py::handle block) {
    const double s = impl_->block_score_of(to_int(block, "block"));
    if (std::isinf(s)) return py::str("protected");
    return py::float_(s);
  }
  py::float_ query(const std::string& name, const py::args& args) const {
    return adapter_query(impl_->policy(), name, args, 0);
  }

 private:
  std::unique_ptr<kvevict::BlockEvictor> impl_;
};

class PyLayerBudget {
 public:
  PyLayerBudget(py::handle policy, py::handle heads, py::handle layer_budget, py::handle head_floor,
                const py::kwargs& kwargs) {
    const kvevict::PolicyInfo& info = kvevict::find_policy(to_str(policy, "policy name"));
    impl_ = std::make_unique<kvevict::LayerBudget>(
        info.name, params_of(info, kwargs),
        kvevict::LayerBudgetParams{to_int(heads, "heads"), to_int(layer_budget, "layer_budget"),
                                   to_int(head_floor, "head_floor")});
  }
  void on_decode_step(py::handle head, py::handle pos, py::handle attn) {
    const auto h = static_cast<std::size_t>(to_int(head, "head"));
    const std::int64_t p = to_int(pos, "pos");
    if (attn.is_none()) {
      impl_->on_decode_step(h, p, std::nullopt);
      return;
    }
    const AttentionView view = attention_of(attn);
    impl_->on_decode_step(h, p, view.weights);
  }
  void on_step(py::handle head, py::handle pos, py::handle attention, py::handle key, py::handle value,
               py::handle queries) {
    const auto h = static_cast<std::size_t>(to_int(head, "head"));
    const std::int64_t p = to_int(pos, "pos");
    const StepView view = step_view_of(attention, key, value, queries);
    impl_->on_step(h, p, view.inputs());
  }
  void on_origin(py::handle head, py::handle key, py::handle value, py::handle queries) {
    const auto h = static_cast<std::size_t>(to_int(head, "head"));
    const StepView view = step_view_of(py::none(), key, value, queries);
    impl_->on_origin(h, view.inputs());
  }
  std::size_t evict(py::handle budget) { return impl_->evict(to_int(budget, "layer_budget")); }
  py::list victims(py::handle head) const { return list_of(impl_->victims(static_cast<std::size_t>(to_int(head, "head")))); }
  std::size_t kept_count(py::handle head) const { return impl_->kept_count(static_cast<std::size_t>(to_int(head, "head"))); }
  kvevict::LayerBudget& core() { return *impl_; }
  py::float_ query(py::handle head, const std::string& name, const py::args& args) const {
    return adapter_query(impl_->head(static_cast<std::size_t>(to_int(head, "head"))), name, args, 0);
  }

 private:
  std::unique_ptr<kvevict::LayerBudget> impl_;
};

void bind_paged(py::module_& m) {
  py::class_<PyBlockEvictor>(m, "BlockEvictor", R"doc(
Whole-block eviction over any policy, for a paged KV cache (docs/paged.md).

BlockEvictor(policy, block_budget, block_size=16, start_blocks=0,
recent_blocks=0, block_score="sum", **params): the policy's budget is
block_budget * block_size. Each step call on_decode_step(pos, attention), then
evict_blocks(block_budget): the evicted logical block indices, ascending.
removed_before() gives, for each surviving block, the positions removed before
it (for key re-rotation); evicted_positions() the positions.
)doc")
      .def(py::init([](py::handle policy, py::handle block_budget, py::handle block_size, py::handle start_blocks,
                       py::handle recent_blocks, py::handle block_score, const py::kwargs& kwargs) {
             return std::make_unique<PyBlockEvictor>(policy, block_budget, block_size, start_blocks, recent_blocks,
                                                     block_score, kwargs);
           }),
           py::arg("policy"), py::arg("block_budget"), py::arg("block_size") = 16, py::arg("start_blocks") = 0,
           py::arg("recent_blocks") = 0, py::arg("block_score") = "sum")
      .def("on_decode_step", &PyBlockEvictor::on_decode_step, py::arg("pos"), py::arg("attention"))
      .def("on_step", &PyBlockEvictor::on_step, py::arg("pos"), py::arg("attention") = py::none(),
           py::arg("key") = py::none(), py::arg("value") = py::none(), py::arg("queries") = py::none(),
           "The step with every signal the caller has (Policy.on_step).")
      .def("on_origin", &PyBlockEvictor::on_origin, py::arg("key") = py::none(), py::arg("value") = py::none(),
           py::arg("queries") = py::none(), "Position 0's signals, before the first step (Policy.on_origin).")
      .def("evict_blocks", &PyBlockEvictor::evict_blocks, py::arg("block_budget"))
      .def("evicted_positions", &PyBlockEvictor::evicted_positions)
      .def("removed_before", &PyBlockEvictor::removed_before)
      .def("positions", &PyBlockEvictor::positions)
      .def("block_score_of", &PyBlockEvictor::block_score_of, py::arg("block"))
      .def_property_readonly("kept_count", &PyBlockEvictor::kept_count)
      .def_property_readonly("block_count", &PyBlockEvictor::block_count)
      .def("query", &PyBlockEvictor::query, py::arg("name"),
           "The policy's query by name (votesOf or votes_of), with its integer arguments.");

  py::class_<PyLayerBudget>(m, "LayerBudget", R"doc(
One budget per layer shared by its KV heads, AdaKV-style (docs/paged.md).

LayerBudget(policy, heads, layer_budget, head_floor=-1, **params): step each
head with on_decode_step(head, pos, attention); evict(layer_budget) takes the
lowest scores across heads (ties: lower position, then lower head), each head
keeping at least head_floor (-1: layer_budget // (5 * heads)); victims(head).
)doc")
      .def(py::init([](py::handle policy, py::handle heads, py::handle layer_budget, py::handle head_floor,
                       const py::kwargs& kwargs) {
             return std::make_unique<PyLayerBudget>(policy, heads, layer_budget, head_floor, kwargs);
           }),
           py::arg("policy"), py::arg("heads"), py::arg("layer_budget"), py::arg("head_floor") = -1)
      .def("on_decode_step", &PyLayerBudget::on_decode_step, py::arg("head"), py::arg("pos"), py::arg("attention"))
      .def("on_step", &PyLayerBudget::on_step, py::arg("head"), py::arg("pos"), py::arg("attention") = py::none(),
           py::arg("key") = py::none(), py::arg("value") = py::none(), py::arg("queries") = py::none(),
           "One head's step with every signal the caller has (Policy.on_step).")
      .def("on_origin", &PyLayerBudget::on_origin, py::arg("head"), py::arg("key") = py::none(),
           py::arg("value") = py::none(), py::arg("queries") = py::none(),
           "One head's position-0 signals, before its first step (Policy.on_origin).")
      .def("evict", &PyLayerBudget::evict, py::arg("layer_budget"))
      .def("victims", &PyLayerBudget::victims, py::arg("head"))
      .def("kept_count", &PyLayerBudget::kept_count, py::arg("head"))
      .def_property_readonly("heads", [](PyLayerBudget& l) { return l.core().heads(); })
      .def_property_readonly("head_floor", [](PyLayerBudget& l) { return l.core().head_floor(); })
      .def_property_readonly("head_budget", [](PyLayerBudget& l) { return l.core().head_budget(); })
      .def("query", &PyLayerBudget::query, py::arg("head"), py::arg("name"),
           "One head's policy query by name (scoreOf or score_of), with its integer arguments.");
}

// SweepRows, the list type sweep_model returns (with `skipped`).
void bind_sweep_rows(py::module_& m) {
  // sweep_model's result: a list of rows with the pairs skip_refused left out.
  py::dict attrs;
  attrs["__module__"] = "kvevict";
  attrs["__doc__"] = "The rows of sweep_model(), a list, with `skipped`: the value x budget pairs "
                     "skip_refused left out, one line each.";
  sweep_rows_type() = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
      "SweepRows", py::make_tuple(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyList_Type))),
      attrs);
  m.attr("SweepRows") = sweep_rows_type();
}

// The core's errors as Python's: ParameterError -> ValueError, any other
// kvevict::Error -> RuntimeError (registered for this module only).
void bind_exceptions() {
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kvevict::ParameterError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const kvevict::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}

// Policy: decode steps and eviction.
void bind_policy_steps(py::class_<PyPolicy>& policy) {
  policy
      .def(
          "on_decode_step",
          [](const PolicySelf& self, const Int& pos, const Attention& attn) {
            self.get().on_decode_step(pos.obj, attn.obj);
          },
          py::arg("pos"), py::arg("attn") = py::none(), R"doc(
One decode step: fold `attn` into the held positions, then admit position `pos`.

pos: absolute token index, above every held position.
attn: the weights the new token paid to the held positions, ascending; None
    means "no information" (never "all zeros"). A 1-D C-contiguous float32
    numpy array is read in place, without copying; other dtypes, lists and
    strided views are converted to float32 first (see last_attention_copied).
    Entries beyond kept_count() are ignored. 2-D input raises ValueError;
    non-numeric input TypeError; NaN, infinite or negative weights and
    out-of-order positions RuntimeError, before anything changes.
)doc")
      .def(
          "on_step",
          [](const PolicySelf& self, const Int& pos, const Attention& attention, const Attention& key,
             const Attention& value, const Attention& queries) {
            self.get().on_step(pos.obj, attention.obj, key.obj, value.obj, queries.obj);
          },
          py::arg("pos"), py::arg("attention") = py::none(), py::arg("key") = py::none(),
          py::arg("value") = py::none(), py::arg("queries") = py::none(), R"doc(
One decode step with every signal the caller has (docs/signals.md), then
admits position `pos`. For an attention or positional policy exactly
on_decode_step(pos, attention): the other signals are not read. A key-aware
policy (signals ("key",), ...) raises RuntimeError naming itself and the
signal, before anything changes, when a signal it reads is missing or of the
wrong length.

attention: as on_decode_step's attn (None: no information).
key, value: the admitted token's key (as stored, after RoPE) and value,
    headDim floats each. queries: its queries before RoPE, every query head of
    the group, head-major (groups x headDim). None: not given. Each is read
    like attn: a 1-D C-contiguous float32 array in place, anything else
    converted to float32.
)doc")
      .def(
          "on_origin",
          [](const PolicySelf& self, const Attention& key, const Attention& value, const Attention& queries) {
            self.get().on_origin(key.obj, value.obj, queries.obj);
          },
          py::arg("key") = py::none(), py::arg("value") = py::none(), py::arg("queries") = py::none(), R"doc(
Position 0's key, value and queries, once, before step 1: no step admits
position 0. A key-aware policy never given them treats position 0 as
unobserved and never evicts it; policies that read no keys ignore the call.
)doc")
      .def_property_readonly(
          "signals", [](const PolicySelf& self) { return signal_tuple(self.get().signals()); },
          "What on_step reads, as names: (\"attention\",) for the scoring policies, () for the "
          "positional ones, e.g. (\"key\",) for the key-aware ones.")
      .def(
          "evict", [](const PolicySelf& self, const Int& budget) { return self.get().evict(budget.obj); },
          py::arg("budget"), R"doc(
Drops positions so that at most `budget` remain (PyramidKV: its own share)
and returns them, ascending, as a list of ints. A negative budget raises
ValueError; a non-integer one TypeError.
)doc")
      .def(
          "kept_count", [](const PolicySelf& self) { return self.get().kept_count(); },
          "Number of positions held now.")
      .def(
          "__len__", [](const PolicySelf& self) { return self.get().kept_count(); },
          "Number of positions held now (same as kept_count()).")
      .def(
          "memory_bytes", [](const PolicySelf& self) { return self.get().memory_bytes(); },
           "Bytes of per-slot state allocated at construction (the decode path never allocates).");
}

// Policy: queries, introspection and the Python protocol methods.
void bind_policy_introspection(py::class_<PyPolicy>& policy) {
  policy
      .def(
          "query",
          [](const PolicySelf& self, const Str& name, const py::args& args) {
            return self.get().query(to_str(name.obj, "query name"), args);
          },
          py::arg("name"), R"doc(
Runs the registry query `name` ("votesOf" or "votes_of", ...) with integer
arguments. Raises ValueError when this policy has no such query.
)doc")
      .def_property_readonly(
          "name", [](const PolicySelf& self) { return self.get().name(); },
          "The registry name, e.g. \"scissorhands\".")
      .def_property_readonly(
          "params", [](const PolicySelf& self) { return dict_of(self.get().effective()); },
          "Every parameter with its effective value, camelCase keys as in the JSON results "
          "(a new dict each time).")
      .def_property_readonly(
          "queries",
          [](const PolicySelf& self) {
            py::list out;
            for (const auto& q : self.get().info().queries) out.append(snake_case(q.name));
            return out;
          },
          "Names of the introspection methods this policy has, e.g. [\"votes_of\"].")
      .def_property_readonly(
          "last_attention_copied", [](const PolicySelf& self) { return self.get().last_copied(); },
          "True when the last on_decode_step had to convert its attention to a fresh float32 "
          "array; False when it read the caller's buffer in place (or got None).")
      .def_property_readonly(
          "last_attention_address", [](const PolicySelf& self) { return self.get().last_address(); },
          "Address of the float32 buffer the last on_decode_step handed to the core (0 for None); "
          "equals arr.__array_interface__['data'][0] when no copy was made.")
      .def(
          "__getattr__",
          [](const PolicySelf& self_arg, const std::string& attr) -> py::object {
            const py::object self = py::reinterpret_borrow<py::object>(self_arg.obj);
            const PyPolicy* p = nullptr;
            try {
              p = &self_arg.get();
            } catch (const py::type_error&) {
              // Not initialised: no queries to resolve.
            }
            const kvevict::QueryInfo* q = nullptr;
            if (p != nullptr && attr == snake_case(camel_case(attr))) q = p->find_query(attr);
            if (q == nullptr) {
              const std::string camel = camel_case(attr);
              const auto all = kvevict::policies();
              const bool known = std::any_of(all.begin(), all.end(), [&](const auto* info) {
                return info->find_query(camel) != nullptr;
              });
              if (p != nullptr && known) {
                throw py::attribute_error(p->name() + " has no " + attr + "(): its queries are " +
                                          p->query_list());
              }
              throw py::attribute_error("'" + type_name(self) + "' object has no attribute '" +
                                        attr + "'");
            }
            const std::string name = q->name;
            const std::string doc = "The " + name + " query of " + p->name() + ": " +
                                    std::to_string(q->arity) + " integer argument(s).";
            return py::cpp_function(
                [self, name](const py::args& args) {
                  return checked<PyPolicy>(self).query(name, args);
                },
                py::name(attr.c_str()), py::doc(doc.c_str()));
          },
          py::arg("name"), "Resolves the policy's introspection queries as methods (votes_of, ...).")
      .def(
          "__dir__",
          [](const PolicySelf& self) {
            py::list names = py::module_::import("builtins").attr("object").attr("__dir__")(self.obj);
            for (const auto& q : self.get().info().queries) {
              const py::str method(snake_case(q.name));
              if (!names.contains(method)) names.append(method);
            }
            return names;
          },
          "Attributes, including the policy's query methods.")
      .def(
          "__repr__",
          [](const PolicySelf& self) {
            const std::string cls = type_name(self.obj);
            if (!checked_ok<PyPolicy>(self.obj)) return "<" + cls + " (not initialised)>";
            const auto& p = self.get();
            std::string out = cls + "(";
            bool first = true;
            if (cls == "Policy") {
              out += "'" + p.name() + "'";
              first = false;
            }
            for (const auto& [k, v] : p.effective()) {
              out += (first ? "" : ", ") + snake_case(k) + "=" + std::to_string(v);
              first = false;
            }
            return out + ")";
          },
          "Policy('name', param=value, ...) with every effective parameter.");
}

// Policy, the registry's policies built by name.
void bind_policy(py::module_& m) {
  py::class_<PyPolicy> policy(m, "Policy", R"doc(
A KV-cache eviction policy, built by name through the registry.

Policy(name, **params): `name` is a registry name ("scissorhands", "h2o",
"streaming-llm", "sliding-window", "tova", "snapkv", "pyramidkv"); parameters
are integers, in snake_case (recent_window=64) or camelCase (recentWindow=64);
omitted ones take their defaults. A parameter that breaks a rule, or an
unknown name, raises ValueError with the core's message.

Each decode step, pass the attention the new token paid to the held positions
(ascending) to on_decode_step(), then call evict(budget) when more than
`budget` are held. Introspection queries (votes_of, score_of, ...) exist only
on the policies that have them; see `queries`.
)doc");
  policy.def(py::init(&make_policy), py::arg("name"),
             "Builds the registry policy `name` with the given integer parameters.");
  bind_policy_steps(policy);
  bind_policy_introspection(policy);
}

// TraceIterator and the generated traces.
void bind_traces(py::module_& m) {
  py::class_<TraceIterator>(m, "TraceIterator",
                            "Iterator over a trace's decode steps: step t yields a new float32 "
                            "array of t weights over positions 0 ... t-1.")
      .def("__iter__", [](const TraceSelf& self) { return self; }, "Returns itself.")
      .def(
          "__next__", [](const TraceSelf& self) { return self.get().next(); },
          "The next step's weights (a copy).")
      .def(
          "__length_hint__", [](const TraceSelf& self) { return self.get().remaining(); },
          "Steps left.")
      .def_property_readonly(
          "id", [](const TraceSelf& self) { return self.get().id(); },
          "The trace id, e.g. \"decode-4096\".")
      .def_property_readonly(
          "steps", [](const TraceSelf& self) { return self.get().steps(); },
          "Steps this iterator yields in all.")
      .def_property_readonly(
          "step", [](const TraceSelf& self) { return self.get().step(); },
                             "Index of the step last yielded (0 before the first).");

  m.def(
      "trace",
      [](const TraceId& id, const OptionalInt& steps) {
        auto t = kvevict::open_trace(to_trace_id(id.obj));
        const std::uint32_t n = steps_of(*t, steps.obj);
        return TraceIterator(std::move(t), n);
      },
      py::arg("id") = "decode-4096", py::arg("steps") = py::none(), R"doc(
Iterates over the decode steps of the generated trace `id` (all of them, or
the first `steps`): each item is a new float32 numpy array of t weights for
step t = 1, 2, ... Unknown ids and out-of-range steps raise RuntimeError.
)doc");

  m.def(
      "trace_hash",
      [](const TraceId& id, const OptionalInt& steps) {
        auto t = kvevict::open_trace(to_trace_id(id.obj));
        const std::uint32_t n = steps_of(*t, steps.obj);
        return without_gil([&] { return kvevict::trace_hash(*t, n); });
      },
      py::arg("id") = "decode-4096", py::arg("steps") = py::none(),
      "FNV-1a 32 parity hash of the first `steps` steps of trace `id` (all when None), as an int.");

  m.def(
      "trace_ids",
      [] {
        py::list out;
        for (const std::string& id : kvevict::trace_ids()) out.append(id);
        return out;
      },
      "Ids of the generated traces, e.g. [\"decode-4096\"].");
}

// PyramidKV's per-layer budget.
void bind_pyramid_budget(py::module_& m) {
  m.def(
      "pyramid_budget",
      [](const Int& budget, const Int& layer, const Int& num_layers, const Int& ratio) {
        return kvevict::pyramid_budget(to_int(budget.obj, "budget"), to_int(layer.obj, "layer"),
                                       to_int(num_layers.obj, "num_layers"),
                                       to_int(ratio.obj, "ratio"));
      },
      py::arg("budget"), py::arg("layer"), py::arg("num_layers"), py::arg("ratio"), R"doc(
PyramidKV's share for `layer` of `num_layers` with average `budget`:
floor(2*budget*(r*(L-1) - layer*(r-1)) / ((r+1)*(L-1))), or `budget` when
L <= 1. Arguments outside their ranges raise ValueError.
)doc");
}

// The kernels' SIMD targets.
void bind_simd(py::module_& m) {
  // The kernels run at the SIMD target KVEVICT_SIMD names, if set (an unknown
  // target, or one the CPU lacks, fails the import with the reason).
  kvevict::simd::select_from_environment();
  m.def(
      "simd",
      [] {
        const auto list = [](const std::vector<std::string>& names) {
          py::list out;
          for (const auto& n : names) out.append(n);
          return out;
        };
        py::dict d;
        d["compiled"] = list(kvevict::simd::compiled_targets());
        d["supported"] = list(kvevict::simd::supported_targets());
        d["active"] = kvevict::simd::active_target();
        return d;
      },
      R"doc(
The SIMD targets of the kernels: {"compiled": [...], "supported": [...],
"active": name}, lowest first ("baseline", "sse4", "avx2", "avx512").
)doc");
  m.def(
      "select_simd", [](const std::string& name) { kvevict::simd::select_target(name); }, py::arg("target"),
      R"doc(
Runs every kernel at `target` from now on ("best" for the CPU's best). Raises
ValueError for an unknown target or one this CPU cannot run. Call it while
no other thread runs a policy.
)doc");
}

// The catalogue and the trace evaluations: policies, run, compare, row_schema,
// run_vectors.
void bind_evaluation(py::module_& m) {
  m.def("policies", &policy_descriptions, R"doc(
Every registered policy, in catalogue order: a list of dicts with "name",
"title", "summary", "params" (a list of {"name", "default", "help"}, camelCase
names) and "queries" (its introspection method names).
)doc");

  m.def("run", &run, py::arg("policy"), py::arg("budget") = py::none(),
        py::arg("trace") = "decode-4096", py::arg("steps") = py::none(),
        py::arg("paged") = py::none(), py::arg("keys") = py::none(), py::arg("values") = py::none(),
        py::arg("queries") = py::none(), R"doc(
Replays a trace through one policy at one budget; returns the dict the tool's
`run --format json` prints: {"policy", "trace", "budget", "params", "steps",
"metrics": {"retainedAttentionMass", "heavyHitterRecall", "evictionCalls"},
"evicted", "memoryBytes", "seconds"}.

policy: a registry name, or a Policy whose name and parameters are used (a
    fresh instance runs; the given one is not touched).
budget: the harness budget; None takes the policy's `budget` parameter.
paged: None, or {"block_size", "start_blocks", "recent_blocks", "block_score"
    ("sum", "mean", "max", "normsum"), "granularity", "layer_budget" (bool),
    "head_floor"}: block or shared-budget eviction, as the tool's
    --block-size ... --head-floor (docs/paged.md). granularity: which heads
    share a budget, "head" (each its own, the default), "layer" (the heads
    share budget x heads positions; layer_budget True is its older spelling,
    and the two must agree when both are given) or "sequence" (every head
    holds the same `budget` positions, one victim set for all); "layer" and
    "sequence" do not combine with block_size.
keys, values, queries: paths (str or os.PathLike) of the .npy files recorded
    beside an .npy trace (`kvevict record --keys/--values/--queries`), as the
    tool's run --trace FILE.npy --keys K.npy ...: with keys the key-aware
    policies (knorm, keydiff) replay; with values and queries too,
    expected-attention. None: not given. A policy that reads a signal not
    given raises ValueError naming it and the argument.
**params: policy parameters, snake_case or camelCase.
)doc");

  m.def("compare", &compare, py::arg("policies") = "all",
        py::arg("budgets") = canonical_budgets(),
        py::arg("overrides") = py::none(), py::arg("trace") = "decode-4096",
        py::arg("steps") = py::none(), py::arg("paged") = py::none(), py::arg("keys") = py::none(),
        py::arg("values") = py::none(), py::arg("queries") = py::none(), R"doc(
Every policy at every budget in one pass over the trace; returns the dict the
tool's `compare --format json` prints: {"trace", "rows": [run dicts]}, ranked
by retained mass at the middle budget, each policy's rows by budget.

policies: "all", "a,b", or a list of names.
budgets: a sequence of integers.
overrides: {"policy.param": value} or {"param": value} (every compared policy
    that has it) or {"policy": {"param": value}}; snake_case or camelCase.
paged: as for run().
keys, values, queries: as for run(); "all" is then every policy the files
    can feed (nine with keys, all ten with keys, values and queries).
)doc");

  m.def("row_schema", [] { return json_loads(kvevict::result_schema_json(-1)); }, R"doc(
Every command's JSON described, as `kvevict schema` prints it: the envelope
{"command": "schema", "model": None, "rows": [...], "envelope": [...]}, a row
per command (and per variant: "compare" with variant "--model") {"command",
"variant", "model", "rows": [field...], "extra": [field...]}, each field a
dict {"name", "type" ("string", "integer", "number", "boolean", "object" or
"array"), "unit" (when it has one), "description", "presentWhen" (when not
always present), "fields" (members of an object or of each array element)}, in
output order: run() returns a "run" row, compare() the "compare" document,
perplexity() and compare_model() "perplexity" rows, serve_bench() "serve-bench"
rows, tasks() "tasks" rows, stream() the "stream" document, choose() the
"choose" document.
)doc");

  m.def("run_vectors", &run_vectors, py::arg("paths"), R"doc(
Replays test-vector files, or folders of *.vectors.json, through the C++
runner; returns {"passed": int, "failed": int, "failures": [one line each]}
(counts are cases). A path that does not exist raises RuntimeError.
)doc");
}

// The real model: Model.
void bind_model(py::module_& m) {
  py::class_<PyModel>(m, "Model", R"doc(
A model file kvevict reads (docs/models.md): a .kvm file (the byte-level
transformer of model/FORMAT.md), a .gguf, or a safetensors model (a folder
with config.json, or its model.safetensors).

Model(path, context=0, matmul="exact"): reads and checks the whole file; a
missing, truncated or corrupt file raises RuntimeError naming the file and
what is wrong. context: positions to run at (0: the trained context, at most
4096; over the trained context raises RuntimeError), as the tool's
--context. matmul: how the weight products are computed, as the tool's
--matmul: "exact", or "int8" (against activations rounded to 8-bit blocks as
llama.cpp rounds them; docs/performance.md, "8-bit products"), which a
kvevict-tiny .kvm refuses. Immutable once loaded: one Model serves any
number of Decoders and evaluations.
)doc")
      .def(py::init(&load_model), py::arg("path"), py::arg("context") = 0, py::arg("matmul") = "exact",
           "Loads and checks the model file at `path`.")
      .def_property_readonly(
          "matmul", [](const ModelSelf& self) { return kvevict::matmul_mode_name(self.get().get().matmul_mode()); },
          "How its products are computed: \"exact\" or \"int8\".")
      .def_property_readonly(
          "config", [](const ModelSelf& self) { return config_dict(self.get().get().config()); },
          "The model's shape, a new dict each time: {\"vocab\", \"layers\", \"heads\" (per layer), "
          "\"width\", \"ff\", \"context\" (positions it was trained on), \"rope_base\", \"norm_eps\"}.")
      .def_property_readonly(
          "parameter_count", [](const ModelSelf& self) { return self.get().get().parameter_count(); },
          "Number of float32 parameters.")
      .def_property_readonly(
          "path", [](const ModelSelf& self) { return self.get().get().path(); },
          "The file the model was loaded from, as given.")
      .def(
          "__repr__",
          [](const ModelSelf& self) {
            if (!checked_ok<PyModel>(self.obj)) return std::string("<Model (not initialised)>");
            const kvevict::Model& model = self.get().get();
            const kvevict::ModelConfig& c = model.config();
            return "<Model " + py::repr(py::str(model.path())).cast<std::string>() +
                   ": layers=" + std::to_string(c.layers) + ", heads=" + std::to_string(c.heads) +
                   ", kv_heads=" + std::to_string(c.kv_heads) +
                   ", width=" + std::to_string(c.width) + ", context=" + std::to_string(c.context) +
                   ", " + std::to_string(model.parameter_count()) + " parameters>";
          },
          "<Model 'path': layers=..., heads=..., kv_heads=..., width=..., context=..., N parameters>.");
}

// The real model: Decoder, one sequence token by token.
void bind_decoder(py::module_& m) {
  py::class_<PyDecoder>(m, "Decoder", R"doc(
One sequence through a Model, token by token, with a real KV cache per
(layer, head). Head h = layer * kv_heads + KV head has its own cache; give it a
policy with set_policy() and it holds at most `budget` positions: the
positions the policy names are physically removed from that head's keys and
values.

Decoder(model, capacity=0, positions="original"): room for `capacity`
positions a cache (0 = the model's context; more raises RuntimeError).
positions (docs/streaming.md): "original" rotates each key at its token's
position in the sequence; "cache" at its index among the positions its cache
holds, the query at the index after the last (StreamingLLM); with nothing
evicted the two give the same logits to the bit. With a policy on every
cache the decoder steps on past the capacity and the model's context
(position counts every token fed). step() holds the GIL (it is short).
)doc")
      .def(py::init([](const ModelArg& model, const Int& capacity, const py::object& positions) {
             kvevict::DecoderOptions options;
             options.capacity = to_u32(capacity.obj, "capacity", "must be at least 0 (0 = the model's context)");
             options.positions = position_mode_of(positions, "positions");
             return std::make_unique<PyDecoder>(model_of(model.obj).shared(), options);
           }),
           py::arg("model"), py::arg("capacity") = 0, py::arg("positions") = "original",
           "A decoder for `model` with room for `capacity` positions a cache (0 = the model's context), keys "
           "at their tokens' positions (\"original\") or at their index in the cache (\"cache\").")
      .def(
          "step", [](const DecoderSelf& self, const Int& token) { return self.get().step(token.obj); },
          py::arg("token"), R"doc(
Feeds the next byte (0 ... 255) at position `position` and returns the logits
for the byte after it: a new float32 array of `vocab` entries. Each head with a
policy first shows it that head's softmax weights over the positions it holds
(ascending), then evicts down to its budget. When a cache without a policy is
full (the capacity reached), or when a policy breaks the contract,
RuntimeError.
)doc")
      .def(
          "set_policy",
          [](const DecoderSelf& self, const Int& head, const OptionalPolicy& policy,
             const OptionalInt& budget) { self.get().set_policy(head.obj, policy.obj, budget.obj); },
          py::arg("head"), py::arg("policy"), py::arg("budget") = py::none(), R"doc(
Gives head `head` (= layer * kv_heads + KV head) a policy held to `budget` (None:
the policy's own `budget` parameter); None removes it. Only before the first
token (RuntimeError after). The policy must be fresh and serve this head
alone: the decoder keeps it alive and drives it, and stepping it by hand
meanwhile raises RuntimeError. A budget below 1 raises ValueError.
)doc")
      .def(
          "policy", [](const DecoderSelf& self, const Int& head) { return self.get().policy(head.obj); },
          py::arg("head"), "The Policy driving head `head`, or None.")
      .def(
          "reset", [](const DecoderSelf& self) { self.get().reset(); },
          "Back to an empty cache at position 0, with every policy detached (give new ones).")
      .def(
          "held", [](const DecoderSelf& self, const Int& head) { return self.get().held(head.obj); },
          py::arg("head"), "Positions head `head` holds now, ascending (after this step's eviction).")
      .def(
          "attended", [](const DecoderSelf& self, const Int& head) { return self.get().attended(head.obj); },
          py::arg("head"),
          "Positions head `head` attended over on the last step, ascending, the newest token last.")
      .def(
          "attention",
          [](const DecoderSelf& self, const Int& head) { return self.get().attention(head.obj); },
          py::arg("head"),
          "The softmax weights head `head` gave attended(head) on the last step: a new float32 array "
          "(the newest token's weight on itself last).")
      .def_property_readonly(
          "position", [](const DecoderSelf& self) { return self.get().position(); },
          "Tokens fed so far (the position the next token takes).")
      .def_property_readonly(
          "evicted", [](const DecoderSelf& self) { return self.get().evicted(); },
          "Positions removed so far, all heads together.")
      .def_property_readonly(
          "capacity", [](const DecoderSelf& self) { return self.get().capacity(); },
          "Tokens this decoder has room for.")
      .def_property_readonly(
          "head_count", [](const DecoderSelf& self) { return self.get().head_count(); },
          "Layers x heads: the number of caches (and of policies it can drive).")
      .def(
          "__repr__",
          [](const DecoderSelf& self) {
            if (!checked_ok<PyDecoder>(self.obj)) return std::string("<Decoder (not initialised)>");
            const PyDecoder& d = self.get();
            return "<Decoder position=" + std::to_string(d.position()) + " capacity=" +
                   std::to_string(d.capacity()) + " heads=" + std::to_string(d.head_count()) + ">";
          },
          "<Decoder position=... capacity=... heads=...>.");
}

// Serving: Batch (sequences over one block pool) and serve_bench.
void bind_serving(py::module_& m) {
  py::class_<PyBatch>(m, "Batch", R"doc(
Sequences decoding together over one pool of KV blocks (docs/serving.md):
each joins or leaves between steps, with its own policy per cache; with
share_prefix, equal full blocks (same cache, tokens, positions and bytes) are
held once and copied before a sequence changes them. Every sequence's logits
equal its solo run's to the bit.

Batch(model, pool_blocks, capacity=0, block_size=16, share_prefix=True,
positions="original"): pool_blocks must give one sequence a block per cache
(layers x kv_heads). positions: where every sequence's kept keys sit in
rotary space, as for Decoder; a sequence with a policy steps on past the
capacity and the model's context.
)doc")
      .def(py::init([](const ModelArg& model, const Int& pool_blocks, const Int& capacity, const Int& block_size,
                       const py::object& share_prefix, const py::object& positions) {
             kvevict::BatchOptions o;
             const std::int64_t pool = to_int(pool_blocks.obj, "pool_blocks");
             if (pool < 1) throw py::value_error("pool_blocks (" + std::to_string(pool) + ") must be at least 1");
             o.pool_blocks = static_cast<std::uint64_t>(pool);
             o.capacity = to_u32(capacity.obj, "capacity", "must be at least 0 (0 = the model's context)");
             o.block_size = to_u32(block_size.obj, "block_size", "must be at least 1");
             if (!py::isinstance<py::bool_>(share_prefix)) {
               throw py::type_error("share_prefix must be a bool, got " + type_name(share_prefix));
             }
             o.share_prefix = share_prefix.cast<bool>();
             o.positions = position_mode_of(positions, "positions");
             return std::make_unique<PyBatch>(model_of(model.obj).shared(), o);
           }),
           py::arg("model"), py::arg("pool_blocks"), py::arg("capacity") = 0, py::arg("block_size") = 16,
           py::arg("share_prefix") = true, py::arg("positions") = "original",
           "A batch over a new pool of `pool_blocks` blocks.")
      .def(
          "join",
          [](PyBatch& self, const OptionalPolicy& policy, const OptionalInt& budget, const py::object& params,
             const Str& mode) { return self.join(policy.obj, budget.obj, params, mode.obj); },
          py::arg("policy") = py::none(), py::arg("budget") = py::none(), py::arg("params") = py::none(),
          py::arg("mode") = "token",
          "A new sequence; returns its id. policy None: the full cache; else a policy name (or Policy, whose "
          "parameters are used) at `budget` per cache, evicting positions (mode \"token\") or whole pool "
          "blocks (\"block\"). RuntimeError when fewer blocks are free than the sequence has caches.")
      .def(
          "step", [](PyBatch& self, const Int& id, const Int& token) { return self.step(id.obj, token.obj); },
          py::arg("id"), py::arg("token"),
          "Feeds sequence `id` its next byte; returns a copy of the logits (float32, 256). A failed step "
          "(the pool exhausted) raises RuntimeError naming the sequence, which leaves the batch; the others go on.")
      .def(
          "step_all",
          [](PyBatch& self, const IntList& ids, const IntList& tokens) { return self.step_all(ids.obj, tokens.obj); },
          py::arg("ids"), py::arg("tokens"),
          "One tick in one call: each sequence in `ids` gets its token from `tokens`, in order; returns their "
          "logits as a new float32 array [len(ids), vocab], row i equal to step(ids[i], tokens[i]). Every id "
          "and token is checked first (ValueError, RuntimeError for an id not in the batch; nothing steps); a "
          "step that fails raises as step() does, after the sequences before it have stepped.")
      .def(
          "leave", [](PyBatch& self, const Int& id) { self.leave(id.obj); }, py::arg("id"),
          "Sequence `id` leaves; its block references go back to the pool.")
      .def_property_readonly(
          "sequences", [](const PyBatch& self) { return self.sequences(); }, "The ids of the sequences in the batch.")
      .def(
          "held", [](const PyBatch& self, const Int& id, const Int& cache) { return self.held(id.obj, cache.obj); },
          py::arg("id"), py::arg("cache"), "Positions cache `cache` of sequence `id` holds, ascending.")
      .def(
          "pool_stats", [](const PyBatch& self) { return self.pool_stats(); },
          "The pool, measured: {\"blocks\", \"free_blocks\", \"in_use\", \"peak_in_use\", \"references\", "
          "\"peak_saved\", \"shared\", \"copies\"}.")
      .def("__len__", [](const PyBatch& self) { return self.size(); }, "Sequences in the batch.");

  m.def("serve_bench", &model_serve_bench, py::arg("model"), py::arg("text"), py::arg("sequences") = py::list(py::make_tuple(4)),
        py::arg("policies") = "none", py::arg("budget") = 128, py::arg("modes") = "token",
        py::arg("sharing") = true, py::arg("chunks") = py::list(py::make_tuple(0)), py::arg("shared_prefix") = 512,
        py::arg("tokens") = 0, py::arg("prompt") = 0, py::arg("window") = 32, py::arg("block_size") = 16,
        py::arg("pool_blocks") = 0, py::arg("overrides") = py::none(), py::arg("positions") = "original",
        py::arg("granularity") = "head", R"doc(
`kvevict serve-bench`: sequences decoding together over one block pool, one
run per sequence count x policy ("none": the full cache) x mode ("token",
"block") x sharing x chunk. Returns a list of dicts shaped as
`kvevict serve-bench --format json` writes them: {"policy", "budget", "mode",
"prefixSharing", "sequences", "sharedPrefix", "tokens", "blockSize",
"poolBlocks", "peakBlocks", "blocksSavedBySharing", "sharedBlocks",
"copiedBlocks", "peakPositions", "peakCachePositions", "positionsHeld",
"evicted", "leakedBlocks", "tokensPerSecond", "seconds"} (chunked runs add
"chunk" and "prompt"; a policy's rows "granularity" when it is not head).
docs/serving.md.

positions: where kept keys sit in rotary space, "original" or "cache" (as
    for Decoder). tokens may then go past the model's context when every run
    evicts while decoding.
granularity: which caches of a sequence share its budget (docs/paged.md,
    "Granularity"): "head" (each cache its own, the default), "layer" (a
    layer's KV heads share budget x KV heads positions) or "sequence" (every
    cache, all layers and KV heads, holds the same `budget` positions, as
    llama.cpp's cells). Token-mode runs that evict while decoding only: with
    "layer" or "sequence", a "block" mode or a chunk above 0 raises
    ValueError.
)doc");
}

// Streaming past the context: stream and sink_shares.
void bind_streaming(py::module_& m) {
  m.def("stream", &model_stream, py::arg("model"), py::arg("text"), py::arg("policies") = "default",
        py::arg("budgets") = py::make_tuple(256, 512), py::arg("positions") = py::make_tuple("original", "cache"),
        py::arg("tokens") = 0, py::arg("segment") = 0, py::arg("full_cache") = true, py::arg("recompute") = 0,
        py::arg("recompute_tokens") = 0, py::arg("kv_precision") = "fp32", py::arg("overrides") = py::none(),
        py::arg("kv_residual") = py::none(), py::arg("granularity") = "head", R"doc(
`kvevict stream` (docs/streaming.md): one long text read as a single
sequence, past the model's context, by decoders whose caches a policy holds
at its budget; each predicted token scored as perplexity() does, reported by
segment of the stream. Returns what `kvevict stream --format json` prints,
parsed: {"rows": [{"policy" (None for the full cache, "recompute" for the
recomputed window), "label", "budget", "params", "positions", "tokens",
"predictions", "bytes", "bitsPerByte", "pastTrainedContext",
"peakPositions", "evicted", "kvPrecision", "tokenizer", "seconds",
"segments": [{"begin", "end", "predictions", "bytes", "bitsPerByte",
"perplexity"}]}]} (a policy's rows add "granularity": "sequence" at that
granularity): the full cache first (it stops at the context), then each
policy x budget at each position mode, then the recomputed window.

text: bytes or a pathlib.Path.
policies: "default" (sliding-window, streaming-llm:sinks=1,
    streaming-llm:sinks=4, h2o, tova, scissorhands, snapkv), "none" or None
    (no policy), or items "name" / "name:key=value[:key=value]",
    comma-separated or as a list.
budgets: positions a cache holds, each below the model's context.
positions: "original", "cache", "original,cache" or a sequence of them.
tokens: tokens of the stream, BOS included (0 = the whole text).
segment: tokens a segment of the report (0 = the model's context).
full_cache: the full cache too, as far as the context.
recompute, recompute_tokens: StreamingLLM's sliding window with
    re-computation, a cache rebuilt over the `recompute` tokens before each
    token, over the stream's first recompute_tokens tokens (0: not run).
kv_precision, kv_residual: as for perplexity(). overrides: as for compare(),
    under each item's own parameters.
granularity: "head" (each cache its own budget, the default) or "sequence"
    (every cache, all layers and KV heads, holds the same `budget` positions,
    one victim set for all: llama.cpp's cells; docs/paged.md). "layer"
    raises ValueError: a head could then hold more than the budget.
Every policy and budget is checked before any work (ValueError). Runs on
every core without the GIL.
)doc");

  m.def("sink_shares", &model_sink_shares, py::arg("model"), py::arg("text"), py::arg("tokens") = 0, R"doc(
The attention sink (docs/streaming.md, `kvevict stream --sinks`): on the full
cache over the first `tokens` tokens of `text` (0 = the model's context), the
share of each step's attention the first position and the first four draw,
by layer, beside the share spread evenly would give them. Returns a list of
dicts {"layer", "first", "firstFour", "evenFirst", "evenFirstFour"}.
)doc");
}

// The model's evaluations by perplexity: perplexity, compare_model, sweep_model.
void bind_perplexity(py::module_& m) {
  m.def("perplexity", &model_perplexity, py::arg("model"), py::arg("text"),
        py::arg("runs") = py::none(), py::arg("max_windows") = 0, py::arg("paged") = py::none(),
        py::arg("prefill") = 0, py::arg("prefill_window") = 32, py::arg("kv_precision") = "fp32",
        py::arg("kv_residual") = py::none(), R"doc(
Perplexity of `model` over `text` with every (layer, head) evicting through
its own instance of each run's policy, beside the full cache. Returns a list
of dicts, the full cache first, then one per run in order, shaped as
`kvevict perplexity --format json` writes them (row_schema()["perplexity"]):
{"policy", "budget" (both None for the full cache), "params" (every
effective parameter, layer 0's for pyramidkv), "perplexity", "bitsPerByte",
"predictions", "evicted" (positions removed, all heads and windows),
"seconds"}.

text: bytes (a file: open(path, "rb").read(), or a pathlib.Path). It is cut
    into windows of the model's context, each from an empty cache; a text of
    B bytes in W windows makes B - W predictions.
runs: a list of runs, each a policy name or Policy (its parameters are
    used), (policy, budget) or (policy, budget, {"param": value}); a budget
    of None takes the policy's `budget` parameter.
max_windows: use only the first windows of the text (0 = all).
paged: as for run(); the decoders then run on a paged store and each row
    gains "peakPositions" (measured), and in block mode "blockSize" and
    "peakBlocks". granularity "layer" shares budget x KV heads positions
    among a layer's KV heads; "sequence" has every cache of the sequence,
    all layers and KV heads, hold the same `budget` positions (llama.cpp's
    cells; pyramidkv, whose budget differs by layer, raises ValueError
    there). A policy's rows then gain "granularity" ("layer" or "sequence").
prefill: the prefill moment (docs/tasks.md): each window's first `prefill`
    bytes are read with the full cache and every cache is compressed once to
    its budget (prefill(), scored from the attention rows of the last
    `prefill_window` of those bytes); the rest runs without eviction and only
    it is scored, the full cache's too. Rows gain "prefill". 0 (the default)
    evicts while decoding. Does not combine with `paged`.
kv_precision: the precision every decoder stores keys and values at
    (docs/paged.md, "Fewer bits a position"): "fp32" (the default), "fp16",
    "int8" (per token) or "int4" (KIVI: keys per channel over groups of
    kv_residual tokens, values per token). Quantized, the rows start with the
    fp32 full cache (every row's "extraBitsPerByte" is measured from it),
    then the full cache at that precision. Every row has "kvPrecision",
    "kvResidual", "bytesPerPosition" and "peakCacheBytes" (measured).
kv_residual: newest positions kept at fp32 until this many arrive (None:
    32 for int4, 0 otherwise).

Every policy is built before any work: a bad parameter raises ValueError.
Runs on every core without the GIL (it cannot be interrupted).
)doc");

  m.def("compare_model", &model_compare, py::arg("model"), py::arg("text"),
        py::arg("policies") = "all", py::arg("budgets") = py::make_tuple(64, 128, 256, 512),
        py::arg("overrides") = py::none(), py::arg("max_windows") = 0, py::arg("paged") = py::none(),
        py::arg("prefill") = 0, py::arg("prefill_window") = 32, py::arg("kv_precision") = "fp32",
        py::arg("kv_residual") = py::none(), R"doc(
Every policy at every budget by perplexity on `model` over `text`, with the
attention proxies measured on the model's own full-cache attention. Returns
a list of dicts: the full cache first, then ranked by perplexity at the
middle budget (lower first, ties share a rank), each policy's rows by
ascending budget: "rank" (None for the full cache) then perplexity()'s keys,
with "retainedAttentionMass", "heavyHitterRecall" and "evictionCalls" after
"evicted" (None for the full cache).

policies, budgets, overrides: as for compare().
max_windows, paged, prefill, prefill_window, kv_precision, kv_residual: as
    for perplexity(). With a
    prefill there are no proxy keys (they replay decode-time eviction).
    With paged's granularity "layer" or "sequence" the proxies are replayed
    at that granularity too, and a policy's rows carry "granularity".
)doc");

  m.def("sweep_model", &model_sweep, py::arg("model"), py::arg("text"), py::arg("policy"), py::arg("param"),
        py::arg("values"), py::arg("budgets") = py::make_tuple(64, 128, 256), py::arg("params") = py::none(),
        py::arg("max_windows") = 0, py::arg("kv_precision") = "fp32", py::arg("kv_residual") = py::none(),
        py::arg("skip_refused") = false, R"doc(
One policy's parameter swept on `model` over `text` (`kvevict sweep --model`):
perplexity() rows, the full cache first, then each value x budget (value-major,
budget-minor), each with its paired 95 % interval and "params" holding the
value. param: the parameter's name, camelCase or snake_case ("budget" sweeps
the budget itself and ignores `budgets`). params: the policy's other
parameters as a dict. max_windows, kv_precision, kv_residual: as for
perplexity(). An unknown parameter raises ValueError before any work.
skip_refused: leave out the value x budget pairs the policy's rules refuse
(a recent_window of 96 at budget 64) instead of raising at the first, as the
tool's --skip-refused; a sweep that leaves nothing to run still raises. The
result is a list (kvevict.SweepRows) whose `skipped` attribute lists the
pairs left out, one line each ("recentWindow=96 at budget 64: <the rule>"),
the lines the tool writes to stderr; empty without skip_refused.
)doc");
}

// The model's retrieval tasks and decode speed: tasks, bench_model.
void bind_tasks_and_bench(py::module_& m) {
  m.def("tasks", &model_tasks, py::arg("model"), py::arg("text"), py::arg("tasks") = "passkey",
        py::arg("lengths") = py::make_tuple(1024), py::arg("depths") = 5, py::arg("samples") = 20,
        py::arg("policies") = "all", py::arg("budgets") = py::make_tuple(128), py::arg("moments") = "decode",
        py::arg("overrides") = py::none(), py::arg("seed") = 1, py::arg("window") = 32, py::arg("chunk") = 0,
        py::arg("kv_precision") = "fp32", py::arg("kv_residual") = py::none(), py::arg("granularity") = "head",
        R"doc(
`kvevict tasks`: retrieval tasks (passkey, multikey, multivalue, vartrack,
copy) answered by `model` with greedy decoding, needles hidden in `text`
(filler, e.g. model/heldout-sample.txt), scored by exact match (docs/tasks.md).
Returns the rows `kvevict tasks --format json` prints, as dicts: {"task",
"policy" ("full" for the full cache), "budget", "moment", "length", "depth",
"samples", "correct", "accuracy", "accuracy_low", "accuracy_high", "evicted",
"kvPrecision", "kvResidual", "bytesPerPosition"} (a policy's rows add
"granularity" when it is not head): every task x length x depth, the full
cache first, then each policy x budget x moment.

tasks: "passkey", "a,b", a list of names, or "all".
lengths: sample lengths in positions (at most the model's context).
depths: needle depths per length, (i + 0.5) / depths (1 ... 100).
samples: per task x length x depth (1 ... 100000).
policies: "all" (all ten), "a,b", a list of names, or None / "none" (the full
    cache only).
budgets: positions per cache. moments: "decode", "prefill", "prefill-query",
    comma-separated or a list. overrides: as for compare().
seed: samples are reproducible from it. window, chunk: the prefill moments'
    attention rows and chunk size (0: once). kv_precision, kv_residual: as
    for perplexity().
granularity: which caches share the budget at the decode moment
    (docs/paged.md): "head" (each its own, the default), "layer" (a layer's
    KV heads share budget x KV heads positions) or "sequence" (every cache
    holds the same `budget` positions). With "layer" or "sequence", a
    prefill moment raises ValueError.
Runs on every core without the GIL.
)doc");

  m.def("bench_model", &model_bench, py::arg("model"), py::arg("text") = py::none(), py::arg("tokens") = 1024,
        py::arg("rounds") = 5, py::arg("policies") = py::make_tuple("h2o", "scissorhands", "snapkv", "sliding-window"),
        py::arg("budgets") = py::make_tuple(128), py::arg("prompt") = 0, py::arg("threads") = py::make_tuple(0),
        py::arg("together") = false, py::arg("prefill_chunk") = 256, py::arg("prompt_logits") = "all", R"doc(
`kvevict bench --model`: decode speed on `model` with the full cache and with
each policy x budget, where a step's time goes (the decode profile), against
the floor of reading the weights once a token. Returns the rows `kvevict bench
--model --format json` prints (kvevict/model/serving/decode_bench.h): {"mode"
("decode", "prefill", "together", "prefill together"), "policy" ("full cache" first), "budget" (0
for it), "threads", "runs", "prompt", "tokens", "tokensPerSecond" (the median
round, wall time), "tokensPerSecondSpread": {"min", "median", "max"},
"weightBytesPerToken", "readBandwidthGBps", "floorTokensPerSecond",
"ofFloor", "speedup", "shares": {"projections", "activation", "attention",
"policies", "other"} (they sum to 1 on a decode row)}.

text: bytes or a pathlib.Path; None reads model/heldout-sample.txt from the
    working folder, as the tool's default --text.
tokens: decoded a pass after the prompt (at most the text and the context).
    rounds: passes a run (1 ... 1000); each is timed, then profiled.
policies: "all", "a,b" or a list of names. budgets: a sequence of integers.
prompt: tokens prefilled before the timed ones (and a prefill row timing them).
threads: thread counts, each timed (0: every core). together: and a row
    stepping every run as one batch (with a prompt, and a "prefill together"
    row feeding every run's prompt as one batch, several tokens a pass).
prefill_chunk: tokens a prefill pass takes at once (1 ... 4096).
prompt_logits: the prompt's logits computed: "all" (every token's, as
    perplexity scores them) or "last" (the last token's only, as a server
    needs; llama.cpp's default).
)doc");
}

// The model's answer to which policy: choose.
void bind_choose(py::module_& m) {
  m.def("choose", &model_choose, py::arg("model"), py::arg("text"), py::arg("budget") = 256,
        py::arg("policies") = py::none(), py::arg("minutes") = 15.0, py::arg("windows") = py::none(),
        py::arg("samples") = py::none(), py::arg("granularity") = "head", R"doc(
`kvevict choose` (docs/choosing.md): which policy to run on `model` at
`budget`, and what it costs, within a time budget. A probe times the text's
first 64 positions through every run, and the plan fits perplexity windows
(about 60 % of the time), passkey samples at two depths (30 %) and decode
speed into `minutes`, each stage stopping at its share; then every policy is
ranked by extra bits per byte. Returns what `kvevict choose --format json` prints,
parsed: {"command": "choose", "plan": {"windows", "windowsAvailable",
"context", "passkeyLength", "depths", "samples", "decodeTokens",
"probeSeconds", "windowSeconds", "sampleSeconds", "plannedSeconds"},
"rows": [{"rank", "policy", "budget", "extraBitsPerByte", "extraLow",
"extraHigh" (None without an interval), "passkeyCorrect", "passkeySamples",
"passkeyAccuracy", "tokensPerSecond", "kvBytes"}] (rank 1: the fewest extra
bits), "fullCache": {"passkeyAccuracy", "tokensPerSecond", "kvBytes"},
"recommendation" (one line naming rank 1 and why), "narrow" (the commands
that would narrow the intervals), "windows" and "samples" (what ran: windows
of plan's "context" positions, passkey samples a depth), "seconds"}.

text: bytes or a pathlib.Path (whose path the narrowing commands then name;
    bytes are "TEXT" there). It is scored and holds the passkeys' needles.
budget: positions each cache keeps (1 ... context - 1, with room left for a
    passkey sample that evicts).
policies: None (every policy the granularity can run), "all", "a,b" or a
    list of names.
minutes: the time budget, probes included (0.1 ... 1440).
windows, samples: fix the plan instead of timing it (None or 0: planned;
    the windows at least 2 and at most the text's, the samples a depth at
    most 100). With both fixed the probes are skipped, and the rows are the
    same on every machine but for their decode speed.
granularity: "head" (each cache its own budget, the default) or "sequence"
    (every cache holds the same `budget` positions: llama.cpp's cells;
    docs/paged.md). "layer" raises ValueError.
Every policy and the budget are checked before any work (ValueError); a text
too short for two windows is RuntimeError. Runs on every core without the GIL
(it cannot be interrupted).
)doc");
}

// Attention signals and analysis: attention_from_keys, rope_neox,
// record_attention, prefill, persistence.
void bind_attention(py::module_& m) {
  m.def("attention_from_keys", &signals_attention, py::arg("queries"), py::arg("keys"), py::arg("scale") = py::none(),
        R"doc(
The softmax weights query heads pay to keys (docs/signals.md), what an
attention policy reads, from what a fused-attention engine has: a new float32
array of n weights, averaged over the query heads.

queries: [groups, head_dim] (or [head_dim] for one head), already rotated to
    their position (rope_neox). keys: [n, head_dim], as the cache stores them.
scale: each query is multiplied by it before the dot products (None:
    1/sqrt(head_dim), as the model scales q).
Inputs are converted to float32 C order when they are not already.
)doc");

  m.def("rope_neox", &signals_rope, py::arg("x"), py::arg("pos"), py::arg("base") = 10000.0, R"doc(
RoPE in the GPT-NeoX layout (dimension i pairs with i + head_dim/2): `x`
(head_dim floats, head_dim even) rotated to position `pos`, angle
pos * base^(-2i/head_dim) in float64, cos and sin rounded to float32. Returns
a new float32 array; `x` is not changed. base: the model's RoPE base
(Model.config["rope_base"]).
)doc");

  m.def("record_attention", &model_record, py::arg("model"), py::arg("text"), py::arg("tokens") = 0,
        R"doc(
The model's full-cache attention over the first `tokens` bytes of `text` (0 =
as many as the context holds): a new float32 array [layers * heads, N, N],
head index layer * kv_heads + KV head, row t the weights token t gave positions
0 ... t-1 (its weight on itself left out) and zeros elsewhere. Row 0 is all
zeros.
)doc");

  m.def("prefill", &prefill_positions, py::arg("policy"), py::arg("window"), py::arg("budget"), R"doc(
Prefill compression (docs/prefill.md): the positions, ascending, that
`policy` keeps of a prompt of n positions, at most `budget` of them (all of
them when budget >= n). `window` is [rows, n]: row i is the attention of the
query at position n - rows + i over positions 0 ... n-1 (its own position
included), 0 after its diagonal. Parameters are keywords, snake_case or
camelCase, without budget. Raises ValueError for an unknown policy, a bad
parameter or budget, or a bad window (shape, a NaN, infinite or negative
weight, or a weight after the diagonal).
)doc");

  m.def("persistence", &attention_persistence, py::arg("attention"), py::arg("lags"), R"doc(
The persistence-of-importance statistic (Scissorhands, section 3) over
recorded attention, [heads, N, N] or [N, N] as record_attention() returns it:
of the positions whose weight beats their fair share 1/t at step t, the share
still above it at step t + k. One dict per lag (ascending, each 1 ... N - 2):
{"lag", "important", "persisted", "share" (the mean over heads), "baseRate"
(the chance level)}.
)doc");
}

PYBIND11_MODULE(_kvevict, m) {
  m.doc() =
      "The compiled core of the kvevict Python package: KV-cache eviction policies built "
      "through the C++ registry. Import `kvevict`, not this module.";
  m.attr("__version__") = KVEVICT_VERSION;
  bind_paged(m);
  bind_sweep_rows(m);
  bind_exceptions();
  bind_policy(m);
  bind_traces(m);
  bind_pyramid_budget(m);
  bind_simd(m);
  bind_evaluation(m);
  // ---- the real model ----
  bind_model(m);
  bind_decoder(m);
  bind_serving(m);
  bind_streaming(m);
  bind_perplexity(m);
  bind_tasks_and_bench(m);
  bind_choose(m);
  bind_attention(m);
}
