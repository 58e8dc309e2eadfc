// Checkpoint and resume (CTest names resume_checkpoint.*):
//  - 2N steps straight == N steps, checkpoint, a fresh trainer resumed from it, N more: the same
//    losses and the same parameters and AdamW moments bit for bit, for the in-memory, horizontal
//    and vertical schedules (the vertical one has steps pending at the boundary: the checkpoint
//    applies them, the straight run applies them in the next forward; same bits);
//  - bad input: another model shape, a missing file, a flipped byte, a full disk while saving
//    (the previous checkpoint stays intact), incomplete directories never chosen, every field of
//    trainer_state.json out of range or of the wrong type;
//  - saving and loading hold O(one tensor) of host memory beside the trainer's own, not a slab
//    or the model, pieces that cut tensors keep every bit, and a corrupt file reaches no slab
//    writer (Note [Checkpoint format], Note [Slab pieces]);
//  - a version 1 checkpoint (both moments in optimizer.safetensors) still loads.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/config.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "io/configured_engine.h"
#include "io/crc32c.h"
#include "test_util.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr int kHalf = 4;

TrainConfig small_config(const std::string& schedule, const std::string& store_dir) {
  TrainConfig c = test::tiny_offload_config(schedule, store_dir);
  c.steps = 2 * kHalf;
  c.optim.warmup_steps = 2;
  return c;
}

// Whichever trainer the config's schedule names, through the one Trainer interface.
struct AnyTrainer {
  std::unique_ptr<Device> dev = test::make_test_device();
  std::unique_ptr<Trainer> trainer;

