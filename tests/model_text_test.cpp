// model_text.h's windows (text_windows): the cut every engine scores a text
// by -- kvevict's perplexity, kvevict-llama and choose's plan -- worked out
// by hand for a text of ten tokens.
#include <gtest/gtest.h>

#include <vector>

#include "kvevict/model/decoder/model_text.h"

namespace kvevict {
namespace {

TokenizedText ten_tokens(bool bos) {
  TokenizedText t;
  for (Token i = 0; i < 10; ++i) {
    t.tokens.push_back(100 + i);
    t.bytes.push_back(i + 1);
  }
  if (bos) t.bos = 7;
  return t;
}

TEST(TextWindows, WithABosEachWindowIsTheBosAndContextMinusOneTokens) {
  const TokenizedText t = ten_tokens(true);
  // Context 4: BOS + 3 tokens a window, every token predicted once: 3 + 3 + 3 + 1.
  const std::vector<TextWindow> w = text_windows(t, 4);
  ASSERT_EQ(w.size(), 4U);
  const std::size_t begins[] = {0, 3, 6, 9};
  const std::uint32_t lengths[] = {4, 4, 4, 2};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].begin, begins[i]);
    EXPECT_EQ(w[i].length, lengths[i]);
    EXPECT_TRUE(w[i].bos);
  }
  EXPECT_EQ(w[1].token_at(t, 0), 7U);  // the BOS, standing for no bytes
  EXPECT_EQ(w[1].bytes_at(t, 0), 0U);
  EXPECT_EQ(w[1].token_at(t, 1), 103U);
  EXPECT_EQ(w[1].bytes_at(t, 1), 4U);
  EXPECT_EQ(w[3].token_at(t, 1), 109U);
}

TEST(TextWindows, WithoutABosEachWindowIsContextTokens) {
  const TokenizedText t = ten_tokens(false);
  // Context 4: 4 + 4 + 2 tokens; a last window of one token would predict nothing.
  std::vector<TextWindow> w = text_windows(t, 4);
  ASSERT_EQ(w.size(), 3U);
  EXPECT_EQ(w[2].begin, 8U);
  EXPECT_EQ(w[2].length, 2U);
  EXPECT_FALSE(w[2].bos);
  EXPECT_EQ(w[2].token_at(t, 1), 109U);
  EXPECT_EQ(w[2].bytes_at(t, 0), 9U);
  // Context 3: windows at 0, 3, 6 and 9 -- the one at 9 holds a single token, so it is not cut.
  EXPECT_EQ(text_windows(t, 3).size(), 3U);
}

TEST(TextWindows, MaxWindowsStopsTheCut) {
  const TokenizedText t = ten_tokens(true);
  EXPECT_EQ(text_windows(t, 4, 2).size(), 2U);
  EXPECT_EQ(text_windows(t, 4, 0).size(), 4U);
  EXPECT_EQ(text_windows(t, 4, 9).size(), 4U);
  EXPECT_TRUE(text_windows(TokenizedText{}, 4).empty());
}

}  // namespace
}  // namespace kvevict
