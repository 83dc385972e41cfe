#include "kvevict/eval/signal_files.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr Signal kFileSignals[] = {kSignalKey, kSignalValue, kSignalQueries};

const std::string& file_of(const SignalFiles& files, Signal signal) {
  switch (signal) {
    case kSignalKey: return files.keys;
    case kSignalValue: return files.values;
    default: return files.queries;
  }
}

std::string_view plural(Signal signal) {
  switch (signal) {
    case kSignalKey: return "keys";
    case kSignalValue: return "values";
    default: return "queries";
  }
}

bool names(const ParamMap& params, std::string_view key) {
  return std::any_of(params.begin(), params.end(), [&](const auto& kv) { return kv.first == key; });
}

std::int64_t value_of(const ParamMap& params, std::string_view key) {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  return 0;
}

// One head's rows of each given file, read a position at a time.
class HeadSignals final : public StepSignals {
 public:
  HeadSignals(const std::vector<SignalReplay::File>& files, std::uint64_t head) : head_(head) {
    for (const SignalReplay::File& f : files) {
      Reader r{&f, std::ifstream(f.name, std::ios::binary), {}, {}};
      if (!r.in) throw InputError(fmt::format("{}: cannot be opened", f.name));
      r.raw.resize(f.header.shape.back() * f.header.item_size);
      r.values.resize(f.header.shape.back());
      readers_.push_back(std::move(r));
    }
  }

  StepInputs at(std::uint32_t pos) override {
    StepInputs in;
    for (Reader& r : readers_) {
      const NpyHeader& h = r.file->header;
      const std::uint64_t width = h.shape.back();
      // Within data_bytes (head < H, pos < N), which the header check bounds.
      const std::uint64_t offset = h.data_offset + ((head_ * h.rows() + pos) * width) * h.item_size;
      r.in.clear();
      r.in.seekg(static_cast<std::streamoff>(offset));
      r.in.read(r.raw.data(), static_cast<std::streamsize>(r.raw.size()));
      if (r.in.gcount() != static_cast<std::streamsize>(r.raw.size())) {
        throw InputError(fmt::format("{}: could not read position {} of head {}", r.file->name, pos, head_));
      }
      npy_items_to_floats(r.raw.data(), h.item_size, r.values);
      for (std::size_t i = 0; i < r.values.size(); ++i) {
        if (!std::isfinite(r.values[i])) {
          throw InputError(fmt::format("{}: head {} position {} component {} is {}: {} must be finite",
                                       r.file->name, head_, pos, i,
                                       std::isnan(r.values[i]) ? std::string("NaN") : fmt::format("{}", r.values[i]),
                                       plural(r.file->signal)));
        }
      }
      const std::span<const float> row(r.values);
      switch (r.file->signal) {
        case kSignalKey: in.key = row; break;
        case kSignalValue: in.value = row; break;
        default: in.queries = row; break;
      }
    }
    return in;
  }

 private:
  struct Reader {
    const SignalReplay::File* file;
    std::ifstream in;
    std::vector<char> raw;
    std::vector<float> values;
  };
  std::uint64_t head_;
  std::vector<Reader> readers_;
};

}  // namespace

Signals SignalFiles::supplied() const noexcept {
  Signals s = kSignalAttention;
  if (!keys.empty()) s |= kSignalKey;
  if (!values.empty()) s |= kSignalValue;
  if (!queries.empty()) s |= kSignalQueries;
  return s;
}

std::string_view signal_flag(Signal signal) noexcept {
  switch (signal) {
    case kSignalKey: return "--keys";
    case kSignalValue: return "--values";
    case kSignalQueries: return "--queries";
    default: return "--trace";
  }
}

std::string replay_source(const SignalFiles& files) {
  if (files.empty()) return "a trace (attention weights only)";
  return fmt::format("this trace and its files ({})", signal_names(files.supplied()));
}

void check_replay_signals(const PolicyInfo& info, const SignalFiles& files) {
  const Signals missing = info.signals & ~files.supplied();
  if (missing == 0) return;
  Signals first = 1;
  while ((missing & first) == 0) first <<= 1;
  const auto signal = static_cast<Signal>(first);
  throw ParameterError(fmt::format(
      "{} reads the new token's {} ({}), which {} does not supply: give {} FILE.npy (kvevict record {} writes it)",
      info.name, signal_name(signal), signal_names(info.signals), replay_source(files), signal_flag(signal),
      signal_flag(signal)));
}

std::vector<std::string> replay_policy_list(std::string_view text, const SignalFiles& files) {
  if (text == "all") return policy_names(files.supplied());
  std::vector<std::string> out;
  for (const std::string& item : split_list(text, "--policies")) {
    if (item.empty()) throw ParameterError(fmt::format("empty policy name in the list '{}'", text));
    const PolicyInfo& info = find_policy(item);
    check_replay_signals(info, files);
    out.emplace_back(info.name);
  }
  return out;
}