  explicit AnyTrainer(const TrainConfig& c) {
    auto t = create_trainer(*dev, c);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (t.ok()) trainer = std::move(*t);
  }
  double step(const int32_t* in, const int32_t* tgt) {
    auto st = trainer->train_step(in, tgt);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    return st.ok() ? st->loss : 0.0;
  }
  SlabReader reader() {
    return [this](int64_t slab, const SlabPieceFn& take) {
      return trainer->read_slab_pieces(slab, take);
    };
  }
  SlabWriter writer() {
    return [this](int64_t slab, const SlabPieceFn& fill) {
      return trainer->write_slab_pieces(slab, fill);
    };
  }
  int64_t adam_steps() const { return trainer->adam_steps(); }
  void set_progress(int64_t s, int64_t a) { trainer->set_progress(s, a); }
  // master | m | v of every slab, in layout order.
  std::vector<float> state(const ParamLayout& layout) {
    std::vector<float> out;
    for (size_t s = 0; s < layout.slabs.size(); ++s) {
      const int64_t n = layout.slabs[s].numel;
      std::vector<float> w(static_cast<size_t>(n)), m(w.size()), v(w.size());
      EXPECT_TRUE(
          trainer->read_slab_state(static_cast<int64_t>(s), w.data(), m.data(), v.data()).ok());
      out.insert(out.end(), w.begin(), w.end());
      out.insert(out.end(), m.begin(), m.end());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

struct Batches {
  std::vector<int32_t> in, tgt;
  int64_t per = 0;
};
Batches batches(const TrainConfig& c) {
  Batches b;
  b.per = c.grad_accum * c.batch_size * c.seq_len;
  b.in = test::random_ints(2 * kHalf * b.per, 11, 0, 63);
  b.tgt = test::random_ints(2 * kHalf * b.per, 12, 0, 63);
  return b;
}

std::unique_ptr<IoEngine> engine_for(const TrainConfig& c, const std::string& dir) {
  auto e = create_configured_engine(c.io, dir);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(*e);
}

// Gradients and the embed group's optimizer state on storage too (the state moved outside
// plans then goes through the store).
void all_on_storage(TrainConfig& c) {
  c.offload.params_on_host = c.offload.optim_on_host = c.offload.grads_on_host = 0;
  c.offload.embed_optim_on_host = false;
}

// N steps, checkpoint, resume in a fresh trainer, N more: the bits of 2N straight. `variant`
// names the directory of what `tweak` changes in the small config.
void expect_resume_bit_identical(const std::string& schedule, Precision precision,
                                 const std::string& variant = "",
                                 const std::function<void(TrainConfig&)>& tweak = {}) {
  const std::string dir =
      test::make_temp_dir("resume_" + schedule + "_" + enum_name(precision) + variant);
  const std::string store = dir + "/store", root = dir + "/ckpt";
  fs::create_directories(store);
  TrainConfig c = small_config(schedule, store);
  c.precision = precision;
  if (tweak) tweak(c);
  const Batches b = batches(c);
  const ParamLayout layout = make_param_layout(c.model, c.lora);

  std::vector<double> straight_losses, resumed_losses;
  std::vector<float> straight_state;
  {
    AnyTrainer t(c);
    for (int s = 0; s < 2 * kHalf; ++s) {
      straight_losses.push_back(t.step(b.in.data() + s * b.per, b.tgt.data() + s * b.per));
    }
    straight_state = t.state(layout);
  }
  {
    AnyTrainer t(c);
    for (int s = 0; s < kHalf; ++s) {
      resumed_losses.push_back(t.step(b.in.data() + s * b.per, b.tgt.data() + s * b.per));
    }
    auto engine = engine_for(c, dir);
    CheckpointMeta meta{kHalf, t.adam_steps(), 0, c.seed, schedule};
    auto saved = save_checkpoint(*engine, root, c, meta, t.reader(), 2);
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    EXPECT_GT(saved->bytes, 0);
  }
  {
    AnyTrainer t(c);  // a fresh process, in effect
    auto dir_or = resolve_checkpoint(root);
    ASSERT_TRUE(dir_or.ok()) << dir_or.status().to_string();
    auto meta = load_checkpoint(*dir_or, c, t.writer());
    ASSERT_TRUE(meta.ok()) << meta.status().to_string();
    ASSERT_EQ(meta->step, kHalf);
    t.set_progress(meta->step, meta->adam_steps);
    for (int s = kHalf; s < 2 * kHalf; ++s) {
      resumed_losses.push_back(t.step(b.in.data() + s * b.per, b.tgt.data() + s * b.per));
    }
    const std::vector<float> resumed_state = t.state(layout);
    ASSERT_EQ(resumed_state.size(), straight_state.size());
    EXPECT_EQ(std::memcmp(resumed_state.data(), straight_state.data(), straight_state.size() * 4),
              0)
        << schedule << ": parameters or moments differ after resuming";
  }
  EXPECT_EQ(resumed_losses, straight_losses) << schedule;
}

class ResumeBitIdentical : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeBitIdentical, TwoNEqualsNPlusResumedN) {
  expect_resume_bit_identical(GetParam(), Precision::f32);
}

INSTANTIATE_TEST_SUITE_P(resume_checkpoint, ResumeBitIdentical,
                         ::testing::Values("in_memory", "horizontal", "vertical"));

// bf16 working weights (Note [Precision modes]): the checkpoint holds the f32 master and a
// resumed trainer derives its bf16 working weights from it, so resume is bit-identical too.
class ResumeBitIdenticalBf16 : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeBitIdenticalBf16, TwoNEqualsNPlusResumedN) {
  expect_resume_bit_identical(GetParam(), Precision::bf16);
}

INSTANTIATE_TEST_SUITE_P(resume_checkpoint_bf16, ResumeBitIdenticalBf16,
                         ::testing::Values("in_memory", "horizontal", "vertical"));

// Everything on storage, gradients and the embed state included, in both precisions.
class ResumeAllOnStorage : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeAllOnStorage, TwoNEqualsNPlusResumedN) {
  expect_resume_bit_identical(GetParam(), Precision::f32, "_storage", all_on_storage);
  expect_resume_bit_identical(GetParam(), Precision::bf16, "_storage", all_on_storage);
}

INSTANTIATE_TEST_SUITE_P(resume_checkpoint_storage, ResumeAllOnStorage,
                         ::testing::Values("horizontal", "vertical"));

// LoRA (Note [LoRA]): the adapters and their moments resume bit for bit, the frozen base with them;
// with the offloaded schedules, everything on storage too.
class ResumeLora : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeLora, TwoNEqualsNPlusResumedN) {
  auto lora = [](TrainConfig& c) {
    c.lora.rank = 4;
    c.lora.modules_to_save = {"lm_head"};
    if (c.schedule != Schedule::in_memory) all_on_storage(c);
  };
  expect_resume_bit_identical(GetParam(), Precision::f32, "_lora", lora);
  expect_resume_bit_identical(GetParam(), Precision::bf16, "_lora", lora);
}

INSTANTIATE_TEST_SUITE_P(resume_checkpoint_lora, ResumeLora,
                         ::testing::Values("in_memory", "horizontal", "vertical"));

