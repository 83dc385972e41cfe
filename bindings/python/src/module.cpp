// kvevict._kvevict -- the compiled half of the Python binding.
//
// Everything goes through the registry (kvevict::find_policy(name).make(...)),
// so every registered policy is reachable from Python by name; the named
// classes (Scissorhands, H2O, ...) are thin subclasses defined in
// kvevict/__init__.py. Results of run() and compare() are the core's own JSON
// text (kvevict/json.h) parsed by Python's json module, so the binding and the
// tool cannot drift apart.
//
// Errors: kvevict::ParameterError -> ValueError, every other kvevict::Error ->
// RuntimeError, with the core's message unchanged. Arguments of the wrong type
// (a float budget, a string weight) are refused here with TypeError, before the
// core sees them.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
#undef KVEVICT_PY_ARG

using kvevict_py::Attention;
using kvevict_py::Int;
using kvevict_py::IntList;
using kvevict_py::OptionalInt;
using kvevict_py::Overrides;
using kvevict_py::Paths;
using kvevict_py::PolicyArg;
using kvevict_py::PolicyList;
using kvevict_py::Str;
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

[[noreturn]] void refuse_shape(const py::array& arr, py::handle original) {
  std::string shape = "(";
  for (py::ssize_t d = 0; d < arr.ndim(); ++d) {
    shape += (d == 0 ? "" : ", ") + std::to_string(arr.shape(d));
  }
  shape += arr.ndim() == 1 ? ",)" : ")";
  throw py::value_error("attention must be 1-D (one weight per held position, ascending), got a " +
                        std::to_string(arr.ndim()) + "-D " + type_name(original) + " of shape " +
                        shape);
}

void check_numeric(const py::array& arr, py::handle original) {
  const char kind = arr.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u') {
    throw py::type_error("attention weights must be real numbers, got " + type_name(original) +
                         " with dtype " + py::str(arr.dtype()).cast<std::string>());
  }
}

