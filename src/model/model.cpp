#include "kvevict/model/model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <chrono>

#include <Eigen/Core>
#include <fmt/format.h>
#include <zlib.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "model/model_builder.h"

namespace kvevict {

namespace {

constexpr std::array<char, 8> kMagic = {'K', 'V', 'E', 'V', 'M', 'O', 'D', 'L'};
// Version 2 put the number of KV heads in the first reserved word (grouped-
// query attention); version 1 files (reserved = 0) have one per query head.
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::size_t kPreamble = 8 + 4 + 8;  // magic, version, body length
constexpr std::uint32_t kMaxLayers = 256;
constexpr std::uint32_t kMaxWidth = 1U << 14;
constexpr std::uint32_t kMaxContext = 1U << 20;
constexpr std::uint64_t kMaxFloats = 1ULL << 30;  // 4 GiB of weights

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file, what));
}

std::uint32_t read_le32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Little-endian reads from the file image, each checked against its end.
class Reader {
 public:
  Reader(const std::string& file, const std::vector<char>& bytes, std::size_t begin,
         std::size_t end)
      : file_(file), bytes_(bytes), at_(begin), end_(end) {}

  void need(std::size_t n, const char* what) const {
    if (end_ - at_ < n) {
      fail(file_, fmt::format("truncated: the header ends inside {} (at byte {})", what, at_));
    }
  }
  std::uint32_t u32(const char* what) {
    need(4, what);
    const std::uint32_t v = read_le32(bytes_.data() + at_);
    at_ += 4;
    return v;
  }
  float f32(const char* what) {
    const std::uint32_t bits = u32(what);
    float f = 0.0F;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  std::string text(std::size_t n, const char* what) {
    need(n, what);
    std::string s(bytes_.data() + at_, n);
    at_ += n;
    return s;
  }
  void floats(float* out, std::size_t n, const std::string& tensor) {
    if ((end_ - at_) / 4 < n) fail(file_, fmt::format("truncated inside tensor '{}'", tensor));
    std::memcpy(out, bytes_.data() + at_, n * 4);  // x86-64 and arm64 are little-endian
    at_ += n * 4;
  }
  std::size_t at() const noexcept { return at_; }

 private:
  const std::string& file_;
  const std::vector<char>& bytes_;
  std::size_t at_;
  std::size_t end_;
};

std::uint64_t read_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void check_config(const std::string& file, const ModelConfig& c) {
  auto bad = [&](const std::string& what) { fail(file, fmt::format("bad model header: {}", what)); };
  if (c.vocab != 256) bad(fmt::format("vocab {} (byte-level models have 256)", c.vocab));
  if (c.layers < 1 || c.layers > kMaxLayers) bad(fmt::format("layers {} (1 ... {})", c.layers, kMaxLayers));
  if (c.heads < 1 || c.width < 1 || c.width > kMaxWidth) {
    bad(fmt::format("width {} with {} heads", c.width, c.heads));
  }
  if (c.width % c.heads != 0 || c.head_dim() % 2 != 0) {
    bad(fmt::format("width {} is not an even head size times {} heads", c.width, c.heads));
  }
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0) {
    bad(fmt::format("{} KV heads do not divide {} query heads", c.kv_heads, c.heads));
  }
  if (c.ff < 1 || c.ff > 8 * kMaxWidth) bad(fmt::format("ff {}", c.ff));
  if (c.context < 2 || c.context > kMaxContext) bad(fmt::format("context {} (2 ... {})", c.context, kMaxContext));
  if (!std::isfinite(c.rope_base) || c.rope_base <= 1.0F) bad(fmt::format("rope base {}", c.rope_base));
  if (!std::isfinite(c.norm_eps) || c.norm_eps <= 0.0F) bad(fmt::format("norm eps {}", c.norm_eps));
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<const RowMatrix>;
using VecView = Eigen::Map<const Eigen::VectorXf>;
using VecMut = Eigen::Map<Eigen::VectorXf>;

// out = rmsnorm(x) * weight, as torch computes it: x * rsqrt(mean(x^2) + eps).
void rms_norm(const float* x, const float* weight, float* out, std::uint32_t n, float eps) {
  float sum = 0.0F;
  for (std::uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0F / std::sqrt(sum / static_cast<float>(n) + eps);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// The decode profile's stopwatch: charge(part) adds the time since the last
// mark to `part` and marks again; without a profile it does nothing.
class Lap {
 public:
  explicit Lap(DecodeProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }
  void charge(double DecodeProfile::*part) {
    if (profile_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->*part += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void skip() {  // marks without charging (the time goes to "the rest")
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }

 private:
  DecodeProfile* profile_;
  std::chrono::steady_clock::time_point last_;
};

// y = W x for a row-major [rows, cols] matrix.
void matvec(const float* w, const float* x, float* y, std::uint32_t rows, std::uint32_t cols) {
  VecMut(y, rows).noalias() = MatrixView(w, rows, cols) * VecView(x, cols);
}

}  // namespace

namespace {

// The first bytes of a file (fewer when it is shorter); empty when it cannot be read.
std::string file_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string magic(8, '\0');
  if (!in) return {};
  in.read(magic.data(), 8);
  magic.resize(static_cast<std::size_t>(in.gcount()));
  return magic;
}

}  // namespace

void apply_context(ModelConfig& c, const ModelOptions& options, const std::string& file) {
  c.trained_context = c.context;
  if (options.context > c.context) {
    fail(file, fmt::format("--context {} is over the {} positions the model was trained on", options.context,
                           c.context));
  }
  if (options.context != 0) {
    c.context = options.context;
  } else if (c.context > ModelOptions::kDefaultContextCap) {
    c.context = ModelOptions::kDefaultContextCap;
  }
  if (c.context < 2) fail(file, fmt::format("--context {} leaves nothing to predict (at least 2)", c.context));
}

std::shared_ptr<const Model> Model::from_parts(Parts parts) {
  std::shared_ptr<Model> model(new Model());
  model->config_ = std::move(parts.config);
  model->path_ = std::move(parts.path);
  model->data_ = std::move(parts.data);  // a vector's move keeps its buffer: the pointers stay valid
  model->vocab_ = std::move(parts.vocab);
  model->embed_ = parts.embed;
  model->output_ = parts.output;
  model->final_norm_ = parts.final_norm;
  model->layers_ = std::move(parts.layers);
  return model;
}

std::shared_ptr<const Model> Model::load(const std::filesystem::path& path, const ModelOptions& options) {
  const std::string file = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return build_safetensors_model(path, options);
  if (!std::filesystem::exists(path, ec)) fail(file, "cannot be opened (does it exist?)");
  const std::string magic = file_magic(path);
  if (magic.rfind("GGUF", 0) == 0) return build_gguf_model(path, options);
  const std::string ext = path.extension().string();
  if (ext == ".safetensors" || ext == ".json") return build_safetensors_model(path, options);
  if (magic.size() == kMagic.size() && std::equal(kMagic.begin(), kMagic.end(), magic.begin())) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(file, "cannot be opened (does it exist?)");
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail(file, "reading failed");
    std::shared_ptr<const Model> parsed = parse(std::move(bytes), file);
    if (options.context == 0) return parsed;
    auto model = std::const_pointer_cast<Model>(parsed);
    apply_context(model->config_, options, file);
    return model;
  }
  fail(file, "not a kvevict model: it reads a .kvm file (magic KVEVMODL), a GGUF file (magic GGUF) or a "
             "safetensors model (a folder with config.json and model.safetensors)");
}

std::shared_ptr<const Model> Model::parse(std::vector<char> bytes, const std::string& file) {
  if (bytes.size() < kMagic.size() || !std::equal(kMagic.begin(), kMagic.end(), bytes.begin())) {
    fail(file, "not a kvevict model (no KVEVMODL magic at the start)");
  }
  if (bytes.size() < kPreamble) fail(file, "truncated: the file ends inside its preamble");
  const std::uint32_t version = read_le32(bytes.data() + 8);
  if (version < 1 || version > kFormatVersion) {
    fail(file, fmt::format("format version {} is not supported (this build reads 1 ... {})", version,
                           kFormatVersion));
  }
  const std::uint64_t body = read_le64(bytes.data() + 12);
  const std::uint64_t expected = kPreamble + body + 4;
  if (body > bytes.size() || bytes.size() != expected) {
    const bool short_file = body > bytes.size() || bytes.size() < expected;
    fail(file, fmt::format("{}: the header promises a body of {} bytes ({} in all), the file has {}",
                           short_file ? "truncated" : "trailing bytes", body,
                           body > bytes.size() ? std::string("more than the file") : std::to_string(expected),
                           bytes.size()));
  }
  const std::size_t crc_at = bytes.size() - 4;
  const std::uint32_t stored = read_le32(bytes.data() + crc_at);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), crc_at);
  if (static_cast<std::uint32_t>(crc) != stored) {
    fail(file, fmt::format("checksum mismatch (stored CRC-32 {:08x}, computed {:08x}): the file is corrupt",
                           stored, static_cast<std::uint32_t>(crc)));
  }

