// Keys, values and queries recorded beside an attention trace (`kvevict record
// --keys/--values/--queries`; docs/signals.md): what a trace replay needs to
// feed the key-aware policies. Each file is a NumPy .npy of one vector per
// position, position 0 ... N-1, for every head of the trace:
//
//   keys     [H, N, headDim]           each cache's keys as stored (after RoPE)
//   values   [H, N, headDim]           its values
//   queries  [H, N, groups x headDim]  the queries before RoPE of the cache's
//                                      query heads, head-major
//
// ([N, D] for a one-head trace.) dtype float16, float32 or float64 as for
// attention; H and N must be the trace's. Every problem is an InputError (a
// file) or ParameterError (a request) of one line naming it. The retained
// mass and heavy-hitter recall still come from the attention trace.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/npy.h"

namespace kvevict {

struct SignalFiles {
  std::string keys;     // empty: not given
  std::string values;
  std::string queries;

  bool empty() const noexcept { return keys.empty() && values.empty() && queries.empty(); }
  // kSignalAttention and the bits of the files given.
  Signals supplied() const noexcept;
};

// The flag of the tool that supplies a signal: "--keys", "--values", "--queries".
std::string_view signal_flag(Signal signal) noexcept;

// What a replay with these files supplies, in words: "a trace (attention
// weights only)", or "this trace and its files (attention, key)".
std::string replay_source(const SignalFiles& files);

// Refuses a policy that reads a signal the replay does not supply, naming the
// policy, the signal and the flag that would supply it:
// "knorm reads the new token's key (key), which a trace (attention weights
// only) does not supply: give --keys FILE.npy (kvevict record --keys writes it)".
void check_replay_signals(const PolicyInfo& info, const SignalFiles& files);

// "a,b" or "all" for a trace replay: "all" is every policy the files can feed
// (the seven attention and positional ones without files), a named policy is
// checked as above.
std::vector<std::string> replay_policy_list(std::string_view text, const SignalFiles& files);

// The files opened and checked against a trace (its file name, heads and
// length): shapes, dtypes, that the data is all there, that headDim agrees
// across keys and values and divides the queries' width. Rows are read as the
// replay reaches them (nothing whole in memory).
class SignalReplay {
 public:
  // Throws for a generated (not .npy) trace, a missing or malformed file, or
  // one whose heads, N or widths do not match.
  SignalReplay(const SignalFiles& files, const std::string& trace, std::uint64_t heads, std::uint32_t length);

  Signals supplied() const noexcept { return files_.supplied(); }
  // Floats in a key (from --keys or --values); 0 when neither is given.
  std::uint32_t head_dim() const noexcept { return head_dim_; }
  // Floats per position in --queries; 0 when not given.
  std::uint32_t query_width() const noexcept { return query_width_; }

  // A policy's parameters for this replay: headDim and groups (when the
  // policy has them) set from the files unless `params` names them, and
  // refused when `params` names them otherwise than the files hold.
  ParamMap params_for(const PolicyInfo& info, ParamMap params) const;

  // Head `head`'s signals, position by position, for run_many.
  std::unique_ptr<StepSignals> head(std::uint64_t head) const;

  struct File {
    std::string name;
    Signal signal = kSignalKey;
    NpyHeader header;
  };

 private:
  SignalFiles files_;
  std::vector<File> opened_;  // in the order keys, values, queries (those given)
  std::uint32_t head_dim_ = 0;
  std::uint32_t query_width_ = 0;
};

}  // namespace kvevict
