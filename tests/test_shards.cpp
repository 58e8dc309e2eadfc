// Sharded corpora: the loader over several token files, in order and shuffled per epoch (Note
// [Sharded corpora] in data/dataloader.h), and the file lists a data field names (Note [Token
// file lists] in data/token_paths.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/dataloader.h"
#include "data/token_paths.h"
#include "test_util.h"

namespace strata {
namespace {

using test::expect_error;

// Shard k's token i is 1000 k + i, so a batch's first input says where it came from.
struct Shards {
  std::vector<std::vector<uint16_t>> tokens;
  std::vector<TokenShard> views() const {
    std::vector<TokenShard> out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      out.push_back({TokenView(tokens[k].data(), static_cast<int64_t>(tokens[k].size())),
                     "shard " + std::to_string(k)});
    }
    return out;
  }
};

Shards make_shards(const std::vector<int64_t>& sizes) {
  Shards s;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<uint16_t> t(static_cast<size_t>(sizes[k]));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint16_t>(1000 * k + i);
    s.tokens.push_back(std::move(t));
  }
  return s;
}

// The first input token of each of the next n batches, checking that every batch is
// contiguous and its targets are its inputs shifted by one.
std::vector<int32_t> next_starts(DataLoader& dl, int n) {
  const int64_t bt = dl.batch_size() * dl.seq_len();
  std::vector<int32_t> x(static_cast<size_t>(bt)), y(x.size()), starts;
  for (int b = 0; b < n; ++b) {
    EXPECT_TRUE(dl.next_batch(x.data(), y.data()).ok());
    for (int64_t i = 0; i < bt; ++i) {
      EXPECT_EQ(x[static_cast<size_t>(i)], x[0] + i);
      EXPECT_EQ(y[static_cast<size_t>(i)], x[0] + i + 1);
    }
    starts.push_back(x[0]);
  }
  return starts;
}

TEST(ShardedLoader, InOrderReadsEachShardFrontToBackThenWraps) {
  // B*T = 4: shard 0 holds slots at 0, 4 (its 10th token is a tail), shard 1 one slot (5 tokens
  // exactly: the last target is its last token), shard 2 slots at 0, 4, 8.
  Shards s = make_shards({10, 5, 13});
  auto dl = DataLoader::create(s.views(), 1, 4);
  ASSERT_TRUE(dl.ok()) << dl.status().to_string();
  EXPECT_EQ(dl->batches_per_epoch(), 6);
  EXPECT_EQ(dl->size(), 28);
  EXPECT_EQ(next_starts(*dl, 6), (std::vector<int32_t>{0, 4, 1000, 2000, 2004, 2008}));
  EXPECT_EQ(dl->position(), 15 + 12);  // shard 2 starts at token 15; its third slot ends at 12
  EXPECT_EQ(next_starts(*dl, 2), (std::vector<int32_t>{0, 4}));
  // A position from a checkpoint resumes on the same batch, inside any shard.
  ASSERT_TRUE(dl->set_position(10).ok());  // shard 1's start
  EXPECT_EQ(next_starts(*dl, 2), (std::vector<int32_t>{1000, 2000}));
  ASSERT_TRUE(dl->set_position(8).ok());  // shard 0's tail: the next shard's first slot
  EXPECT_EQ(next_starts(*dl, 1), (std::vector<int32_t>{1000}));
  expect_error(dl->set_position(29), ErrorCode::invalid_argument, {"position 29", "28 tokens"});
}