// Note [Slab pieces]: pieces that cut tensors. A vocabulary of 512 makes the embed group larger
// than a block, so on storage its state moves in block-sized chunks that cut wte (laid out as
// HF does) and one chunk holds the end of wte and the final norm; the vertical schedule's
// alpha split (no clipping) puts a part boundary inside a block, in a Conv1D weight (transposed
// in the files). The save gathers the cut tensors, the load keeps them converted, and the
// resumed run keeps every bit.
TEST(resume_checkpoint, PiecesThatCutTensorsKeepEveryBit) {
  const auto cut = [](TrainConfig& c) {
    all_on_storage(c);
    c.model.vocab_size = 512;
    c.optim.grad_clip = 0;
    c.optim.alpha = 0.5;
  };
  TrainConfig c = small_config("vertical", "unused");
  cut(c);
  const ParamLayout layout = make_param_layout(c.model);
  const Slab& embed = layout.slabs[static_cast<size_t>(layout.embed_slab())];
  const Slab& block = layout.slabs[static_cast<size_t>(layout.block_slab(0))];
  ASSERT_GT(embed.numel, block.numel) << "the embed group fits one chunk: nothing is cut";
  for (Precision p : {Precision::f32, Precision::bf16}) {
    expect_resume_bit_identical("vertical", p, "_cut", cut);
  }
}

// Note [Sharded checkpoints]: a rank's share of a replicated slab (the embed group's, its state
// on storage in chunks that cut wte) is exactly shard_range's part of it, in increasing pieces
// inside that part, with the trainer's values; the shares of 2 and of 3 ranks tile each slab.
TEST(checkpoint_share, AReplicatedSlabsShareIsItsPartOfTheSlabFromStorage) {
  TrainConfig c = small_config("vertical", "unused");
  all_on_storage(c);
  c.model.vocab_size = 512;  // the embed group spans several chunks (as the test above)
  const std::string dir = test::make_temp_dir("shard_share_embed");
  c.io.dirs = {dir};
  const ParamLayout layout = make_param_layout(c.model);
  AnyTrainer t(c);
  ASSERT_NE(t.trainer, nullptr);
  const Batches b = batches(c);
  t.step(b.in.data(), b.tgt.data());
  for (const int64_t slab : {layout.embed_slab(), layout.final_slab()}) {
    const int64_t n = layout.slabs[static_cast<size_t>(slab)].numel;
    std::vector<float> w(static_cast<size_t>(n)), m(w.size()), v(w.size());
    ASSERT_TRUE(t.trainer->read_slab_state(slab, w.data(), m.data(), v.data()).ok());
    for (const int ranks : {2, 3}) {
      for (int r = 0; r < ranks; ++r) {
        const Range share = shard_range(n, ranks, r);
        int64_t next = share.begin;  // pieces come in order, back to back
        const Status st = t.trainer->read_shard_pieces(slab, r, ranks, [&](const SlabPiece& p) {
          EXPECT_EQ(p.begin, next) << "slab " << slab << " rank " << r << " of " << ranks;
          EXPECT_GT(p.count, 0);
          for (int64_t i = 0; i < p.count; ++i) {
            const auto at = static_cast<size_t>(p.begin + i);
            EXPECT_EQ(std::memcmp(&p.master[i], &w[at], 4), 0) << "master element " << at;
            EXPECT_EQ(std::memcmp(&p.m[i], &m[at], 4), 0) << "m element " << at;
            EXPECT_EQ(std::memcmp(&p.v[i], &v[at], 4), 0) << "v element " << at;
          }
          next = p.begin + p.count;
          return Status();
        });
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(next, share.end) << "slab " << slab << " rank " << r << " of " << ranks;
      }
    }
  }
}

// Note [Speculative steps]: with clipping on every step and alpha 0.5, each speculative part 0
// is repaired, so the checkpoint is taken right after a repair; the resumed run keeps every bit,
// on host and with everything on storage.
TEST(resume_checkpoint, RightAfterASpeculativeRepair) {
  const auto repaired = [](TrainConfig& c) {
    c.optim.grad_clip = 1e-3f;
    c.optim.alpha = 0.5;
    c.optim.speculation = Speculation::on;
  };
  expect_resume_bit_identical("vertical", Precision::f32, "_spec", repaired);
  expect_resume_bit_identical("vertical", Precision::bf16, "_spec_storage", [&](TrainConfig& c) {
    all_on_storage(c);
    repaired(c);
  });
}

