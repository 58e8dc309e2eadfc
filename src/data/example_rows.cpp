#include "data/example_rows.h"

#include <algorithm>
#include <numeric>

#include "core/rng.h"
#include "core/targets.h"

namespace strata {

Result<ExampleRows> ExampleRows::index(const std::vector<TokenShard>& shards, int64_t B, int64_t T,
                                       DataOrder order) {
  ExampleRows r(B, T, order);
  std::vector<int32_t> chunk;  // (up to 1M mask bytes)
  for (size_t s = 0; s < shards.size(); ++s) {
    const TokenShard& shard = shards[s];
    if (shard.mask.size() == 0) {
      return invalid_argument("data.pack false needs each example's start, and " + shard.name +
                              " has no loss mask: prepare it from JSONL examples (--in X.jsonl)");
    }
    int64_t start = 0;  // the first token starts an example, marked or not
    for (int64_t first = 0; first < shard.mask.size();
         first += static_cast<int64_t>(chunk.size())) {
      chunk.resize(static_cast<size_t>(std::min<int64_t>(shard.mask.size() - first, 1 << 20)));
      STRATA_RETURN_IF_ERROR(
          shard.mask.copy(first, static_cast<int64_t>(chunk.size()), chunk.data()));
      for (size_t k = 0; k < chunk.size(); ++k) {
        const int64_t at = first + static_cast<int64_t>(k);
        if ((chunk[k] & kMaskExampleStart) == 0 || at == 0) continue;
        r.examples_.push_back({static_cast<int32_t>(s), start, at - start});
        start = at;
      }
    }
    r.examples_.push_back({static_cast<int32_t>(s), start, shard.mask.size() - start});
  }
  if (r.examples() < B) {
    return invalid_argument("data.pack false: " + std::to_string(r.examples()) +
                            " examples are too few for a batch of " + std::to_string(B) +
                            " rows; lower train.batch_size");
  }
  for (const Example& e : r.examples_) r.cut_ += e.length > T + 1;
  return r;
}

const ExampleRows::Example& ExampleRows::example_at(int64_t row) {
  const int64_t n = examples(), epoch = row / n;
  if (!order_.shuffle) return examples_[static_cast<size_t>(row % n)];
  if (epoch != epoch_) {  // drawn from (seed, epoch)
    Rng rng(derive_seed(order_.seed, static_cast<uint64_t>(epoch)));
    order_of_.resize(static_cast<size_t>(n));
    std::iota(order_of_.begin(), order_of_.end(), int64_t{0});
    shuffle_range(order_of_.begin(), order_of_.end(), rng);
    epoch_ = epoch;
  }
  return examples_[static_cast<size_t>(order_of_[static_cast<size_t>(row % n)])];
}

Status ExampleRows::next_batch(const std::vector<TokenShard>& shards, int32_t* inputs,
                               int32_t* targets) {
  for (int64_t b = 0; b < B_; ++b) {
    const Example& e = example_at(rows_read_ + b);
    const TokenShard& shard = shards[static_cast<size_t>(e.shard)];
    const int64_t L = std::min(e.length, T_ + 1);  // the row's tokens
    tokens_.resize(static_cast<size_t>(L));
    bits_.resize(static_cast<size_t>(L));
    STRATA_RETURN_IF_ERROR(shard.tokens.copy(e.start, L, tokens_.data()));
    STRATA_RETURN_IF_ERROR(shard.mask.copy(e.start, L, bits_.data()));
    int32_t* in = inputs + b * T_;
    int32_t* tgt = targets + b * T_;
    for (int64_t t = 0; t < T_; ++t) {
      in[t] = t < L ? tokens_[static_cast<size_t>(t)] : 0;  // padding: any valid id
      const bool trained = t + 1 < L && (bits_[static_cast<size_t>(t + 1)] & kMaskTrained) != 0;
      tgt[t] = trained ? tokens_[static_cast<size_t>(t + 1)] : kIgnoreTarget;
    }
  }
  rows_read_ += B_;
  return Status::ok_status();
}

}  // namespace strata
