// Loss masks: the mask file beside a token file (Note [Loss masks] in data/token_file.h), the
// loader turning it into ignored targets, and the step's loss being the mean over every
// micro-batch's counted targets (Note [Ignored targets] in core/targets.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/targets.h"
#include "data/dataloader.h"
#include "data/example_rows.h"
#include "data/token_file.h"
#include "test_util.h"
#include "train/in_memory_trainer.h"

namespace strata {
namespace {

using test::expect_error;

Status write_mask(const std::string& path, const std::vector<int32_t>& bits) {
  STRATA_ASSIGN_OR_RETURN(TokenFileWriter w, TokenFileWriter::create_mask(path));
  STRATA_RETURN_IF_ERROR(w.append(bits));
  return w.finish();
}

TEST(LossMask, FileRoundTripAndTheLoaderIgnoresMaskedTargets) {
  const std::string dir = test::make_temp_dir("loss_mask");
  std::vector<uint16_t> tokens(21);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(100 + i);
  std::vector<int32_t> bits(21);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = i % 3 != 0;
  const std::string mask_path = mask_path_for(dir + "/x.bin");
  ASSERT_TRUE(write_mask(mask_path, bits).ok());
  auto mask = TokenFile::open_mask(mask_path, 21);
  ASSERT_TRUE(mask.ok()) << mask.status().to_string();
  EXPECT_EQ(mask->token_bytes(), 1);

  auto dl =
      DataLoader::create({TokenShard{TokenView(tokens.data(), 21), "x", mask->view()}}, 2, 5, {});
  ASSERT_TRUE(dl.ok());
  std::vector<int32_t> x(10), y(10);
  for (int batch = 0; batch < 2; ++batch) {
    ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
    for (int i = 0; i < 10; ++i) {
      const int t = batch * 10 + i + 1;  // the target's position in the file
      EXPECT_EQ(x[static_cast<size_t>(i)], 100 + t - 1);
      EXPECT_EQ(y[static_cast<size_t>(i)], bits[static_cast<size_t>(t)] ? 100 + t : kIgnoreTarget)
          << "batch " << batch << " target " << i;
    }
  }

  // Refused naming the file: another count, a byte with other bits, a token file's bytes.
  expect_error(TokenFile::open_mask(mask_path, 22).status(), ErrorCode::bad_format,
               {"mask file", "x.bin.mask", "masks 21 tokens", "holds 22 tokens"});
  std::string raw;
  {
    std::ifstream f(mask_path, std::ios::binary);
    raw.assign(std::istreambuf_iterator<char>(f), {});
  }
  raw[1024 + 4] = 7;
  std::ofstream(mask_path, std::ios::binary | std::ios::trunc) << raw;
  expect_error(TokenFile::open_mask(mask_path, 21).status(), ErrorCode::bad_format,
               {"x.bin.mask", "byte 7 at token 4 has bits other than"});
  ASSERT_TRUE(write_token_file_llmc(dir + "/y.bin", tokens.data(), 21).ok());
  expect_error(TokenFile::open_mask(dir + "/y.bin", 21).status(), ErrorCode::bad_format,
               {"y.bin is not a Strata loss mask"});
  auto w = TokenFileWriter::create_mask(dir + "/z.mask");
  ASSERT_TRUE(w.ok());
  expect_error(w->append(std::vector<int32_t>{0, 1, 3, 4}), ErrorCode::invalid_argument,
               {"token 4 at position 3"});
}

// Note [Example rows]: data.pack false reads one example a row from the mask's example starts:
// padded past its end (inputs 0, targets ignored), cut at T+1 tokens, prompts still masked; in
// order epoch after epoch, or shuffled per epoch, and resumable from position().
TEST(LossMask, OneExampleARowWhenNotPacked) {
  // Examples of 3, 7 and 4 tokens; token i is 100 + i; the second example's first 2 not trained.
  std::vector<uint16_t> tokens(14);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(100 + i);
  std::vector<int32_t> bits(14, kMaskTrained);
  bits[0] |= kMaskExampleStart;
  bits[3] = kMaskExampleStart;
  bits[4] = 0;
  bits[10] |= kMaskExampleStart;
  std::vector<uint8_t> mask(bits.begin(), bits.end());
  const std::vector<TokenShard> shards = {
      {TokenView(tokens.data(), 14), "x", TokenView(mask.data(), 14)}};
  auto dl = DataLoader::create(shards, 1, 5, DataOrder{.pack = false});
  ASSERT_TRUE(dl.ok()) << dl.status().to_string();
  ASSERT_NE(dl->example_rows(), nullptr);
  EXPECT_EQ(dl->example_rows()->examples(), 3);
  EXPECT_EQ(dl->example_rows()->cut(), 1);  // 7 tokens > T+1 = 6
  EXPECT_EQ(dl->batches_per_epoch(), 3);
  const int32_t I = kIgnoreTarget;
  const std::vector<std::vector<int32_t>> want_in = {
      {100, 101, 102, 0, 0}, {103, 104, 105, 106, 107}, {110, 111, 112, 113, 0}};
  const std::vector<std::vector<int32_t>> want_tgt = {
      {101, 102, I, I, I}, {I, 105, 106, 107, 108}, {111, 112, 113, I, I}};
  std::vector<int32_t> x(5), y(5);
  for (int row = 0; row < 4; ++row) {  // the fourth is the first again: the next epoch
    ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
    EXPECT_EQ(x, want_in[row % 3]) << "row " << row;
    EXPECT_EQ(y, want_tgt[row % 3]) << "row " << row;
  }
  EXPECT_EQ(dl->position(), 4);
  ASSERT_TRUE(dl->set_position(2).ok());
  ASSERT_TRUE(dl->next_batch(x.data(), y.data()).ok());
  EXPECT_EQ(x, want_in[2]);

  // Shuffled: every example once an epoch; a position resumes the same rows.
  auto sh = DataLoader::create(shards, 1, 5, DataOrder{.shuffle = true, .seed = 3, .pack = false});
  ASSERT_TRUE(sh.ok());
  std::vector<int32_t> firsts;
  for (int row = 0; row < 6; ++row) {
    ASSERT_TRUE(sh->next_batch(x.data(), y.data()).ok());
    firsts.push_back(x[0]);
  }
  for (int e = 0; e < 2; ++e) {
    std::vector<int32_t> epoch(firsts.begin() + 3 * e, firsts.begin() + 3 * e + 3);
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, (std::vector<int32_t>{100, 103, 110})) << "epoch " << e;
  }
  auto again =
      DataLoader::create(shards, 1, 5, DataOrder{.shuffle = true, .seed = 3, .pack = false});
  ASSERT_TRUE(again->set_position(4).ok());
  ASSERT_TRUE(again->next_batch(x.data(), y.data()).ok());
  EXPECT_EQ(x[0], firsts[4]);