  std::shared_ptr<Model> model(new Model());
  model->path_ = file;
  ModelConfig& c = model->config_;
  Reader r(file, bytes, kPreamble, crc_at);
  c.vocab = r.u32("the configuration");
  c.layers = r.u32("the configuration");
  c.heads = r.u32("the configuration");
  c.width = r.u32("the configuration");
  c.ff = r.u32("the configuration");
  c.context = r.u32("the configuration");
  const std::uint32_t kv_word = r.u32("the configuration");
  if (version == 1 && kv_word != 0) {
    fail(file, fmt::format("bad model header: reserved word {} is not 0 in a version-1 file", kv_word));
  }
  c.kv_heads = version == 1 ? c.heads : kv_word;
  const std::uint32_t reserved = r.u32("the configuration");
  if (reserved != 0) {
    fail(file, fmt::format("bad model header: the reserved word after the KV heads is {}; it must be 0", reserved));
  }
  c.rope_base = r.f32("the configuration");
  c.norm_eps = r.f32("the configuration");
  check_config(file, c);

  // The tensors, in the one order the format fixes.
  struct Expected {
    std::string name;
    std::vector<std::uint32_t> shape;
  };
  std::vector<Expected> want;
  want.push_back({"embed", {c.vocab, c.width}});
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("blocks.{}.", l);
    want.push_back({p + "attn_norm", {c.width}});
    want.push_back({p + "qkv", {(c.heads + 2 * c.kv_heads) * c.head_dim(), c.width}});
    want.push_back({p + "proj", {c.width, c.width}});
    want.push_back({p + "mlp_norm", {c.width}});
    want.push_back({p + "up", {c.ff, c.width}});
    want.push_back({p + "down", {c.width, c.ff}});
  }
  want.push_back({"final_norm", {c.width}});
  std::uint64_t total = 0;
  std::vector<std::uint64_t> offsets;
  for (const Expected& e : want) {
    offsets.push_back(total);
    std::uint64_t n = 1;
    for (const std::uint32_t d : e.shape) n *= d;
    total += n;
  }
  if (total > kMaxFloats) fail(file, fmt::format("bad model header: {} weights is too many", total));
  // The weights must be in the file before anything is allocated for them.
  if (total * 4 > crc_at - r.at()) {
    fail(file, fmt::format("truncated: the header describes {} weights, the file holds at most {}", total,
                           (crc_at - r.at()) / 4));
  }

  const std::uint32_t count = r.u32("the tensor count");
  if (count != want.size()) {
    fail(file, fmt::format("has {} tensors; a {}-layer model has {}", count, c.layers, want.size()));
  }
  model->data_.resize(total);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Expected& e = want[i];
    const std::uint32_t name_len = r.u32("a tensor name");
    if (name_len > 256) fail(file, fmt::format("tensor {}: name of {} bytes", i, name_len));
    const std::string name = r.text(name_len, "a tensor name");
    if (name != e.name) fail(file, fmt::format("tensor {} is '{}', expected '{}'", i, name, e.name));
    const std::uint32_t ndim = r.u32("a tensor shape");
    std::vector<std::uint32_t> shape;
    if (ndim > 4) fail(file, fmt::format("tensor '{}' has {} dimensions", name, ndim));
    for (std::uint32_t d = 0; d < ndim; ++d) shape.push_back(r.u32("a tensor shape"));
    if (shape != e.shape) {
      fail(file, fmt::format("tensor '{}' has shape [{}], expected [{}]", name, fmt::join(shape, ", "),
                             fmt::join(e.shape, ", ")));
    }
    float* dst = model->data_.data() + offsets[i];
    const std::size_t n = (i + 1 < offsets.size() ? offsets[i + 1] : total) - offsets[i];
    r.floats(dst, n, name);
    for (std::size_t j = 0; j < n; ++j) {
      if (!std::isfinite(dst[j])) {
        fail(file, fmt::format("tensor '{}' holds a non-finite weight at index {}", name, j));
      }
    }
  }
  if (r.at() != crc_at) fail(file, fmt::format("{} unread bytes after the last tensor", crc_at - r.at()));
  c.trained_context = c.context;
  model->vocab_ = Vocabulary::bytes();

  const float* base = model->data_.data();
  std::size_t k = 0;
  model->embed_ = base + offsets[k++];
  model->output_ = model->embed_;
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    Layer layer{};
    layer.attn_norm = base + offsets[k++];
    layer.qkv = base + offsets[k++];
    layer.proj = base + offsets[k++];
    layer.mlp_norm = base + offsets[k++];
    layer.up = base + offsets[k++];
    layer.down = base + offsets[k++];
    model->layers_.push_back(layer);
  }
  model->final_norm_ = base + offsets[k];
  return model;
}

