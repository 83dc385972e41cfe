// The decode-bench row's one description (decode_bench_json): the keys, order
// and number forms `kvevict bench --model --format json` has always printed
// (the tool and both bindings print this one function's text).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvevict/model/decode_bench.h"

namespace kvevict {
namespace {

TEST(DecodeBenchJson, IsTheToolsRowForm) {
  DecodeBenchRow full;
  full.policy = "full cache";
  full.tokens = 1024;
  full.tokens_per_second = 5000.5;
  full.tokens_per_second_min = 4000.25;
  full.tokens_per_second_max = 6000.0;
  full.projections = 0.5;
  full.activation = 0.125;
  full.attention = 0.25;
  full.policies = 0.0;
  full.other = 0.125;
  DecodeBenchRow h2o = full;
  h2o.policy = "h2o";
  h2o.budget = 128;
  h2o.tokens_per_second = 1.0 / 3.0;
  const std::string row_tail =
      "    \"tokensPerSecondSpread\": {\n"
      "      \"min\": 4000.25,\n"
      "      \"median\": %MEDIAN%,\n"
      "      \"max\": 6000.0\n"
      "    },\n"
      "    \"shares\": {\n"
      "      \"projections\": 0.5,\n"
      "      \"activation\": 0.125,\n"
      "      \"attention\": 0.25,\n"
      "      \"policies\": 0.0,\n"
      "      \"other\": 0.125\n"
      "    }\n";
  const auto tail = [&](const std::string& median) {
    std::string t = row_tail;
    t.replace(t.find("%MEDIAN%"), 8, median);
    return t;
  };
  const std::string want = "[\n  {\n    \"policy\": \"full cache\",\n    \"budget\": 0,\n    \"tokens\": 1024,\n"
                           "    \"tokensPerSecond\": 5000.5,\n" +
                           tail("5000.5") +
                           "  },\n  {\n    \"policy\": \"h2o\",\n    \"budget\": 128,\n    \"tokens\": 1024,\n"
                           "    \"tokensPerSecond\": 0.3333333333333333,\n" +
                           tail("0.3333333333333333") + "  }\n]";
  EXPECT_EQ(decode_bench_json({full, h2o}), want);
  EXPECT_EQ(decode_bench_json({}), "[]");
}

}  // namespace
}  // namespace kvevict
