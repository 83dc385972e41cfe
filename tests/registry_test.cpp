#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/params.h"
#include "kvevict/core/registry.h"

namespace kvevict {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Registry, HoldsTheTenPoliciesFlagshipFirstTheKeyAwareLast) {
  std::vector<std::string> names;
  for (const PolicyInfo* info : policies()) names.push_back(info->name);
  EXPECT_EQ(names, (std::vector<std::string>{"scissorhands", "h2o", "streaming-llm", "sliding-window",
                                             "tova", "snapkv", "pyramidkv", "knorm", "keydiff",
                                             "expected-attention"}));
  EXPECT_EQ(find_policy("knorm").signals, Signals{kSignalKey});
  EXPECT_EQ(find_policy("keydiff").signals, Signals{kSignalKey});
  EXPECT_EQ(find_policy("expected-attention").signals, Signals{kSignalKey | kSignalValue | kSignalQueries});
}

TEST(Registry, EveryPolicyBuildsWithDefaultsAndStartsHoldingZero) {
  for (const PolicyInfo* info : policies()) {
    const auto p = info->make({});
    EXPECT_EQ(p->name(), info->name);
    EXPECT_EQ(p->kept_count(), 1U) << info->name;
    EXPECT_GT(p->memory_bytes(), 0U) << info->name;
    ASSERT_FALSE(info->params.empty());
    EXPECT_EQ(info->params.front().name, "budget");
    EXPECT_EQ(info->params.front().default_value, 512);
  }
}

TEST(Registry, UnknownPolicyListsTheKnownOnes) {
  EXPECT_EQ(error_of([] { make_policy("lru"); }),
            "unknown policy 'lru' (known: scissorhands, h2o, streaming-llm, sliding-window, tova, "
            "snapkv, pyramidkv, knorm, keydiff, expected-attention)");
}

// A typo gets the nearest registered name, first, on the same one line; the
// bindings reach find_policy too, so they say the same.
TEST(Registry, MistypedPolicySuggestsTheNearest) {
  EXPECT_EQ(error_of([] { make_policy("snapk"); }),
            "unknown policy 'snapk': did you mean 'snapkv'? (known: scissorhands, h2o, streaming-llm, "
            "sliding-window, tova, snapkv, pyramidkv, knorm, keydiff, expected-attention)");
  EXPECT_NE(error_of([] { (void)parse_policy_list("h2o,scisorhands"); }).find("did you mean 'scissorhands'?"),
            std::string::npos);
  EXPECT_NE(error_of([] { (void)find_policy("H2O"); }).find("did you mean 'h2o'?"), std::string::npos);
  EXPECT_NE(error_of([] { (void)find_policy("streaming_llm"); }).find("did you mean 'streaming-llm'?"),
            std::string::npos);
}

TEST(Registry, NearestNameIsATypoNotAnotherWord) {
  const std::vector<std::string> commands{"list", "run", "compare", "sweep", "trace"};
  EXPECT_EQ(nearest_name("lst", commands), "list");
  EXPECT_EQ(nearest_name("lsit", commands), "list");  // a swap is one edit
  EXPECT_EQ(nearest_name("comprae", commands), "compare");
  EXPECT_EQ(nearest_name("rn", commands), "run");
  EXPECT_EQ(nearest_name("xyz", commands), "");       // three edits from run: another word
  EXPECT_EQ(nearest_name("report", commands), "");
  EXPECT_EQ(nearest_name("", commands), "");
  EXPECT_EQ(nearest_name("lst", {}), "");
  // A tie goes to the first candidate.
  const std::vector<std::string> both{"abcd", "abce"};
  EXPECT_EQ(nearest_name("abcf", both), "abcd");
}

TEST(Registry, UnknownParameterListsTheKnownOnes) {
  EXPECT_EQ(error_of([] { make_policy("h2o", {{"recent", 4}}); }),
            "H2O: unknown parameter 'recent' (known: budget, recentWindow, sinks, normalize)");
  // A typo gets the parameter it meant.
  EXPECT_EQ(error_of([] { make_policy("h2o", {{"recnetWindow", 4}}); }),
            "H2O: unknown parameter 'recnetWindow': did you mean 'recentWindow'? (known: budget, recentWindow, sinks, "
            "normalize)");
}