// ---- the decoder -----------------------------------------------------------------

struct Decoder::Impl {
  std::shared_ptr<const Model> model;
  ModelConfig cfg;
  std::uint32_t capacity = 0;
  bool own_pool = false;  // the pool is this decoder's alone

  // The keys and values (kv_store.h), and per cache what the step and its
  // policy need. Cache h = layer * kv_heads + kv_head; its query heads
  // (config().group() of them) attend over the same positions.
  std::unique_ptr<SequenceStore> store;
  struct HeadCache {
    std::vector<float> weights;              // last step's softmax (mean over the query heads), [count at that step]
    std::vector<Position> attended;          // positions those weights were over
    std::uint32_t attended_count = 0;
    std::vector<float> queries;              // last step's queries of the group, before RoPE, [group x head_dim]
    Policy* policy = nullptr;
    std::int64_t budget = 0;
  };
  std::vector<HeadCache> heads;
  std::vector<LayerBudget*> layer_budgets;   // per layer, null: none
  std::vector<std::int64_t> layer_budget_of;
  // Identifies the tokens fed so far (prefix sharing's key, with positions).
  std::uint64_t tokens = 0;

  // Set when a step threw part-way: the heads are then out of step with each
  // other and with their policies, and only reset() makes the decoder usable.
  bool failed = false;
  std::uint32_t failed_at = 0;
  std::string failed_what;