// A saved in-memory checkpoint of the small config, for the bad-input tests.
std::string saved_checkpoint(const std::string& name, const TrainConfig& c, int64_t step) {
  const std::string dir = test::make_temp_dir(name), root = dir + "/ckpt";
  AnyTrainer t(c);
  const Batches b = batches(c);
  t.step(b.in.data(), b.tgt.data());
  auto engine = engine_for(c, dir);
  auto saved =
      save_checkpoint(*engine, root, c, {step, 1, 0, c.seed, enum_name(c.schedule)}, t.reader(), 0);
  EXPECT_TRUE(saved.ok()) << saved.status().to_string();
  return root;
}

Status load_into_fresh(const std::string& dir, const TrainConfig& c) {
  AnyTrainer t(c);
  auto meta = load_checkpoint(dir, c, t.writer());
  return meta.ok() ? Status() : meta.status();
}

TEST(resume_checkpoint, OtherModelShapeIsRefused) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string root = saved_checkpoint("resume_shape", c, 1);
  TrainConfig other = c;
  other.model.n_layer = 4;
  Status st = load_into_fresh(root + "/step-00000001", other);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::invalid_argument);
  EXPECT_NE(st.message().find("model.n_layer 3, the config asks for 4"), std::string::npos)
      << st.message();
}

TEST(resume_checkpoint, MissingFileIsNamed) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string dir = saved_checkpoint("resume_missing", c, 1) + "/step-00000001";
  fs::remove(dir + "/exp_avg_sq.safetensors");
  Status st = load_into_fresh(dir, c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::not_found);
  EXPECT_NE(st.message().find("exp_avg_sq.safetensors"), std::string::npos) << st.message();
}

TEST(resume_checkpoint, FlippedByteIsACrcMismatchNamingTheFile) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string dir = saved_checkpoint("resume_flip", c, 1) + "/step-00000001";
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    char ch = 0;
    f.read(&ch, 1);
    ch = static_cast<char>(ch ^ 0x10);
    f.seekp(1000);
    f.write(&ch, 1);
  }
  Status st = load_into_fresh(dir, c);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::bad_format);
  EXPECT_NE(st.message().find("model.safetensors is corrupt: CRC32C"), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
}

// A disk that fills while a checkpoint is written: the save fails naming the file, its temporary
// directory is gone, and the previous checkpoint still verifies and stays the one resumed from.
TEST(resume_checkpoint, FullDiskLeavesThePreviousCheckpointIntact) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string root = saved_checkpoint("resume_full", c, 1);
  TrainConfig full = c;
  full.io.faults = "write:*:enospc";
  AnyTrainer t(c);
  auto engine = engine_for(full, root);
  auto saved =
      save_checkpoint(*engine, root, c, {2, 2, 0, c.seed, enum_name(c.schedule)}, t.reader(), 1);
  ASSERT_FALSE(saved.ok()) << "a save on a full disk must fail";
  EXPECT_NE(saved.status().message().find("step-00000002 not written"), std::string::npos)
      << saved.status().message();
  EXPECT_NE(saved.status().message().find(".safetensors"), std::string::npos)
      << saved.status().message();
  for (const auto& e : fs::directory_iterator(root)) {
    EXPECT_EQ(e.path().filename().string(), "step-00000001") << "left behind: " << e.path();
  }
  EXPECT_TRUE(verify_checkpoint(root + "/step-00000001").ok());
  auto resolved = resolve_checkpoint(root);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, root + "/step-00000001");
}

// Only complete checkpoints are chosen: a crash's temporary directory and a step directory
// without a manifest are passed over; keep-K removes the oldest.
TEST(resume_checkpoint, ResolvePicksTheNewestCompleteAndKeepRemovesOld) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string root = saved_checkpoint("resume_resolve", c, 3);
  fs::create_directories(root + "/.tmp-step-00000009-123");
  fs::create_directories(root + "/step-00000007");  // no manifest: never complete
  auto r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, root + "/step-00000003");
  EXPECT_FALSE(resolve_checkpoint(root + "/nothing-here").ok());

  fs::remove_all(root + "/step-00000007");
  AnyTrainer t(c);
  auto engine = engine_for(c, root);
  for (int64_t s : {4, 5, 6}) {
    ASSERT_TRUE(
        save_checkpoint(*engine, root, c, {s, s, 0, c.seed, enum_name(c.schedule)}, t.reader(), 2)
            .ok());
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000005", "step-00000006"}));
}

