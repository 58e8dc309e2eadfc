#include "data/dataloader.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/rng.h"
#include "core/targets.h"
#include "data/example_rows.h"

namespace strata {

Result<DataLoader> DataLoader::create(std::vector<TokenShard> shards, int64_t B, int64_t T,
                                      DataOrder order) {
  const std::string first = shards.empty() ? "data" : shards.front().name;
  if (B <= 0 || T <= 0) {
    return invalid_argument(first + ": batch shape " + std::to_string(B) + "x" + std::to_string(T) +
                            " must be positive");
  }
  // B*T+1 must not overflow before it is compared with n.
  if (B > (std::numeric_limits<int64_t>::max() - 1) / T) {
    return invalid_argument(first + ": batch shape " + std::to_string(B) + "x" + std::to_string(T) +
                            " is too large");
  }
  if (shards.empty()) return invalid_argument("data: no token files");
  if (!order.pack) {  // rows are padded: any example fits
    STRATA_ASSIGN_OR_RETURN(ExampleRows rows, ExampleRows::index(shards, B, T, order));
    DataLoader d(std::move(shards), B, T, order);
    d.rows_ = std::make_unique<ExampleRows>(std::move(rows));
    return d;
  }
  const int64_t need = B * T + 1;
  for (const TokenShard& s : shards) {
    if (s.tokens.size() >= need) continue;
    return invalid_argument(s.name + ": " + std::to_string(s.tokens.size()) +
                            " tokens are too few for one batch of " + std::to_string(B) + "x" +
                            std::to_string(T) + " (needs " + std::to_string(need) +
                            "); lower train.batch_size or train.seq_len");
  }
  return DataLoader(std::move(shards), B, T, order);
}

DataLoader::DataLoader(DataLoader&& other) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&& other) noexcept = default;
DataLoader::~DataLoader() = default;

int64_t DataLoader::position() const {
  return rows_ ? rows_->position() : pos_;
}

int64_t DataLoader::batches_per_epoch() const {
  return rows_ ? rows_->examples() / B_ : slot_starts_.back();
}

DataLoader::DataLoader(std::vector<TokenShard> shards, int64_t B, int64_t T, DataOrder order)
    : shards_(std::move(shards)), B_(B), T_(T), order_(order) {
  starts_.push_back(0);
  slot_starts_.push_back(0);
  for (const TokenShard& s : shards_) {
    starts_.push_back(starts_.back() + s.tokens.size());
    slot_starts_.push_back(slot_starts_.back() + (s.tokens.size() - 1) / (B * T));
  }
}

std::pair<size_t, int64_t> DataLoader::in_order_start(int64_t pos) const {
  const size_t last = shards_.size() - 1;
  size_t s =
      static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) -
      1;
  s = std::min(s, last);
  int64_t local = pos - starts_[s];
  if (local + B_ * T_ + 1 > shards_[s].tokens.size()) {  // the tail: the next shard's start
    s = s == last ? 0 : s + 1;
    local = 0;
  }
  return {s, local};
}

void DataLoader::draw_epoch(int64_t epoch) {
  Rng rng(derive_seed(order_.seed, static_cast<uint64_t>(epoch)));
  std::vector<size_t> shard_order(shards_.size());
  std::iota(shard_order.begin(), shard_order.end(), size_t{0});
  shuffle_range(shard_order.begin(), shard_order.end(), rng);
  epoch_slots_.clear();
  for (size_t s : shard_order) {
    const auto from = static_cast<std::ptrdiff_t>(epoch_slots_.size());
    for (int64_t k = slot_starts_[s]; k < slot_starts_[s + 1]; ++k) epoch_slots_.push_back(k);
    shuffle_range(epoch_slots_.begin() + from, epoch_slots_.end(), rng);
  }
  epoch_ = epoch;
}

std::pair<size_t, int64_t> DataLoader::shuffled_start(int64_t pos) {
  const int64_t j = pos / (B_ * T_), n = batches_per_epoch();
  if (j / n != epoch_) draw_epoch(j / n);
  const int64_t slot = epoch_slots_[static_cast<size_t>(j % n)];
  const size_t s = static_cast<size_t>(
      std::upper_bound(slot_starts_.begin(), slot_starts_.end(), slot) - slot_starts_.begin() - 1);
  return {s, (slot - slot_starts_[s]) * B_ * T_};
}

Status DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  if (rows_) return rows_->next_batch(shards_, inputs, targets);
  const int64_t bt = B_ * T_;
  const auto [s, local] = order_.shuffle ? shuffled_start(pos_) : in_order_start(pos_);
  const TokenView& tokens = shards_[s].tokens;
  STRATA_RETURN_IF_ERROR(tokens.copy(local, bt, inputs));
  STRATA_RETURN_IF_ERROR(tokens.copy(local + 1, bt, targets));
  const TokenView& mask = shards_[s].mask;
  if (mask.size() > 0) {
    mask_.resize(static_cast<size_t>(bt));
    STRATA_RETURN_IF_ERROR(mask.copy(local + 1, bt, mask_.data()));
    for (int64_t i = 0; i < bt; ++i) {
      if ((mask_[static_cast<size_t>(i)] & kMaskTrained) == 0) targets[i] = kIgnoreTarget;
    }
  }
  pos_ = order_.shuffle ? (pos_ / bt + 1) * bt : starts_[s] + local + bt;
  return Status::ok_status();
}

Status DataLoader::set_position(int64_t pos) {
  const std::string name =
      shards_.size() == 1 ? shards_.front().name : std::to_string(shards_.size()) + " data files";
  if (pos < 0 || (!order_.shuffle && !rows_ && pos > size())) {
    return invalid_argument(name + ": position " + std::to_string(pos) + " is outside its " +
                            std::to_string(size()) + " tokens");
  }
  if (rows_) {
    rows_->set_position(pos);
  } else {
    pos_ = pos;
  }
  return Status::ok_status();
}

}  // namespace strata