SignalReplay::SignalReplay(const SignalFiles& files, const std::string& trace, std::uint64_t heads,
                           std::uint32_t length)
    : files_(files) {
  if (files.empty()) return;
  if (!is_npy_id(trace)) {
    throw ParameterError(fmt::format(
        "--keys, --values and --queries go with the attention recorded beside them: give --trace FILE.npy "
        "(kvevict record writes both), not the generated trace '{}'",
        trace));
  }
  std::string dim_source;
  for (const Signal signal : kFileSignals) {
    const std::string& name = file_of(files, signal);
    if (name.empty()) continue;
    const std::string flag(signal_flag(signal));
    std::error_code ec;
    if (std::filesystem::equivalent(name, trace, ec)) {
      throw ParameterError(fmt::format("{} {} is the attention trace itself: give the {} file", flag, name,
                                       plural(signal)));
    }
    if (!std::filesystem::exists(name, ec)) {
      throw InputError(fmt::format("{}: no such file (given as {}, the {})", name, flag, plural(signal)));
    }
    File f{name, signal, read_npy_header(name, NpyLayout::kRows)};
    const auto& s = f.header.shape;
    const std::uint64_t width = s.back();
    if (s.size() == 2 && heads != 1) {
      throw InputError(fmt::format("{}: shape ({}, {}) has one head; the trace {} has {}: {} must be [{}, N, D]", name,
                                   s[0], s[1], trace, heads, plural(signal), heads));
    }
    if (f.header.heads() != heads) {
      throw InputError(fmt::format("{}: {} heads; the trace {} has {} ({} must be [H, N, D] with the trace's H)",
                                   name, f.header.heads(), trace, heads, plural(signal)));
    }
    if (f.header.rows() != length) {
      throw InputError(fmt::format("{}: N = {} positions; the trace {} has {} ({} must cover positions 0 ... N-1)",
                                   name, f.header.rows(), trace, length, plural(signal)));
    }
    if (signal == kSignalQueries) {
      query_width_ = static_cast<std::uint32_t>(width);
      if (head_dim_ != 0 && width % head_dim_ != 0) {
        throw InputError(fmt::format("{}: {} floats per position is not groups x headDim for headDim {} (from {})",
                                     name, width, head_dim_, dim_source));
      }
    } else if (head_dim_ == 0) {
      head_dim_ = static_cast<std::uint32_t>(width);
      dim_source = name;
    } else if (width != head_dim_) {
      throw InputError(fmt::format("{}: headDim {} differs from {}'s {} (keys and values have one size)", name,
                                   width, dim_source, head_dim_));
    }
    opened_.push_back(std::move(f));
  }
}

ParamMap SignalReplay::params_for(const PolicyInfo& info, ParamMap params) const {
  if (opened_.empty()) return params;
  std::int64_t dim = head_dim_;
  if (info.has_param("headDim")) {
    if (!names(params, "headDim")) {
      if (head_dim_ != 0) set_param(params, "headDim", head_dim_);
    } else if (head_dim_ != 0 && value_of(params, "headDim") != head_dim_) {
      throw ParameterError(fmt::format("{}: headDim {} is set, but the recorded keys and values have {} floats "
                                       "(leave headDim out: it is read from the files)",
                                       info.title, value_of(params, "headDim"), head_dim_));
    }
    if (names(params, "headDim")) dim = value_of(params, "headDim");
  }
  if (info.has_param("groups") && query_width_ != 0) {
    if (dim <= 0) {
      throw ParameterError(fmt::format("{}: the recorded queries have {} floats per position, groups x headDim, and "
                                       "no --keys or --values gives headDim (give one, or --set headDim=N)",
                                       info.title, query_width_));
    }
    if (query_width_ % dim != 0) {
      throw ParameterError(fmt::format("{}: the recorded queries have {} floats per position, not a multiple of "
                                       "headDim {}",
                                       info.title, query_width_, dim));
    }
    const std::int64_t groups = query_width_ / dim;
    if (!names(params, "groups")) {
      set_param(params, "groups", groups);
    } else if (value_of(params, "groups") != groups) {
      throw ParameterError(fmt::format("{}: groups {} is set, but the recorded queries hold {} heads of headDim {} "
                                       "(leave groups out: it is read from the file)",
                                       info.title, value_of(params, "groups"), groups, dim));
    }
  }
  return params;
}

std::unique_ptr<StepSignals> SignalReplay::head(std::uint64_t head) const {
  if (opened_.empty()) return nullptr;
  return std::make_unique<HeadSignals>(opened_, head);
}

}  // namespace kvevict