// Note [Checkpoint format]: with the state on storage, saving and loading hold one tensor of
// conversion scratch and, where a piece cuts a Conv1D weight, one more per stream; the trainer
// hands over pieces of what it holds anyway. Loading reads every data byte through buffers
// bounded by a chunk (verify) or a piece, and each byte at most twice. The embedding's state
// here is many times that bound, so a save or load that held a slab (as they did) fails.
TEST(resume_checkpoint, SaveAndLoadHoldATensorNotASlab) {
  const std::string dir = test::make_temp_dir("resume_memory");
  fs::create_directories(dir + "/store");
  TrainConfig c = small_config("vertical", dir + "/store");
  all_on_storage(c);
  c.model.vocab_size = 4096;
  c.optim.grad_clip = 0;
  c.optim.alpha = 0.5;
  AnyTrainer saved(c);
  const Batches b = batches(c);
  saved.step(b.in.data(), b.tgt.data());
  auto engine = engine_for(c, dir);
  auto save =
      save_checkpoint(*engine, dir + "/ckpt", c, {1, 1, 0, c.seed, "vertical"}, saved.reader(), 0);
  ASSERT_TRUE(save.ok()) << save.status().to_string();
  const std::string step = save->dir;

  constexpr int64_t kChunk = 4096;
  CheckpointReadStats stats;
  CheckpointReadOptions options;
  options.chunk_bytes = kChunk;
  options.stats = &stats;
  AnyTrainer loaded(c);
  auto meta = load_checkpoint(step, c, loaded.writer(), options);
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();

  const ParamLayout layout = make_param_layout(c.model);
  EXPECT_EQ(loaded.state(layout), saved.state(layout));
  const int64_t C = c.model.n_embd;
  const int64_t tensor_bytes = 4 * C * C * 4;  // the largest Conv1D weight, (4C, C)
  const int64_t block_bytes = layout.slabs[1].numel * 4;
  const int64_t embed_state_bytes = 12 * layout.slabs[0].numel;
  ASSERT_LT(8 * 4 * tensor_bytes, embed_state_bytes) << "the bound is no bound for this model";
  // (the alpha split cuts the MLP's (4C, C) weight: the gathering buffers were needed)
  EXPECT_GT(save->buffer_bytes, tensor_bytes) << "no piece cut a Conv1D weight";
  EXPECT_LE(save->buffer_bytes, 4 * tensor_bytes);
  EXPECT_GT(stats.buffer_bytes, tensor_bytes) << "no piece cut a Conv1D weight";
  EXPECT_LE(stats.buffer_bytes, std::max(kChunk, 4 * tensor_bytes));
  EXPECT_LE(stats.reads.largest, std::max({kChunk, tensor_bytes, block_bytes}));
  int64_t file_bytes = 0;
  for (const auto& e : fs::directory_iterator(step)) {
    file_bytes += static_cast<int64_t>(fs::file_size(e.path()));
  }
  EXPECT_LE(stats.reads.bytes, 2 * file_bytes) << "a byte read more than twice";
}

// A manifest is input like any other: wrong types, sizes as strings, names that are paths, and
// a FIFO in place of a file are one-line bad_format errors naming the file and the field, never
// an abort, a read outside the directory or a hang.
TEST(resume_checkpoint, MalformedManifestsAreRefusedNamingTheField) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string dir = saved_checkpoint("resume_manifest", c, 1) + "/step-00000001";
  const std::string path = dir + "/manifest.json";
  std::string original;
  {
    std::ifstream in(path);
    original.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const struct {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  } cases[] = {
      {"file entry a number", [](nlohmann::json& m) { m["files"][0] = 7; },
       "files[0] is not an object"},
      {"bytes a string", [](nlohmann::json& m) { m["files"][1]["bytes"] = "12"; },
       "files[1].bytes is not a non-negative integer"},
      {"name a path", [](nlohmann::json& m) { m["files"][0]["name"] = "../../../etc/hostname"; },
       "files[0].name is not a file name in the checkpoint directory"},
      {"name a number", [](nlohmann::json& m) { m["files"][2]["name"] = 3; },
       "files[2].name is not a string"},
      {"crc not hex", [](nlohmann::json& m) { m["files"][0]["crc32c"] = "xyz"; },
       "files[0].crc32c is not 8 lowercase hex digits"},
      {"format a number", [](nlohmann::json& m) { m["format"] = 1; },
       "is not a Strata checkpoint manifest"},
      {"version a string", [](nlohmann::json& m) { m["version"] = "2"; },
       "has a version other than 1 to"},
  };
  for (const auto& k : cases) {
    nlohmann::json m = nlohmann::json::parse(original);
    k.edit(m);
    std::ofstream(path, std::ios::trunc) << m.dump();
    Status st = load_into_fresh(dir, c);
    test::expect_error(st, ErrorCode::bad_format, {path, k.expect});
  }
  // A FIFO listed as a file: refused as not a regular file, without waiting for a writer.
  std::ofstream(path, std::ios::trunc) << original;
  const std::string fifo = dir + "/config.json";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  test::expect_error(load_into_fresh(dir, c), ErrorCode::bad_format, {fifo, "not a regular file"});
}