// A float32, C-contiguous, aligned, native-order ndarray is used in place;
// anything else (other dtypes, strided views, lists, tensors' __array__) is
// converted to a fresh float32 array first.
AttentionView attention_of(py::handle obj) {
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
          "attention must be None or a 1-D sequence of weights (a float32 numpy array is used "
          "without copying), got " + type_name(obj) + " (" + short_repr(obj) + ")");
    }
    fresh = (arr.flags() & kOwnsData) != 0;
  }
  if (arr.ndim() != 1) refuse_shape(arr, obj);
  check_numeric(arr, obj);
  if (Float32::check_(arr) && (arr.flags() & kAligned) != 0) {
    const auto n = static_cast<std::size_t>(arr.size());
    return {arr, {static_cast<const float*>(arr.data()), n}, fresh};
  }
  Convert converted = Convert::ensure(arr);
  if (!converted) {
    throw py::type_error("attention of dtype " + py::str(arr.dtype()).cast<std::string>() +
                         " could not be converted to float32");
  }
  const auto n = static_cast<std::size_t>(converted.size());
  const float* data = converted.data();
  return {std::move(converted), {data, n}, true};
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

  py::list evict(py::handle budget_obj) {
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
  const kvevict::PolicyInfo* info_;
  kvevict::ParamMap given_;
  std::unique_ptr<kvevict::Policy> policy_;
  kvevict::ParamMap effective_;
  bool last_copied_ = false;
  std::uintptr_t last_address_ = 0;
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
#undef KVEVICT_PY_SELF

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

py::object run(const PolicyArg& policy_arg, const OptionalInt& budget_arg, const TraceId& trace,
               const OptionalInt& steps, const py::kwargs& kwargs) {
  const py::handle policy = policy_arg.obj;
  const py::handle budget = budget_arg.obj;
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
  spec.params = params_of(*info, kwargs, std::move(base));
  const std::optional<std::int64_t> b = to_optional_int(budget, "budget");
  spec.budget = b ? *b : value_of(spec.params, "budget", default_of(*info, "budget", 512));
  const kvevict::EvaluateOptions options = options_of(trace.obj, steps.obj);
  const std::string text = without_gil([&] {
    const auto rows = kvevict::evaluate({spec}, options);
    return kvevict::run_json(rows.front(), -1);
  });
  return json_loads(text);
}

std::vector<std::string> policy_names(py::handle policies) {
  if (py::isinstance<py::str>(policies)) return kvevict::parse_policy_list(policies.cast<std::string>());
  if (!py::isinstance<py::iterable>(policies)) {
    throw py::type_error("policies must be \"all\", a comma-separated str or a list of names, got " +
                         type_name(policies));
  }
  std::vector<std::string> names;
  for (const py::handle item : policies) {
    names.push_back(kvevict::find_policy(to_str(item, "a policy name")).name);
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
                   const TraceId& trace, const OptionalInt& steps) {
  kvevict::CompareRequest request;
  request.policies = policy_names(policies.obj);
  request.budgets = budget_list(budgets.obj);
  request.overrides = overrides_of(overrides.obj);
  const kvevict::EvaluateOptions options = options_of(trace.obj, steps.obj);
  const std::string text = without_gil([&] {
    return kvevict::rows_json(kvevict::compare(request, options), -1);
  });
  return json_loads(text);
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

}  // namespace

PYBIND11_MODULE(_kvevict, m) {
  m.doc() =
      "The compiled core of the kvevict Python package: KV-cache eviction policies built "
      "through the C++ registry. Import `kvevict`, not this module.";
  m.attr("__version__") = KVEVICT_VERSION;

  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kvevict::ParameterError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const kvevict::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<PyPolicy>(m, "Policy", R"doc(
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
)doc")
      .def(py::init(&make_policy), py::arg("name"),
           "Builds the registry policy `name` with the given integer parameters.")
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
           "Bytes of per-slot state allocated at construction (the decode path never allocates).")
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

  m.def("policies", &policy_descriptions, R"doc(
Every registered policy, in catalogue order: a list of dicts with "name",
"title", "summary", "params" (a list of {"name", "default", "help"}, camelCase
names) and "queries" (its introspection method names).
)doc");

  m.def("run", &run, py::arg("policy"), py::arg("budget") = py::none(),
        py::arg("trace") = "decode-4096", py::arg("steps") = py::none(), R"doc(
Replays a trace through one policy at one budget; returns the dict the tool's
`run --format json` prints: {"policy", "trace", "budget", "params", "steps",
"metrics": {"retainedAttentionMass", "heavyHitterRecall", "evictionCalls"},
"evicted", "memoryBytes", "seconds"}.

policy: a registry name, or a Policy whose name and parameters are used (a
    fresh instance runs; the given one is not touched).
budget: the harness budget; None takes the policy's `budget` parameter.
**params: policy parameters, snake_case or camelCase.
)doc");

  m.def("compare", &compare, py::arg("policies") = "all",
        py::arg("budgets") = canonical_budgets(),
        py::arg("overrides") = py::none(), py::arg("trace") = "decode-4096",
        py::arg("steps") = py::none(), R"doc(
Every policy at every budget in one pass over the trace; returns the dict the
tool's `compare --format json` prints: {"trace", "rows": [run dicts]}, ranked
by retained mass at the middle budget, each policy's rows by budget.

policies: "all", "a,b", or a list of names.
budgets: a sequence of integers.
overrides: {"policy.param": value} or {"param": value} (every compared policy
    that has it) or {"policy": {"param": value}}; snake_case or camelCase.
)doc");

  m.def("run_vectors", &run_vectors, py::arg("paths"), R"doc(
Replays test-vector files, or folders of *.vectors.json, through the C++
runner; returns {"passed": int, "failed": int, "failures": [one line each]}
(counts are cases). A path that does not exist raises RuntimeError.
)doc");
}
