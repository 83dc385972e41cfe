// The decode-bench row's one description (decode_bench_json): the keys, order
// and number forms `kvevict bench --model --format json` prints (the tool and
// both bindings print this one function's text).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvevict/model/serving/decode_bench.h"

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
  full.threads = 2;
  full.weight_bytes_per_token = 269000000;
  full.read_bandwidth_gb_s = 20.5;
  full.floor_tokens_per_second = 76.25;
  full.of_floor = 0.75;
  DecodeBenchRow h2o = full;
  h2o.policy = "h2o";
  h2o.budget = 128;
  h2o.tokens_per_second = 1.0 / 3.0;
  DecodeBenchRow batch = full;
  batch.mode = "together";
  batch.policy = "all runs";
  batch.runs = 3;
  batch.prompt = 64;
  batch.speedup = 2.5;
  const std::string row_tail =
      "    \"tokensPerSecondSpread\": {\n"
      "      \"min\": 4000.25,\n"
      "      \"median\": %MEDIAN%,\n"
      "      \"max\": 6000.0\n"
      "    },\n"
      "    \"weightBytesPerToken\": 269000000,\n"
      "    \"readBandwidthGBps\": 20.5,\n"
      "    \"floorTokensPerSecond\": 76.25,\n"
      "    \"ofFloor\": 0.75,\n"
      "    \"speedup\": %SPEEDUP%,\n"
      "    \"shares\": {\n"
      "      \"projections\": 0.5,\n"
      "      \"activation\": 0.125,\n"
      "      \"attention\": 0.25,\n"
      "      \"policies\": 0.0,\n"
      "      \"other\": 0.125\n"
      "    }\n";
  const auto tail = [&](const std::string& median, const std::string& speedup) {
    std::string t = row_tail;
    t.replace(t.find("%MEDIAN%"), 8, median);
    t.replace(t.find("%SPEEDUP%"), 9, speedup);
    return t;
  };
  const std::string want =
      "[\n  {\n    \"mode\": \"decode\",\n    \"policy\": \"full cache\",\n    \"budget\": 0,\n"
      "    \"threads\": 2,\n    \"runs\": 1,\n    \"prompt\": 0,\n    \"tokens\": 1024,\n"
      "    \"tokensPerSecond\": 5000.5,\n" +
      tail("5000.5", "0.0") +
      "  },\n  {\n    \"mode\": \"decode\",\n    \"policy\": \"h2o\",\n    \"budget\": 128,\n"
      "    \"threads\": 2,\n    \"runs\": 1,\n    \"prompt\": 0,\n    \"tokens\": 1024,\n"
      "    \"tokensPerSecond\": 0.3333333333333333,\n" +
      tail("0.3333333333333333", "0.0") +
      "  },\n  {\n    \"mode\": \"together\",\n    \"policy\": \"all runs\",\n    \"budget\": 0,\n"
      "    \"threads\": 2,\n    \"runs\": 3,\n    \"prompt\": 64,\n    \"tokens\": 1024,\n"
      "    \"tokensPerSecond\": 5000.5,\n" +
      tail("5000.5", "2.5") + "  }\n]";
  EXPECT_EQ(decode_bench_json({full, h2o, batch}), want);
  EXPECT_EQ(decode_bench_json({}), "[]");
}

}  // namespace
}  // namespace kvevict
