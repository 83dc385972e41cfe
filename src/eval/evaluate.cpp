#include "kvevict/eval/evaluate.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/npy.h"
#include "kvevict/core/registry.h"
#include "ranking.h"

namespace kvevict {

namespace {

// ": did you mean 'x'? (known: a, b, c)" for a parameter a policy lacks.
std::string unknown_param_hint(const PolicyInfo& info, const std::string& param) {
  std::string known;
  std::vector<std::string> names;
  for (const ParamInfo& p : info.params) {
    known += (known.empty() ? "" : ", ") + p.name;
    names.push_back(p.name);
  }
  const std::string near = nearest_name(param, names);
  return fmt::format("{} (known: {})", near.empty() ? "" : fmt::format(": did you mean '{}'?", near), known);
}

}  // namespace

std::vector<RunRow> evaluate(const std::vector<RunSpec>& specs, const EvaluateOptions& options) {
  check_paged(options.paged);
  if (options.paged.layer_budget || options.paged.sequence_budget) return detail::evaluate_shared(specs, options);
  std::vector<std::unique_ptr<Trace>> heads = open_trace_heads(options.trace);
  if (options.steps) checked_steps(*heads.front(), *options.steps);
  // The recorded keys, values and queries, checked against the trace.
  const SignalReplay replay(options.signals, options.trace, heads.size(), heads.front()->length());

  // Rows first, with every policy built once up front, so a bad parameter
  // fails before any work.
  std::vector<RunRow> rows;
  std::vector<ParamMap> params_of;
  for (const RunSpec& spec : specs) {
    const PolicyInfo& info = find_policy(spec.policy);
    check_replay_signals(info, options.signals);
    ParamMap params = replay.params_for(info, spec.params);
    set_param(params, "budget", spec.budget);
    const std::unique_ptr<Policy> probe = make_run_policy(info.name, params, spec.budget, options.paged);
    RunRow row;
    row.policy = info.name;
    row.trace = options.trace;
    row.budget = spec.budget;
    row.params = info.effective(params);
    row.memory_bytes = probe->memory_bytes();
    row.heads = heads.size();
    rows.push_back(std::move(row));
    params_of.push_back(std::move(params));
  }

  // One pass per head; each head's steps feed every run.
  std::vector<std::vector<Metrics>> per_head(rows.size());
  std::vector<double> mass_sum(rows.size(), 0.0);
  std::vector<double> recall_sum(rows.size(), 0.0);
  for (const auto& trace : heads) {
    std::vector<std::unique_ptr<Policy>> built;
    std::vector<RunSlot> slots;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      built.push_back(make_run_policy(rows[i].policy, params_of[i], rows[i].budget, options.paged));
      slots.push_back({built.back().get(), rows[i].budget});
    }
    std::vector<double> seconds;
    StepObserver observe;
    if (options.observe) {
      const std::uint64_t head = static_cast<std::uint64_t>(&trace - heads.data());
      observe = [&options, head](const StepView& view) {
        StepView v = view;
        v.head = head;
        options.observe(v);
      };
    }
    const std::unique_ptr<StepSignals> signals = replay.head(static_cast<std::uint64_t>(&trace - heads.data()));
    const std::vector<RunTotals> totals =
        run_many(slots, *trace, options.steps, options.progress, &seconds, observe, signals.get());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const RunTotals& t = totals[i];
      RunTotals& sum = rows[i].totals;
      sum.steps += t.steps;
      sum.budget = t.budget;
      sum.total_retained_mass += t.total_retained_mass;
      sum.total_heavy_hits += t.total_heavy_hits;
      sum.total_heavy_possible += t.total_heavy_possible;
      sum.eviction_calls += t.eviction_calls;
      sum.evicted += t.evicted;
      rows[i].seconds += seconds[i];
      per_head[i].push_back(metrics_of(t));
      mass_sum[i] += t.steps == 0 ? 0.0 : t.total_retained_mass / static_cast<double>(t.steps);
      recall_sum[i] += t.total_heavy_possible == 0 ? 0.0
                                                   : static_cast<double>(t.total_heavy_hits) /
                                                         static_cast<double>(t.total_heavy_possible);
    }
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (heads.size() == 1) {
      rows[i].metrics = per_head[i].front();
      continue;
    }
    const auto h = static_cast<double>(heads.size());
    rows[i].metrics.retained_attention_mass = round6(mass_sum[i] / h);
    rows[i].metrics.heavy_hitter_recall = round6(recall_sum[i] / h);
    rows[i].metrics.eviction_calls = rows[i].totals.eviction_calls;
    rows[i].head_metrics = std::move(per_head[i]);
  }
  return rows;
}

std::int64_t ranking_budget(std::vector<std::int64_t> budgets) {
  if (budgets.empty()) throw ParameterError("no budgets given");
  std::sort(budgets.begin(), budgets.end());
  return budgets[(budgets.size() - 1) / 2];
}