  // Scratch, sized once.
  std::vector<float> x, h, qkv, attn_out, ff, ff_up, logits, scores, query_weights;
  std::vector<float> raw_queries;  // this layer's queries before RoPE and scaling, [heads, head_dim]: a signal
  // The cache's new key and value as stored, copied: sealing a block may swap
  // it for an equal published one, so the policy reads its own copy.
  std::vector<float> step_key, step_value;
  std::unique_ptr<Rope> rope;  // angles for positions below the capacity tabled
  PositionMode positions = PositionMode::kOriginal;
  // kCache: one cache's held keys rotated at their indices, [capacity, head_dim].
  std::vector<float> rotated_keys;

  void empty_store() noexcept {
    store->clear();
    for (HeadCache& hc : heads) hc.attended_count = 0;
    if (own_pool) store->pool()->reset_peaks();
    tokens = 0x6B76657669637400ULL;  // "kvevict": any fixed start
  }
};

Decoder::Decoder(std::shared_ptr<const Model> model, std::uint32_t capacity)
    : Decoder(std::move(model), DecoderOptions{.capacity = capacity}) {}

Decoder::Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!model) throw ContractError("decoder: no model");
  Impl& m = *impl_;
  m.cfg = model->config();
  m.model = std::move(model);
  std::uint32_t capacity = options.capacity;
  if (capacity == 0) capacity = m.cfg.context;
  if (capacity > m.cfg.context) {
    throw InputError(fmt::format("decoder: capacity {} is over the model's context of {} positions",
                                 capacity, m.cfg.context));
  }
  m.capacity = capacity;
  const std::uint32_t d = m.cfg.head_dim();
  const std::uint32_t caches = m.cfg.head_count();
  std::shared_ptr<BlockPool> pool = options.pool;
  if (pool) {
    if (options.block_size != 0 && options.block_size != pool->block_size()) {
      throw ParameterError(fmt::format("decoder: block_size {} differs from the shared pool's {}", options.block_size,
                                       pool->block_size()));
    }
    if (options.pool_blocks != 0) {
      throw ParameterError("decoder: pool_blocks is for a pool of the decoder's own, not a shared one");
    }
  } else if (options.block_size != 0) {
    const std::uint64_t per_cache = (std::uint64_t{capacity} + options.block_size - 1) / options.block_size;
    const std::uint64_t blocks = options.pool_blocks == 0 ? per_cache * caches : options.pool_blocks;
    if (blocks < caches) {
      throw ParameterError(fmt::format("decoder: a pool of {} blocks cannot give each of the {} caches one",
                                       blocks, caches));
    }
    if (blocks * options.block_size * d > kMaxFloats) {
      throw ParameterError(fmt::format("decoder: a pool of {} blocks of {} positions is too large", blocks,
                                       options.block_size));
    }
    pool = std::make_shared<BlockPool>(d, options.block_size, blocks, options.kv);
    m.own_pool = true;
  } else if (options.pool_blocks != 0) {
    throw ParameterError("decoder: pool_blocks needs a paged store (block_size >= 1)");
  }
  if (options.share_prefix && !pool) {
    throw ParameterError("decoder: share_prefix needs a paged store (block_size >= 1 or a shared pool)");
  }
  m.store = std::make_unique<SequenceStore>(StoreShape{m.cfg.layers, m.cfg.kv_heads, d, capacity}, std::move(pool),
                                            options.share_prefix, options.kv);
  m.heads.resize(caches);
  for (Impl::HeadCache& hc : m.heads) {
    hc.weights.assign(capacity, 0.0F);
    hc.attended.assign(capacity, 0);
    hc.queries.assign(std::size_t{m.cfg.group()} * d, 0.0F);
  }
  m.layer_budgets.assign(m.cfg.layers, nullptr);
  m.layer_budget_of.assign(m.cfg.layers, 0);
  m.empty_store();
  m.x.assign(m.cfg.width, 0.0F);
  m.h.assign(m.cfg.width, 0.0F);
  m.qkv.assign(std::size_t{m.cfg.heads + 2 * m.cfg.kv_heads} * d, 0.0F);
  m.raw_queries.assign(std::size_t{m.cfg.heads} * d, 0.0F);
  m.step_key.assign(d, 0.0F);
  m.step_value.assign(d, 0.0F);
  m.attn_out.assign(m.cfg.q_width(), 0.0F);
  m.ff.assign(m.cfg.ff, 0.0F);
  if (m.cfg.mlp == MlpKind::kSwiGlu) m.ff_up.assign(m.cfg.ff, 0.0F);
  m.logits.assign(m.cfg.vocab, 0.0F);
  m.scores.assign(capacity, 0.0F);
  m.query_weights.assign(capacity, 0.0F);
  // RoPE angles as the trainer makes them (rope.h), tabled for the
  // positions a cache can hold: every index, and the original positions
  // until the sequence outgrows the capacity.
  m.rope = std::make_unique<Rope>(m.cfg, capacity);
  m.positions = options.positions;
  if (m.positions == PositionMode::kCache) m.rotated_keys.assign(std::size_t{capacity} * d, 0.0F);
}