TEST(ShardedLoader, ShuffledVisitsEverySlotOnceAnEpochAndReshuffles) {
  Shards s = make_shards({41, 33, 57, 9});  // 10 + 8 + 14 + 2 slots of B*T = 4
  auto dl = DataLoader::create(s.views(), 2, 2, DataOrder{true, 7});
  ASSERT_TRUE(dl.ok());
  const int64_t n = dl->batches_per_epoch();
  ASSERT_EQ(n, 34);
  std::vector<int32_t> expected;
  for (size_t k = 0; k < s.tokens.size(); ++k) {
    for (int64_t t = 0; t + 5 <= static_cast<int64_t>(s.tokens[k].size()); t += 4)
      expected.push_back(static_cast<int32_t>(1000 * k + t));
  }
  std::vector<std::vector<int32_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    epochs.push_back(next_starts(*dl, static_cast<int>(n)));
    std::vector<int32_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, expected) << "epoch " << e;
  }
  EXPECT_EQ(dl->position(), 3 * n * 4);  // tokens read since the start, epochs included
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], expected);  // not the files' order
  // Each shard's slots come together: a shard's order is drawn, then its slots'.
  std::vector<int32_t> shard_of;
  for (int32_t t : epochs[0]) {
    if (shard_of.empty() || shard_of.back() != t / 1000) shard_of.push_back(t / 1000);
  }
  EXPECT_EQ(shard_of.size(), 4u);

  // The same seed gives the same batches; a position resumes them anywhere, across epochs too.
  for (int64_t done : {int64_t{0}, int64_t{5}, n - 1, n, 2 * n + 3}) {
    auto again = DataLoader::create(s.views(), 2, 2, DataOrder{true, 7});
    ASSERT_TRUE(again->set_position(done * 4).ok());
    const std::vector<int32_t> got = next_starts(*again, 4);
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t j = done + b;
      EXPECT_EQ(got[static_cast<size_t>(b)], epochs[j / n][static_cast<size_t>(j % n)])
          << "resumed after " << done;
    }
  }
  auto other = DataLoader::create(s.views(), 2, 2, DataOrder{true, 8});
  EXPECT_NE(next_starts(*other, static_cast<int>(n)), epochs[0]);
  expect_error(other->set_position(-4), ErrorCode::invalid_argument, {"position -4"});
}

TEST(ShardedLoader, EveryShardMustHoldABatch) {
  Shards s = make_shards({40, 8, 40});
  expect_error(DataLoader::create(s.views(), 2, 4).status(), ErrorCode::invalid_argument,
               {"shard 1: 8 tokens are too few for one batch of 2x4 (needs 9)"});
  expect_error(DataLoader::create(std::vector<TokenShard>{}, 2, 4).status(),
               ErrorCode::invalid_argument, {"no token files"});
}

TEST(TokenPaths, GlobsSortListsKeepTheirOrder) {
  const std::string dir = test::make_temp_dir("token_paths");
  for (const char* name : {"train_003.bin", "train_001.bin", "train_002.bin", "val.bin"}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  auto files = expand_token_paths(dir + "/train_*.bin", "data.train");
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  EXPECT_EQ(*files, (std::vector<std::string>{dir + "/train_001.bin", dir + "/train_002.bin",
                                              dir + "/train_003.bin"}));
  files = expand_token_paths(dir + "/val.bin," + dir + "/train_00[12].bin", "data.val");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(*files, (std::vector<std::string>{dir + "/val.bin", dir + "/train_001.bin",
                                              dir + "/train_002.bin"}));
  files = expand_token_paths(dir + "/missing.bin", "data.train");  // opened (and refused) later
  EXPECT_EQ(*files, std::vector<std::string>{dir + "/missing.bin"});
  expect_error(expand_token_paths(dir + "/fineweb_*.bin", "data.train").status(),
               ErrorCode::not_found, {"data.train: no file matches", "fineweb_*.bin"});
  expect_error(expand_token_paths(dir + "/val.bin,", "data.val").status(),
               ErrorCode::invalid_argument, {"data.val", "empty element"});
  expect_error(
      expand_token_paths(dir + "/train_*.bin," + dir + "/train_001.bin", "data.train").status(),
      ErrorCode::invalid_argument, {"train_001.bin twice"});
  std::filesystem::remove_all(dir);
}

// Note [Resuming with changed fields]: the shuffle and, when it is on, the seed order the data.
TEST(TokenPaths, ShuffleAndItsSeedAreDataStreamFields) {
  TrainConfig a, b;
  b.seed = a.seed + 1;
  EXPECT_TRUE(data_stream_changes(a, b).empty());  // the seed orders nothing without a shuffle
  b.data_shuffle = true;
  auto changes = data_stream_changes(a, b);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "data.shuffle");
  EXPECT_EQ(changes[1].key, "train.seed");
  a.data_shuffle = true;
  changes = data_stream_changes(a, b);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, "train.seed");
}

}  // namespace
}  // namespace strata
