// Note [Config bounds]: every integer of the config and the sizes derived from several of them
// are range-checked, one line naming the fields and the bound; the layout sums in checked
// arithmetic.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "core/config_bounds.h"
#include "model/layout.h"
#include "test_util.h"

namespace strata {
namespace {

using json = nlohmann::json;
using test::expect_error;

Status parse_sets(std::initializer_list<std::string> sets) {
  json j = default_config_json();
  for (const std::string& s : sets) {
    Status st = apply_set(j, s);
    if (!st.ok()) return st;
  }
  return parse_config(j).status();
}

TEST(ConfigBounds, HugeGradAccumIsRefusedNotWrapped) {
  // 2^62 micro-batches of 8 x 128 tokens wrapped to "0 tokens/step" and crashed; 2^40 died of
  // bad_alloc allocating the step's inputs.
  expect_error(parse_sets({"train.grad_accum=4611686018427387904"}), ErrorCode::invalid_argument,
               {"train.grad_accum", "268435456 (2^28)"});
  expect_error(parse_sets({"train.grad_accum=1099511627776"}), ErrorCode::invalid_argument,
               {"train.grad_accum", "268435456 (2^28)"});
  // Each factor within bounds, their product not.
  expect_error(parse_sets({"train.grad_accum=262145"}), ErrorCode::invalid_argument,
               {"tokens per step (train.batch_size 8 x train.seq_len 128 x train.grad_accum "
                "262145) exceed the bound of 268435456 (2^28)"});
  expect_error(parse_sets({"train.batch_size=9223372036854775807"}), ErrorCode::invalid_argument,
               {"train.batch_size"});
  EXPECT_TRUE(parse_sets({"train.grad_accum=262144"}).ok());  // 2^28 tokens exactly
}

TEST(ConfigBounds, ModelDimensions) {
  expect_error(parse_sets({"model.n_layer=4097"}), ErrorCode::invalid_argument,
               {"model.n_layer must be in [1, 4096 (2^12)], got 4097"});
  expect_error(parse_sets({"model.n_embd=131072", "model.n_head=1"}), ErrorCode::invalid_argument,
               {"model.n_embd must be in [1, 65536 (2^16)], got 131072"});
  expect_error(parse_sets({"model.context_length=9223372036854775807"}),
               ErrorCode::invalid_argument, {"model.context_length", "1048576 (2^20)"});
  // Llama 3.1's 131072 positions are the model's; they allocate nothing at train.seq_len.
  EXPECT_TRUE(parse_sets({"model.arch=llama", "model.context_length=131072"}).ok());
  expect_error(parse_sets({"model.n_embd=4611686018427387904", "model.n_head=1"}),
               ErrorCode::invalid_argument, {"model.n_embd"});
  // Each dimension within bounds, the parameters not: 4096 blocks of 12 x 65536^2.
  expect_error(parse_sets({"model.n_layer=4096", "model.n_embd=65536", "model.n_head=64"}),
               ErrorCode::invalid_argument,
               {"model.n_layer 4096", "model.n_embd 65536", "1099511627776 (2^40) parameter"});
  // GPT-3 175B's shape fits.
  EXPECT_TRUE(parse_sets({"model.n_layer=96", "model.n_embd=12288", "model.n_head=96",
                          "model.vocab_size=50257", "model.context_length=2048",
                          "train.seq_len=2048", "train.batch_size=1", "train.grad_accum=1536"})
                  .ok());
}

TEST(ConfigBounds, ActivationsOfOneStep) {
  // 2^28 tokens per step, but (B, NH, T, T) attention state for 64 blocks of 4096 heads: beyond
  // int64 bytes.
  expect_error(parse_sets({"model.context_length=65536", "train.seq_len=65536", "model.n_embd=4096",
                           "model.n_head=4096", "model.n_layer=64", "train.batch_size=1",
                           "train.grad_accum=4096"}),
               ErrorCode::invalid_argument,
               {"the activations of one step", "model.n_head 4096", "2^60"});
}

TEST(ConfigBounds, OffloadedPlanSize) {
  // Everything on host, so no io.dirs are needed; 2^19 (block, micro-batch) pairs.
  json j = default_config_json();
  for (const char* s : {"train.schedule=vertical", "offload.params_on_host=1",
                        "offload.optim_on_host=1", "offload.grads_on_host=1", "model.n_layer=64",
                        "train.batch_size=1", "train.seq_len=8", "train.grad_accum=8192"}) {
    ASSERT_TRUE(apply_set(j, s).ok()) << s;
  }
  expect_error(parse_config(j).status(), ErrorCode::invalid_argument,
               {"train.schedule vertical plans (model.n_layer 64 x train.grad_accum 8192)",
                "262144 (2^18)"});
  // The in-memory schedule builds no plan.
  ASSERT_TRUE(apply_set(j, "train.schedule=in_memory").ok());
  EXPECT_TRUE(parse_config(j).ok());
}

TEST(ConfigBounds, StepsAndIo) {
  expect_error(parse_sets({"train.steps=9007199254740993"}), ErrorCode::invalid_argument,
               {"train.steps must be in [0, 9007199254740992 (2^53)]"});
  expect_error(parse_sets({"optim.warmup_steps=9223372036854775807"}), ErrorCode::invalid_argument,
               {"optim.warmup_steps"});
  // 2^32 + 1 used to pass as queue depth 1 after a cast to int.
  expect_error(parse_sets({"io.queue_depth=4294967297"}), ErrorCode::invalid_argument,
               {"io.queue_depth must be in [1, 4096 (2^12)]"});
  expect_error(parse_sets({"io.workers=65"}), ErrorCode::invalid_argument, {"io.workers", "64"});
  expect_error(parse_sets({"io.block_size=2147483648"}), ErrorCode::invalid_argument,
               {"io.block_size", "1073741824 (2^30)"});
  expect_error(parse_sets({"io.stripe_unit=4398046511104"}), ErrorCode::invalid_argument,
               {"io.stripe_unit"});
  json dirs = json::array();
  for (int i = 0; i < 257; i++) dirs.push_back("/d" + std::to_string(i));
  expect_error(parse_sets({"io.dirs=" + dirs.dump()}), ErrorCode::invalid_argument,
               {"io.dirs lists 257 directories, more than 256"});
  EXPECT_TRUE(parse_sets({"io.queue_depth=4096", "io.workers=64", "io.block_size=1073741824",
                          "train.steps=9007199254740992"})
                  .ok());
}

// The layout's totals agree with what the bounds assume, at the largest model they allow.
TEST(ConfigBounds, LayoutOfALargeModelIsSummedExactly) {
  ModelConfig m;
  m.vocab_size = 65536;
  m.context_length = 65536;
  m.n_embd = 65536;
  m.n_head = 64;
  m.n_layer = 20;  // 20 x 12 x 2^32: just under 2^40
  ASSERT_TRUE(
      parse_sets({"model.vocab_size=65536", "model.context_length=65536", "model.n_embd=65536",
                  "model.n_head=64", "model.n_layer=20", "train.batch_size=1"})
          .ok());
  const ParamLayout layout = make_param_layout(m);
  const int64_t C = m.n_embd;
  EXPECT_EQ(layout.parameter_count, 2 * 65536 * C + 20 * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_GE(layout.total_elems, layout.parameter_count);
  EXPECT_LE(layout.total_elems, kMaxParameterElems);
}

}  // namespace
}  // namespace strata