Decoder::~Decoder() = default;

const ModelConfig& Decoder::config() const noexcept { return impl_->cfg; }

void Decoder::set_policy(std::uint32_t h, Policy* policy, std::int64_t budget) {
  Impl& m = *impl_;
  if (h >= m.heads.size()) {
    throw ContractError(fmt::format("decoder: head {} is out of range (the model has {})", h,
                                    m.heads.size()));
  }
  if (fed_ != 0) throw ContractError("decoder: policies are set before the first token");
  if (policy != nullptr && budget < 1) {
    throw ParameterError(fmt::format("{}: budget ({}) must be at least 1", policy->name(), budget));
  }
  if (policy != nullptr && m.layer_budgets[h / m.cfg.kv_heads] != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} is in layer {}, which has a layer budget", h,
                                    h / m.cfg.kv_heads));
  }
  m.heads[h].policy = policy;
  m.heads[h].budget = budget;
}

void Decoder::set_layer_budget(std::uint32_t layer, LayerBudget* budget, std::int64_t layer_budget) {
  Impl& m = *impl_;
  if (layer >= m.cfg.layers) {
    throw ContractError(fmt::format("decoder: layer {} is out of range (the model has {})", layer, m.cfg.layers));
  }
  if (fed_ != 0) throw ContractError("decoder: layer budgets are set before the first token");
  if (budget != nullptr) {
    if (budget->heads() != m.cfg.kv_heads) {
      throw ParameterError(fmt::format("decoder: the layer budget has {} heads; layer {} has {} KV heads",
                                       budget->heads(), layer, m.cfg.kv_heads));
    }
    if (layer_budget < 1) {
      throw ParameterError(fmt::format("{}: layer budget ({}) must be at least 1", budget->head(0).name(),
                                       layer_budget));
    }
    for (std::uint32_t kv = 0; kv < m.cfg.kv_heads; ++kv) {
      if (m.heads[std::size_t{layer} * m.cfg.kv_heads + kv].policy != nullptr) {
        throw ContractError(fmt::format("decoder: cache {} of layer {} has a policy of its own",
                                        layer * m.cfg.kv_heads + kv, layer));
      }
    }
  }
  m.layer_budgets[layer] = budget;
  m.layer_budget_of[layer] = layer_budget;
}

StoreStats Decoder::store() const noexcept { return impl_->store->stats(); }

const SequenceStore& Decoder::kv() const noexcept { return *impl_->store; }