  expect_error(DataLoader::create(shards, 4, 5, DataOrder{.pack = false}).status(),
               ErrorCode::invalid_argument, {"3 examples are too few for a batch of 4 rows"});
  expect_error(DataLoader::create({TokenShard{TokenView(tokens.data(), 14), "data file y.bin"}}, 1,
                                  5, DataOrder{.pack = false})
                   .status(),
               ErrorCode::invalid_argument, {"data.pack false", "y.bin has no loss mask"});
}

// The step's loss is the mean over the counted targets of all its micro-batches, as Hugging
// Face's num_items_in_batch makes it: M = 2 micro-batches of one row give the gradient of M = 1
// with both rows, however unevenly the mask splits the counted targets between them (a mean per
// micro-batch would weigh row 0's 2 targets as much as row 1's 16).
TEST(LossMask, TheStepMeanSpansItsMicroBatches) {
  TrainConfig c = test::tiny_offload_config("in_memory", "");  // vocabulary 64, T 16
  c.steps = 2;
  c.optim.warmup_steps = 0;
  std::vector<int32_t> in(2 * 16), tgt(2 * 16);
  for (int i = 0; i < 32; ++i) {
    in[static_cast<size_t>(i)] = (i * 37 + 11) % 64;
    // Row 0 counts 2 targets, row 1 all 16.
    tgt[static_cast<size_t>(i)] = i < 14 ? kIgnoreTarget : (i * 53 + 5) % 64;
  }
  auto device = create_cpu_device();
  std::vector<std::vector<float>> grads;
  std::vector<double> losses, norms;
  for (int M : {2, 1}) {
    c.grad_accum = M;
    c.batch_size = 2 / M;
    auto t = InMemoryTrainer::create(*device, c);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    auto st = (*t)->train_step(in.data(), tgt.data());
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    losses.push_back(st->loss);
    norms.push_back(st->grad_norm);
    grads.emplace_back(static_cast<size_t>((*t)->layout().total_elems));
    (*t)->read_grads(grads.back().data());  // the step's gradient, before clipping
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6 * losses[1]);
  EXPECT_NEAR(norms[0], norms[1], 1e-6 * norms[1]);
  EXPECT_LE(
      test::max_rel_error(grads[0].data(), grads[1].data(), static_cast<int64_t>(grads[0].size())),
      1e-5);
}

}  // namespace
}  // namespace strata
