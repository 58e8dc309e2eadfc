// DataLoader: contiguous (B, T) batches from one token array or several shards, llm.c style.
//
// A batch takes the B*T+1 tokens starting at a multiple of B*T inside one shard: inputs[i] =
// tok[s + i] and targets[i] = tok[s + i + 1] for i < B*T. A shard of n tokens holds (n-1)/(B*T)
// such batch slots; its tail shorter than a slot is skipped on every pass. The loader does not
// own the tokens (TokenFiles of either width or in-memory vectors); they must outlive it.
//
// Note [Sharded corpora]
// In order (data.shuffle false), the stream is the shards one after another, each read front to
// back, then again from the first: position() is a token offset into the shards laid end to
// end, and a batch that would cross a shard's end starts at the next shard instead (with one
// shard: llm.c's loader). Shuffled (data.shuffle true), each epoch visits every slot once, the
// shards in an order drawn from (seed, epoch) and each shard's slots in an order drawn after it,
// so epochs reshuffle and the same seed gives the same batches on any machine; position() is
// the tokens read since the start (B*T a batch), epochs included. Either way a checkpoint's
// position puts a resumed run on the very batches it would have read (docs/design.md §10).
// data.pack false reads one example a row instead (Note [Example rows] in data/example_rows.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/token_file.h"

namespace strata {

// One shard of a stream: its tokens, named in errors as "data file x.bin", and their loss mask
// when it has one (Note [Loss masks] in data/token_file.h; size 0: every target counts).
struct TokenShard {
  TokenView tokens;
  std::string name;
  TokenView mask;
};

struct DataOrder {
  bool shuffle = false;
  uint64_t seed = 0;  // the shuffle's (train.seed)
  bool pack = true;   // false: one example a row, padded (Note [Example rows])
};

class ExampleRows;  // data/example_rows.h

class DataLoader {
 public:
  // invalid_argument when B or T is not positive, when there is no shard, or when a shard holds
  // fewer than B*T+1 tokens (the message names it and the numbers).
  static Result<DataLoader> create(std::vector<TokenShard> shards, int64_t B, int64_t T,
                                   DataOrder order = {});
  // One shard, in order. source_name reads as "data file x.bin" or "embedded corpus".
  static Result<DataLoader> create(TokenView tokens, int64_t B, int64_t T,
                                   const std::string& source_name) {
    return create({TokenShard{tokens, source_name}}, B, T);
  }
  static Result<DataLoader> create(const uint16_t* tokens, int64_t n, int64_t B, int64_t T,
                                   const std::string& source_name) {
    return create(TokenView(tokens, n), B, T, source_name);
  }

  // inputs, targets: (B, T) each; a target the shard's mask leaves out is kIgnoreTarget (Note
  // [Ignored targets] in core/targets.h). The tokens' read errors (a file that shrank: Note
  // [Reading token files] in data/token_file.h); the position advances only on success.
  Status next_batch(int32_t* inputs, int32_t* targets);

  // Where the next batch starts (Note [Sharded corpora]). Saved in checkpoints so a resumed run
  // sees the same batches.
  int64_t position() const;
  // invalid_argument when pos is negative, or (in order) past the shards' tokens: a checkpoint
  // may come from other files.
  Status set_position(int64_t pos);

  int64_t size() const { return starts_.back(); }  // tokens of all shards
  int64_t batches_per_epoch() const;
  // data.pack false: the examples and those cut to T+1 tokens; null when packed.
  const ExampleRows* example_rows() const { return rows_.get(); }

  DataLoader(DataLoader&& other) noexcept;
  DataLoader& operator=(DataLoader&& other) noexcept;
  ~DataLoader();
  int64_t batch_size() const { return B_; }
  int64_t seq_len() const { return T_; }

 private:
  DataLoader(std::vector<TokenShard> shards, int64_t B, int64_t T, DataOrder order);
  // The shard and the token offset in it of the next batch from position `pos`.
  std::pair<size_t, int64_t> in_order_start(int64_t pos) const;
  std::pair<size_t, int64_t> shuffled_start(int64_t pos);
  void draw_epoch(int64_t epoch);

  std::vector<TokenShard> shards_;
  std::vector<int64_t> starts_;       // (shards + 1) token offset of each shard end to end
  std::vector<int64_t> slot_starts_;  // (shards + 1) first batch slot of each shard
  int64_t B_ = 0;
  int64_t T_ = 0;
  DataOrder order_;
  int64_t pos_ = 0;
  int64_t epoch_ = -1;                 // the epoch epoch_slots_ holds, shuffled
  std::vector<int64_t> epoch_slots_;   // (batches_per_epoch) the epoch's slots in reading order
  std::vector<int32_t> mask_;          // (B*T) a batch's targets' mask entries
  std::unique_ptr<ExampleRows> rows_;  // data.pack false
};

}  // namespace strata