void Decoder::drop(std::uint32_t h, std::span<const Position> positions) {
  Impl& m = *impl_;
  if (h >= m.heads.size()) {
    throw ContractError(fmt::format("decoder: cache {} is out of range (the model has {})", h, m.heads.size()));
  }
  Impl::HeadCache& hc = m.heads[h];
  if (hc.policy != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} has a policy ({}); drop() is for caches without one", h,
                                    hc.policy->name()));
  }
  if (m.layer_budgets[h / m.cfg.kv_heads] != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} is under a layer budget; drop() is for caches without one", h));
  }
  SequenceStore& store = *m.store;
  if (const auto bad = store.try_mark(h, positions)) {
    throw ContractError(fmt::format("decoder: cannot drop position {} from cache {}: {}", bad->position, h,
                                    bad->repeated ? "it is named twice" : "it is not held"));
  }
  evicted_ += store.remove_marked(h);
}

void Decoder::reset() {
  impl_->empty_store();
  fed_ = 0;
  evicted_ = 0;
  impl_->failed = false;
  impl_->failed_what.clear();
}

std::span<const Position> Decoder::held(std::uint32_t h) const noexcept {
  return impl_->store->positions(h);
}

std::pair<const float*, const float*> Decoder::held_rows(std::uint32_t h) { return impl_->store->rows(h); }

std::span<const Position> Decoder::attended(std::uint32_t h) const noexcept {
  const Impl::HeadCache& hc = impl_->heads[h];
  return {hc.attended.data(), hc.attended_count};
}

std::span<const float> Decoder::attention(std::uint32_t h) const noexcept {
  const Impl::HeadCache& hc = impl_->heads[h];
  return {hc.weights.data(), hc.attended_count};
}

std::span<const float> Decoder::queries(std::uint32_t h) const noexcept { return impl_->heads[h].queries; }

std::span<const float> Decoder::step(Token token) {
  Impl& m = *impl_;
  if (m.failed) {
    throw ContractError(fmt::format("decoder: the step at position {} failed ({}), leaving the heads' caches "
                                    "and policies out of step: call reset() and give new policies",
                                    m.failed_at,
                                    m.failed_what.empty() ? std::string("an exception without a message")
                                                          : m.failed_what));
  }
  const std::uint32_t pos = fed_;
  // Before anything changes, so the decoder stays usable: a sequence runs on
  // while its policies keep every cache below the capacity.
  if (pos >= m.capacity) {
    for (std::uint32_t h = 0; h < m.heads.size(); ++h) {
      if (m.store->count(h) >= m.capacity) {
        throw InputError(fmt::format("decoder: position {} is past the capacity of {} positions (cache {} is full: "
                                     "a cache without a policy, or with a budget of the capacity or more, ends there)",
                                     pos, m.capacity, h));
      }
    }
    if (pos == std::numeric_limits<Position>::max()) {
      throw InputError(fmt::format("decoder: position {} is the last a position number holds", pos));
    }
  }
  if (token >= m.cfg.vocab) {
    throw InputError(fmt::format("decoder: token {} at position {} is outside the model's vocabulary of {}", token,
                                 pos, m.cfg.vocab));
  }
  // The strong guarantee would need every policy's state rolled back, which
  // the Policy interface has no way to do: a throw on head h comes after
  // heads 0 ... h-1 (caches and policies) admitted the token. Refuse instead
  // of computing from heads that disagree about what they hold.
  try {
    if (profile_ == nullptr) return advance(token);
    const auto started = std::chrono::steady_clock::now();
    const std::span<const float> logits = advance(token);
    profile_->total += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ++profile_->tokens;
    return logits;
  } catch (const std::exception& e) {
    m.failed = true;
    m.failed_at = pos;
    try {
      m.failed_what = e.what();
    } catch (...) {  // keep the original exception; the refusal names the position
    }
    throw;
  } catch (...) {
    m.failed = true;
    m.failed_at = pos;
    m.failed_what.clear();
    throw;
  }
}

