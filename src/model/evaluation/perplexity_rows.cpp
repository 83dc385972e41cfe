#include "kvevict/model/evaluation/perplexity_rows.h"

#include <cstdint>

#include "kvevict/eval/json.h"

namespace kvevict {

namespace {

using Row = PerplexityRow;

bool full_cache(const Row& r) { return r.policy.empty(); }
// The row every other's extra bits are measured from: the full cache at fp32.
bool reference(const Row& r) { return r.policy.empty() && r.kv_precision == "fp32"; }

// A field that is present but may have no value for this row (the full
// cache's policy, budget, rank and proxies): put() when it has one, else null.
template <class Put>
void value_or_null(bool has_value, const FieldInfo& f, RowVisitor& v, Put put) {
  if (has_value) {
    put();
  } else {
    v.null(f);
  }
}

constexpr RowField<Row> kFields[] = {
    {{"rank", FieldType::kInteger, "",
      "1 = lowest perplexity at the ranking budget (ties share a rank); null for the full cache", "ranked (compare)",
      {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.ranked) value_or_null(!full_cache(r), f, v, [&] { v.integer(f, r.rank); });
     }},
    {{"policy", FieldType::kString, "", "registry name of the policy; null for the full cache", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       value_or_null(!full_cache(r), f, v, [&] { v.string(f, r.policy); });
     }},
    {{"budget", FieldType::kInteger, "positions", "positions each cache keeps; null for the full cache", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       value_or_null(!full_cache(r), f, v, [&] { v.integer(f, r.budget); });
     }},
    {{"params", FieldType::kObject, "",
      "every effective parameter of the policy, name -> integer (the layer-0 head's for pyramidkv); {} for the full "
      "cache",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.params(f, r.params); }},
    {{"prefill", FieldType::kInteger, "tokens",
      "tokens of each window read with the full cache and compressed once; only the predictions after them are "
      "scored",
      "prefill > 0", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.prefill > 0) v.integer(f, r.prefill);
     }},
    {{"perplexity", FieldType::kNumber, "",
      "exp of the mean negative log-likelihood (nats) per predicted token (a byte for kvevict-tiny)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.perplexity); }},
    {{"bitsPerByte", FieldType::kNumber, "bits per byte",
      "the predictions' negative log-likelihood in bits over the bytes the predicted tokens stand for (comparable "
      "across tokenizers)",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.bits_per_byte); }},
    {{"extraBitsPerByte", FieldType::kNumber, "bits per byte",
      "bitsPerByte minus the fp32 full cache's on the same windows (a full cache at a lower precision: what the bits "
      "alone cost); null for the fp32 full cache",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       value_or_null(!reference(r), f, v, [&] { v.number(f, r.extra_bits_per_byte); });
     }},
    {{"extraLow", FieldType::kNumber, "bits per byte",
      "low end of the 95 % interval of extraBitsPerByte, paired by window (Student's t over the windows); null for "
      "the fp32 full cache or a single window",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       value_or_null(!reference(r) && r.has_extra_interval, f, v, [&] { v.number(f, r.extra_low); });
     }},
    {{"extraHigh", FieldType::kNumber, "bits per byte",
      "high end of the same interval; null for the fp32 full cache or a single window", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       value_or_null(!reference(r) && r.has_extra_interval, f, v, [&] { v.number(f, r.extra_high); });
     }},
    {{"predictions", FieldType::kInteger, "tokens",
      "tokens predicted (scored), all windows together (bytes for kvevict-tiny)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       v.integer(f, static_cast<std::int64_t>(r.predictions));
     }},
    {{"predictedBytes", FieldType::kInteger, "bytes", "the bytes of text the predicted tokens stand for", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       v.integer(f, static_cast<std::int64_t>(r.predicted_bytes));
     }},
    {{"tokenizer", FieldType::kString, "",
      "the model's tokenizer: bytes (kvevict-tiny), or the file's own (llama SentencePiece or gpt2 byte-level BPE, "
      "its pre-tokenizer and size)",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.string(f, r.tokenizer); }},
    {{"evicted", FieldType::kInteger, "positions", "positions removed, every cache and window together", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, static_cast<std::int64_t>(r.evicted)); }},
    {{"retainedAttentionMass", FieldType::kNumber, "share of attention (0..1)",
      "the same policy and budget replayed on the model's full-cache attention: mean over heads, then windows, of the "
      "attention on positions still held; null for the full cache",
      "compare without a prefill", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.proxied) value_or_null(r.has_proxy, f, v, [&] { v.number(f, r.proxy.retained_attention_mass); });
     }},
    {{"heavyHitterRecall", FieldType::kNumber, "share of positions (0..1)",
      "the same replay's share of each step's top 32 attended positions still held; null for the full cache",
      "compare without a prefill", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.proxied) value_or_null(r.has_proxy, f, v, [&] { v.number(f, r.proxy.heavy_hitter_recall); });
     }},
    {{"evictionCalls", FieldType::kInteger, "calls",
      "the same replay's eviction calls, summed over heads and windows; null for the full cache",
      "compare without a prefill", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.proxied) value_or_null(r.has_proxy, f, v, [&] { v.integer(f, r.proxy.eviction_calls); });
     }},
    {{"granularity", FieldType::kString, "",
      "which caches shared a budget: layer (a layer's KV heads, budget x KV heads positions together) or sequence "
      "(every cache holds the same budget positions: llama.cpp's cells; docs/paged.md)",
      "--granularity layer or sequence given", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (!r.granularity.empty()) v.string(f, r.granularity);
     }},
    {{"blockSize", FieldType::kInteger, "positions", "positions per block of the paged store", "block size given",
      {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.block_size > 0) v.integer(f, r.block_size);
     }},
    {{"peakBlocks", FieldType::kInteger, "blocks", "blocks in use at once over every cache, the most of any window",
      "block size given", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.block_size > 0) v.integer(f, static_cast<std::int64_t>(r.peak_blocks));
     }},
    {{"peakPositions", FieldType::kInteger, "positions",
      "positions held at once over every cache, the most of any window", "paged options given", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.store_measured) v.integer(f, static_cast<std::int64_t>(r.peak_positions));
     }},
    {{"kvMemory", FieldType::kInteger, "bytes",
      "the bytes a cache the budget was chosen to fit: floor(kvMemory / bytesPerPosition) positions "
      "(perplexity --kv-memory)",
      "--kv-memory given (a policy's rows)", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) {
       if (r.memory_bytes > 0) v.integer(f, r.memory_bytes);
     }},
    {{"kvPrecision", FieldType::kString, "",
      "the precision keys and values were stored at: fp32, fp16, int8 or int4 (docs/paged.md)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.string(f, r.kv_precision); }},
    {{"kvResidual", FieldType::kInteger, "positions",
      "the residual window: newest positions kept at fp32 until that many arrive (0 at fp32)", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.kv_residual); }},
    {{"bytesPerPosition", FieldType::kNumber, "bytes",
      "bytes one stored position costs, key and value, once out of the residual window (int4: with its share of "
      "the key group's scales)",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.bytes_per_position); }},
    {{"modelBytesPerPosition", FieldType::kNumber, "bytes",
      "what one position costs the whole model: bytesPerPosition x layers x KV heads", "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.model_bytes_per_position); }},
    {{"peakCacheBytes", FieldType::kInteger, "bytes",
      "the most bytes any one cache held at once, measured (rows or blocks, the residual window, int4 key groups), "
      "the most of any window",
      "", {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, static_cast<std::int64_t>(r.peak_cache_bytes)); }},
    {{"seconds", FieldType::kNumber, "seconds", "decoder time of the row, summed over windows (varies run to run)", "",
      {}},
     [](const Row& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.seconds); }},
};
constexpr auto kInfos = field_infos(kFields);

}  // namespace

std::span<const FieldInfo> perplexity_row_schema() { return kInfos; }

void for_each_field(const PerplexityRow& row, RowVisitor& visitor) {
  for (std::size_t i = 0; i < kInfos.size(); ++i) kFields[i].emit(row, kInfos[i], visitor);
}

std::string perplexity_json(const std::vector<PerplexityRow>& rows, const JsonSource& source, int indent) {
  return envelope_json(source,
                       objects_json(
                           rows.size(), [&](std::size_t i, RowVisitor& visitor) { for_each_field(rows[i], visitor); },
                           -1),
                       {}, indent);
}

}  // namespace kvevict