// Version 1 checkpoints kept both moments in one optimizer.safetensors, interleaved per tensor
// (Note [Checkpoint tensor streams]). One rebuilt from a version 2 save, with its manifest, loads
// into the same state.
TEST(resume_checkpoint, VersionOneStillLoads) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string dir = saved_checkpoint("resume_v1", c, 1) + "/step-00000001";
  AnyTrainer from_v2(c);
  ASSERT_TRUE(load_checkpoint(dir, c, from_v2.writer()).ok());

  auto m = read_safetensors(dir + "/exp_avg.safetensors");
  auto v = read_safetensors(dir + "/exp_avg_sq.safetensors");
  ASSERT_TRUE(m.ok() && v.ok());
  SafeTensors optim;
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    for (const StTensor* t : {&m->tensors[i], &v->tensors[i]}) {
      optim.add(t->name, t->dtype, t->shape, t->data.data());
    }
  }
  ASSERT_TRUE(write_safetensors(dir + "/optimizer.safetensors", optim).ok());
  fs::remove(dir + "/exp_avg.safetensors");
  fs::remove(dir + "/exp_avg_sq.safetensors");
  nlohmann::json files = nlohmann::json::array();
  for (const char* name :
       {"model.safetensors", "optimizer.safetensors", "config.json", "trainer_state.json"}) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(bytes.data(), bytes.size()));
    files.push_back({{"name", name}, {"bytes", bytes.size()}, {"crc32c", crc}});
  }
  const nlohmann::json manifest = {
      {"format", "strata-checkpoint"}, {"version", 1}, {"step", 1}, {"files", files}};
  std::ofstream(dir + "/manifest.json") << manifest.dump(2) << "\n";

  AnyTrainer from_v1(c);
  auto meta = load_checkpoint(dir, c, from_v1.writer());
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  const ParamLayout layout = make_param_layout(c.model);
  EXPECT_EQ(from_v1.state(layout), from_v2.state(layout));
}

// The CRC of every file is checked before any state moves: a flipped byte in the last file read
// fails the load with nothing handed to the trainer.
TEST(resume_checkpoint, CorruptFileReachesNoSlabWriter) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string dir = saved_checkpoint("resume_no_writer", c, 1) + "/step-00000001";
  const std::string optim = dir + "/exp_avg_sq.safetensors";
  {
    std::fstream f(optim, std::ios::in | std::ios::out | std::ios::binary);
    const auto last = static_cast<std::streamoff>(fs::file_size(optim) - 1);
    f.seekg(last);
    const char ch = static_cast<char>(f.get() ^ 0x01);
    f.seekp(last);
    f.put(ch);
  }
  int writes = 0;
  auto meta = load_checkpoint(dir, c, [&](int64_t, const SlabPieceFn&) {
    ++writes;
    return Status();
  });
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.status().code(), ErrorCode::bad_format);
  EXPECT_NE(meta.status().message().find("exp_avg_sq.safetensors is corrupt: CRC32C"),
            std::string::npos)
      << meta.status().message();
  EXPECT_EQ(writes, 0);
}

// Replaces one file of a checkpoint and its size and CRC32C in the manifest, as a checkpoint
// written that way would hold: what the load sees is then the file's content, not a mismatch.
void rewrite_checkpoint_file(const std::string& dir, const std::string& name,
                             const std::string& text) {
  std::ofstream(dir + "/" + name, std::ios::binary | std::ios::trunc) << text;
  std::ifstream in(dir + "/manifest.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", crc32c(text.data(), text.size()));
  for (auto& f : manifest["files"]) {
    if (f["name"] != name) continue;
    f["bytes"] = text.size();
    f["crc32c"] = crc;
  }
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
}