std::vector<RunSpec> compare_specs(const CompareRequest& request, std::vector<std::string>* skipped) {
  std::vector<std::string> names = request.policies;
  // A trace carries attention only: the key-aware policies need recorded keys.
  if (names.empty()) names = policy_names(kSignalAttention);
  std::vector<std::int64_t> budgets = request.budgets;
  if (budgets.empty()) throw ParameterError("compare: the budget list is empty");
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());

  // Resolve the overrides per policy, refusing any that would be ignored.
  std::map<std::string, ParamMap> per_policy;
  for (const auto& [key, value] : request.overrides) {
    const std::size_t dot = key.find('.');
    if (dot == std::string::npos) {
      if (key == "budget") throw ParameterError("compare: set budgets with --budgets, not --set budget");
      bool used = false;
      for (const std::string& name : names) {
        if (find_policy(name).has_param(key)) {
          set_param(per_policy[name], key, value);
          used = true;
        }
      }
      if (!used) {
        throw ParameterError(fmt::format("compare: no compared policy has a parameter '{}'", key));
      }
      continue;
    }
    const std::string policy = key.substr(0, dot);
    const std::string param = key.substr(dot + 1);
    const PolicyInfo& info = find_policy(policy);
    if (std::find(names.begin(), names.end(), info.name) == names.end()) {
      throw ParameterError(fmt::format("compare: '{}' sets a parameter of {}, which is not compared",
                                       key, policy));
    }
    if (param == "budget") throw ParameterError("compare: set budgets with --budgets, not --set");
    if (!info.has_param(param)) {
      throw ParameterError(fmt::format("--set {}: {} has no parameter '{}'{}", key, info.title, param,
                                       unknown_param_hint(info, param)));
    }
    set_param(per_policy[info.name], param, value);
  }

  std::vector<RunSpec> specs;
  for (const std::string& name : names) {
    for (const std::int64_t b : budgets) {
      if (request.skip_refused) {
        ParamMap built = per_policy[name];
        set_param(built, "budget", b);
        try {
          (void)make_policy(name, built);
        } catch (const ParameterError& e) {
          if (skipped != nullptr) skipped->push_back(fmt::format("{} at budget {}: {}", name, b, e.what()));
          continue;
        }
      }
      specs.push_back({name, per_policy[name], b});
    }
  }
  if (specs.empty()) throw ParameterError("compare: the policies' rules refuse every policy x budget pair");
  return specs;
}

void rank_compare_rows(std::vector<RunRow>& rows, const std::vector<std::int64_t>& budgets) {
  std::vector<std::int64_t> unique = budgets;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  detail::rank_rows(std::span<RunRow>(rows), ranking_budget(unique),
                    [](const RunRow& r) { return r.metrics.retained_attention_mass; });
}

std::vector<RunRow> compare(const CompareRequest& request, const EvaluateOptions& options) {
  const std::vector<RunSpec> specs = compare_specs(request);
  std::vector<RunRow> rows = evaluate(specs, options);
  rank_compare_rows(rows, request.budgets);
  return rows;
}

std::vector<RunRow> sweep(const SweepRequest& request, const EvaluateOptions& options) {
  return evaluate(sweep_specs(request), options);
}

std::vector<RunSpec> sweep_specs(const SweepRequest& request, std::vector<std::string>* skipped) {
  const PolicyInfo& info = find_policy(request.policy);
  if (!info.has_param(request.param)) {
    throw ParameterError(fmt::format("{}: unknown parameter '{}'{}", info.title, request.param,
                                     unknown_param_hint(info, request.param)));
  }
  if (request.values.empty()) throw ParameterError("sweep: no values to sweep");
  std::vector<RunSpec> specs;
  for (const std::int64_t v : request.values) {
    if (request.param == "budget") {
      specs.push_back({info.name, request.params, v});
      continue;
    }
    if (request.budgets.empty()) throw ParameterError("sweep: the budget list is empty");
    for (const std::int64_t b : request.budgets) {
      ParamMap params = request.params;
      set_param(params, request.param, v);
      ParamMap built = params;
      set_param(built, "budget", b);
      try {
        (void)make_policy(info.name, built);
      } catch (const ParameterError& e) {
        if (!request.skip_refused) {
          // Say so before any run starts, with the way out: a grid over a
          // window and budgets usually holds a few pairs no policy accepts.
          throw ParameterError(fmt::format(
              "sweep: {}={} at budget {}: {} (skip the pairs the rules refuse: --skip-refused, "
              "skip_refused=True in Python, skipRefused: true in Node)",
              request.param, v, b, e.what()));
        }
        if (skipped != nullptr) skipped->push_back(fmt::format("{}={} at budget {}: {}", request.param, v, b, e.what()));
        continue;
      }
      specs.push_back({info.name, params, b});
    }
  }
  if (specs.empty()) {
    throw ParameterError(fmt::format("sweep: the policy's rules refuse every {} x budget pair", request.param));
  }
  return specs;
}

}  // namespace kvevict