std::span<const float> Decoder::advance(Token token) {
  Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  const Model& model = *m.model;
  const std::uint32_t pos = fed_;
  const std::uint32_t width = c.width;
  const std::uint32_t d = c.head_dim();
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  Rope& rope = *m.rope;
  const bool by_index = m.positions == PositionMode::kCache;

  // Every token so far, chained: with the positions it names a block for
  // prefix sharing (kv_store.h), whose bytes are then compared anyway.
  m.tokens = (m.tokens ^ (std::uint64_t{token} + 1)) * 0x9E3779B97F4A7C15ULL;
  m.tokens ^= m.tokens >> 29;
  std::copy_n(model.embed() + std::size_t{token} * width, width, m.x.data());
  Lap lap(profile_);
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const Model::Layer& w = model.layer(l);
    lap.skip();
    rms_norm(m.x.data(), w.attn_norm, m.h.data(), width, c.norm_eps);
    const std::uint32_t group = c.group();
    matvec(w.qkv, m.h.data(), m.qkv.data(), (c.heads + 2 * c.kv_heads) * d, width);
    if (w.qkv_bias != nullptr) {
      for (std::size_t i = 0; i < m.qkv.size(); ++i) m.qkv[i] += w.qkv_bias[i];
    }
    lap.charge(&DecodeProfile::projections);
    // The queries as projected, for policies that model them (expected
    // attention): they are rotated and scaled in place below.
    std::copy_n(m.qkv.data(), std::size_t{c.heads} * d, m.raw_queries.data());
    for (std::uint32_t hd = 0; hd < c.heads && !by_index; ++hd) {
      // Rotate q at this token's true position, then scale it (the trainer
      // scales q, not the scores). By index: per cache, below.
      rope.rotate(m.qkv.data() + std::size_t{hd} * d, pos, scale);
    }
    const float* k_rows = m.qkv.data() + std::size_t{c.heads} * d;
    const float* v_rows = k_rows + std::size_t{c.kv_heads} * d;
    LayerBudget* const shared = m.layer_budgets[l];
    for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
      const std::uint32_t cache = l * c.kv_heads + kv;
      Impl::HeadCache& hc = m.heads[cache];
      SequenceStore& store = *m.store;
      const std::uint32_t held = store.count(cache);  // positions held before this token
      if (by_index) {  // the group's queries sit at the index after the held positions
        for (std::uint32_t g = 0; g < group; ++g) rope.rotate(m.qkv.data() + std::size_t{kv * group + g} * d, held, scale);
      }
      const auto [k, v] = store.append(cache, pos);
      std::copy_n(k_rows + std::size_t{kv} * d, d, k);
      if (!by_index) rope.rotate(k, pos, 1.0F);  // the key is rotated once, where it is stored
      std::copy_n(v_rows + std::size_t{kv} * d, d, v);
      store.seal(cache, m.tokens);
      const std::uint32_t n = held + 1;
      auto [keys, values] = store.rows(cache);
      if (by_index) {  // stored before rotation: each held key turned to its index now
        std::copy_n(keys, std::size_t{n} * d, m.rotated_keys.data());
        for (std::uint32_t i = 0; i < n; ++i) rope.rotate(m.rotated_keys.data() + std::size_t{i} * d, i, 1.0F);
        keys = m.rotated_keys.data();
      }
      // The policy reads the new key and value as stored (a quantized
      // store's read back), from its own copy.
      std::copy_n(keys + std::size_t{held} * d, d, m.step_key.data());
      std::copy_n(values + std::size_t{held} * d, d, m.step_value.data());
      // Each query head of the group: scores over the held positions and the
      // new token itself, softmax, output. The policy sees their mean.
      for (std::uint32_t g = 0; g < group; ++g) {
        const std::uint32_t hd = kv * group + g;
        const float* q = m.qkv.data() + std::size_t{hd} * d;
        float* weights = group == 1 ? hc.weights.data() : m.query_weights.data();
        Eigen::Map<Eigen::VectorXf> scores(m.scores.data(), n);
        scores.noalias() = MatrixView(keys, n, d) * VecView(q, d);
        const float top = scores.maxCoeff();
        float sum = 0.0F;
        for (std::uint32_t i = 0; i < n; ++i) {
          const float e = std::exp(m.scores[i] - top);
          weights[i] = e;
          sum += e;
        }
        for (std::uint32_t i = 0; i < n; ++i) weights[i] /= sum;
        VecMut(m.attn_out.data() + std::size_t{hd} * d, d).noalias() =
            MatrixView(values, n, d).transpose() * VecView(weights, n);
        if (group == 1) continue;
        if (g == 0) {
          std::copy_n(weights, n, hc.weights.data());
        } else {
          for (std::uint32_t i = 0; i < n; ++i) hc.weights[i] += weights[i];
        }
      }
      if (group > 1) {
        const auto share = static_cast<float>(group);
        for (std::uint32_t i = 0; i < n; ++i) hc.weights[i] /= share;
      }
      std::copy_n(store.positions(cache).data(), n, hc.attended.data());
      hc.attended_count = n;
      std::copy_n(m.raw_queries.data() + std::size_t{kv} * group * d, std::size_t{group} * d, hc.queries.data());

      // The policy: the weights over the positions held before this token,
      // ascending, and the token's key (as stored), value and queries (before
      // RoPE, every query head of the group); then the token is admitted;
      // evict down to the budget. Position 0 exists before step 1: a policy
      // is given its signals alone (on_origin).
      lap.charge(&DecodeProfile::attention);
      const StepInputs inputs{.attention = std::span<const float>(hc.weights.data(), held),
                              .key = std::span<const float>(m.step_key),
                              .value = std::span<const float>(m.step_value),
                              .queries = std::span<const float>(hc.queries)};
      if (shared != nullptr) {
        if (pos == 0) {
          shared->on_origin(kv, inputs);
        } else {
          shared->on_step(kv, pos, inputs);
        }
        lap.charge(&DecodeProfile::policies);
        continue;
      }
      if (hc.policy == nullptr) continue;
      if (pos == 0) {
        hc.policy->on_origin(inputs);
        lap.charge(&DecodeProfile::policies);
        continue;
      }
      hc.policy->on_step(pos, inputs);
      if (static_cast<std::int64_t>(n) <= hc.budget) {
        lap.charge(&DecodeProfile::policies);
        continue;
      }
      store.mark(cache, hc.policy->evict(hc.budget), hc.policy->name(), pos);
      const std::uint32_t out = n - store.remove_marked(cache);
      evicted_ += n - out;
      lap.charge(&DecodeProfile::policies);
      if (static_cast<std::int64_t>(out) > hc.budget) {
        throw ContractError(fmt::format(
            "{}: left {} positions held against a budget of {} at position {} (layer {}, KV head {})",
            hc.policy->name(), out, hc.budget, pos, l, kv));
      }
    }
    // A budget shared by the layer's KV heads: one eviction for them all,
    // once every head has seen this step.
    if (shared != nullptr && pos != 0) {
      const std::int64_t budget = m.layer_budget_of[l];
      std::int64_t total = 0;
      for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) total += m.store->count(l * c.kv_heads + kv);
      if (total > budget) {
        shared->evict(budget);
        total = 0;
        for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
          const std::uint32_t cache = l * c.kv_heads + kv;
          const std::uint32_t n = m.store->count(cache);
          m.store->mark(cache, shared->victims(kv), shared->head(kv).name(), pos);
          const std::uint32_t out = n - m.store->remove_marked(cache);
          evicted_ += n - out;
          total += out;
        }
        if (total > budget) {
          throw ContractError(fmt::format("{}: layer {} holds {} positions against a layer budget of {} at position {}",
                                          shared->head(0).name(), l, total, budget, pos));
        }
      }
    }
    if (shared != nullptr && pos != 0) lap.charge(&DecodeProfile::policies);
    lap.skip();
    matvec(w.proj, m.attn_out.data(), m.h.data(), width, c.q_width());
    lap.charge(&DecodeProfile::projections);
    for (std::uint32_t i = 0; i < width; ++i) m.x[i] += m.h[i];
    lap.skip();
    rms_norm(m.x.data(), w.mlp_norm, m.h.data(), width, c.norm_eps);
    if (c.mlp == MlpKind::kGelu) {
      matvec(w.up, m.h.data(), m.ff.data(), c.ff, width);
      lap.charge(&DecodeProfile::projections);
      for (float& u : m.ff) u = 0.5F * u * (1.0F + std::erf(u * static_cast<float>(M_SQRT1_2)));
    } else {
      matvec(w.gate, m.h.data(), m.ff.data(), c.ff, width);
      matvec(w.up, m.h.data(), m.ff_up.data(), c.ff, width);
      lap.charge(&DecodeProfile::projections);
      for (std::uint32_t i = 0; i < c.ff; ++i) {  // silu(gate) * up
        const float g = m.ff[i];
        m.ff[i] = g / (1.0F + std::exp(-g)) * m.ff_up[i];
      }
    }
    lap.charge(&DecodeProfile::activation);
    matvec(w.down, m.ff.data(), m.h.data(), width, c.ff);
    lap.charge(&DecodeProfile::projections);
    for (std::uint32_t i = 0; i < width; ++i) m.x[i] += m.h[i];
  }
  lap.skip();
  rms_norm(m.x.data(), model.final_norm(), m.h.data(), width, c.norm_eps);
  matvec(model.output(), m.h.data(), m.logits.data(), c.vocab, width);
  lap.charge(&DecodeProfile::projections);
  ++fed_;
  return m.logits;
}

}  // namespace kvevict