TEST(Registry, ParametersReachTheConstructor) {
  EXPECT_EQ(error_of([] { make_policy("scissorhands", {{"budget", 16}, {"recentWindow", 16}}); }),
            "Scissorhands: recentWindow (16) must be smaller than budget (16): there would be "
            "nothing for the votes to choose between");
  EXPECT_EQ(make_policy("h2o", {{"budget", 64}})->memory_bytes(), 13U * 65U);
}

TEST(Registry, EffectiveParametersOverlayDefaults) {
  const ParamMap eff = find_policy("snapkv").effective({{"obsWindow", 4}});
  EXPECT_EQ(eff, (ParamMap{{"budget", 512}, {"recentWindow", 32}, {"obsWindow", 4}, {"poolKernel", 7}}));
}

TEST(Registry, QueriesAreFoundByTheirVectorNames) {
  EXPECT_NE(find_policy("scissorhands").find_query("votesOf"), nullptr);
  EXPECT_EQ(find_policy("scissorhands").find_query("scoreOf"), nullptr);
  EXPECT_NE(find_policy("pyramidkv").find_query("effectiveBudget"), nullptr);
  EXPECT_NE(find_policy("streaming-llm").find_query("sinkCount"), nullptr);
}

TEST(Registry, PolicyLists) {
  EXPECT_EQ(parse_policy_list("all").size(), 10U);
  // A source with attention only (a trace): "all" is the seven it can feed,
  // and a key-aware policy named is refused with the signal it lacks.
  EXPECT_EQ(parse_policy_list("all", kSignalAttention).size(), 7U);
  EXPECT_EQ(error_of([] { parse_policy_list("h2o,knorm", kSignalAttention, "a trace"); }),
            "knorm reads the new token's key (key), which a trace does not supply");
  EXPECT_EQ(parse_policy_list("knorm,keydiff", kSignalAttention | kSignalKey),
            (std::vector<std::string>{"knorm", "keydiff"}));
  EXPECT_EQ(parse_policy_list("h2o,tova"), (std::vector<std::string>{"h2o", "tova"}));
  EXPECT_THROW(parse_policy_list("h2o,,tova"), ParameterError);
  EXPECT_THROW(parse_policy_list("h2o,nope"), ParameterError);
}

TEST(Params, IntegersAreParsedStrictly) {
  EXPECT_EQ(parse_integer("64", "x"), 64);
  EXPECT_EQ(parse_integer("+7", "x"), 7);
  EXPECT_EQ(parse_integer("-3", "x"), -3);
  EXPECT_EQ(error_of([] { parse_integer("1.5", "recentWindow"); }), "recentWindow: '1.5' is not an integer");
  EXPECT_EQ(error_of([] { parse_integer("12abc", "--budget"); }), "--budget: '12abc' is not an integer");
  EXPECT_EQ(error_of([] { parse_integer("", "--budget"); }), "--budget: expected an integer, got nothing");
  EXPECT_EQ(error_of([] { parse_integer("99999999999999999999", "b"); }),
            "b: '99999999999999999999' is out of range for a 64-bit integer");
}

TEST(Params, AssignmentsNeedAnEqualsSignAndAKey) {
  EXPECT_EQ(parse_assignment("recentWindow=64"), (std::pair<std::string, std::int64_t>{"recentWindow", 64}));
  EXPECT_EQ(error_of([] { parse_assignment("recentWindow"); }), "'recentWindow' is not KEY=VALUE (no '=')");
  EXPECT_EQ(error_of([] { parse_assignment("=4"); }), "'=4' has no key before '='");
  EXPECT_EQ(error_of([] { parse_assignment("x=four"); }), "x: 'four' is not an integer");
}

TEST(Params, ListsNameTheBadValue) {
  EXPECT_EQ(parse_integer_list("256,512,1024", "--budgets"), (std::vector<std::int64_t>{256, 512, 1024}));
  EXPECT_EQ(error_of([] { parse_integer_list("16,3x,64", "recentWindow"); }),
            "recentWindow: value 2 of '16,3x,64' ('3x') is not an integer");
  EXPECT_THROW(parse_integer_list("16,", "x"), ParameterError);
}

}  // namespace
}  // namespace kvevict