// trainer_state.json is checked field by field before the trainer sees it: step -5 trained with a
// negative learning rate, adam_steps -3 failed a CHECK, 200,000 nested arrays were parsed.
TEST(resume_checkpoint, TrainerStateIsCheckedFieldByField) {
  const TrainConfig c = small_config("in_memory", "unused");
  const std::string dir = saved_checkpoint("resume_trainer_state", c, 1) + "/step-00000001";
  const std::string file = dir + "/trainer_state.json";
  auto state = [](const std::string& step, const std::string& adam, const std::string& pos) {
    return R"({"step": )" + step + R"(, "adam_steps": )" + adam + R"(, "data_position": )" + pos +
           R"(, "seed": 1337, "schedule": "in_memory"})";
  };
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::pair<std::string, std::string> cases[] = {
      {state("-5", "0", "0"), "step must be an integer in [0, 9007199254740992], got -5"},
      {state("1", "-3", "0"), "adam_steps must be an integer in [0, 1], got -3"},
      {state("1", "2", "0"), "adam_steps must be an integer in [0, 1], got 2"},
      {state("1", "1", "-1"), "data_position must be an integer in [0, "},
      {state("\"1\"", "1", "0"), "step must be an integer in [0, 9007199254740992], got \"1\""},
      {state("1.5", "1", "0"), "step must be an integer"},
      {state("18446744073709551615", "1", "0"), "got 18446744073709551615"},
      {state("1", "1", deep), "deeper than 64 levels"},
      {R"({"step": 1, "adam_steps": 1, "seed": 1, "schedule": "in_memory"})",
       "trainer_state.json has no data_position"},
      {R"({"step": 1, "adam_steps": 1, "data_position": 0, "seed": 1, "schedule": "diagonal"})",
       "schedule 'diagonal' is not one of in_memory, horizontal, vertical"},
      {R"({"step": 1, "adam_steps": 1, "data_position": 0, "seed": 1, "schedule": 3})",
       "schedule must be a schedule's name, got 3"},
      {"[1, 2]", "trainer_state.json is not a JSON object"},
      // A run id names a directory when its checkpoints are moved aside.
      {R"({"step": 1, "adam_steps": 1, "data_position": 0, "seed": 1, "schedule": "in_memory", )"
       R"("run_id": "../../../tmp/x"})",
       "run_id must be 16 hex digits, got \"../../../tmp/x\""},
      {R"({"step": 1, "adam_steps": 1, "data_position": 0, "seed": 1, "schedule": "in_memory", )"
       R"("lineage": ["0123456789abcdef", "x"]})",
       "lineage must be a list of run ids"},
      // Note [Base model]: an export merges its config into the one it writes.
      {R"({"step": 1, "adam_steps": 1, "data_position": 0, "seed": 1, "schedule": "in_memory", )"
       R"("base_model": {"path": "/m", "config": [1]}})",
       "base_model must be {\"path\": a string, \"config\": an object}"},
  };
  for (const auto& [text, wanted] : cases) {
    rewrite_checkpoint_file(dir, "trainer_state.json", text);
    test::expect_error(load_into_fresh(dir, c), ErrorCode::bad_format,
                       {"checkpoint file " + file, wanted});
  }
  // In range, with a field a later version might add, it loads.
  rewrite_checkpoint_file(dir, "trainer_state.json",
                          R"({"step": 7, "adam_steps": 6, "data_position": 5, "seed": -2, )"
                          R"("schedule": "vertical", "run_id": "00000000deadbeef", )"
                          R"("lineage": ["0123456789abcdef", "00000000deadbeef"], "later": 1})");
  AnyTrainer t(c);
  auto meta = load_checkpoint(dir, c, t.writer());
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  EXPECT_EQ(meta->step, 7);
  EXPECT_EQ(meta->adam_steps, 6);
  EXPECT_EQ(meta->data_position, 5);
  EXPECT_EQ(meta->seed, -2);
  EXPECT_EQ(meta->schedule, "vertical");
  EXPECT_EQ(meta->run_id, "00000000deadbeef");
  EXPECT_EQ(meta->lineage, (std::vector<std::string>{"0123456789abcdef", "00000000deadbeef"}));
}

}  // namespace
}  // namespace strata
