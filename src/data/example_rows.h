// data.pack false: one example a row, padded (Note [Example rows]).
//
// Note [Example rows]
// With data.pack false each (B, T) batch holds B examples, one a row, as Hugging Face's
// collators pad them (TRL's SFT default): a row is the example's first T+1 tokens (a longer one is
// cut, and counted in the log), inputs its first T, targets its next T; past its end the inputs
// are token 0 and the targets kIgnoreTarget, so no row sees another example and padding trains
// nothing. Examples start where the loss mask says (kMaskExampleStart, Note [Loss masks]), so the
// files must come from `strata prepare --in X.jsonl`. The stream is the examples of every file in
// order, epoch after epoch, or with data.shuffle all of them in an order drawn per epoch from
// (seed, epoch); position() counts the rows read since the start.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "data/dataloader.h"

namespace strata {

class ExampleRows {
 public:
  // invalid_argument naming a file without a loss mask, or when there are fewer examples than B.
  static Result<ExampleRows> index(const std::vector<TokenShard>& shards, int64_t B, int64_t T,
                                   DataOrder order);
  // inputs, targets: (B, T); reads rows position() .. position() + B.
  Status next_batch(const std::vector<TokenShard>& shards, int32_t* inputs, int32_t* targets);
  int64_t position() const { return rows_read_; }
  void set_position(int64_t rows) { rows_read_ = rows; }
  int64_t examples() const { return static_cast<int64_t>(examples_.size()); }
  int64_t cut() const { return cut_; }  // examples longer than T+1 tokens

 private:
  struct Example {
    int32_t shard;
    int64_t start, length;
  };
  ExampleRows(int64_t B, int64_t T, DataOrder order) : B_(B), T_(T), order_(order) {}
  const Example& example_at(int64_t row);

  int64_t B_ = 0, T_ = 0;
  DataOrder order_;
  std::vector<Example> examples_;  // every file's, in order
  int64_t cut_ = 0;
  int64_t rows_read_ = 0;
  int64_t epoch_ = -1;                  // the epoch order_of_ holds, shuffled
  std::vector<int64_t> order_of_;       // (examples) the epoch's examples in reading order
  std::vector<int32_t> tokens_, bits_;  // (T+1) one row's tokens and mask bytes
};

}  // namespace strata
