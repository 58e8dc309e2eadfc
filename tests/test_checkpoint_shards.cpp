// Sharded checkpoints (Note [Sharded checkpoints] in formats/checkpoint_shards.h), the ranks played by
// threads sharing one in-process world:
//  - three ranks write their shares at once; the state loads back bit for bit, and gathered it is
//    byte for byte the checkpoint one process writes of the same state;
//  - a rank whose disk fails fails the save on every rank, names itself, and publishes nothing;
//  - a flipped byte in a rank's file, or extents that leave a gap or overlap, are refused naming
//    the file or the slab before any state is handed over.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "dist/communicator.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_shards.h"
#include "io/configured_engine.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Ranks as threads: only broadcast, which the sharded save uses, moves data; the rest is not
// needed here and says so.
class ThreadWorld {
 public:
  explicit ThreadWorld(int ranks) : ranks_(ranks), barrier_(ranks) {}

  class Rank : public Communicator {
   public:
    Rank(ThreadWorld& w, int rank) : w_(w), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return w_.ranks_; }
    int local_rank() const override { return rank_; }
    int local_size() const override { return w_.ranks_; }
    Status all_reduce_sum(float*, int64_t) override { return unneeded(); }
    Status all_reduce_sum(double*, int64_t) override { return unneeded(); }
    Status reduce_scatter_sum(float*, int64_t) override { return unneeded(); }
    Status all_gather(void*, int64_t, int64_t) override { return unneeded(); }
    Result<int64_t> all_reduce_max(int64_t) override { return unneeded(); }
    void abort_all(int) override {}
    std::string describe() const override { return "threads"; }
    Status broadcast(void* data, int64_t bytes, int root) override {
      w_.barrier_.arrive_and_wait();
      if (rank_ == root) w_.source_ = data;
      w_.barrier_.arrive_and_wait();
      if (rank_ != root) std::memcpy(data, w_.source_, static_cast<size_t>(bytes));
      w_.barrier_.arrive_and_wait();  // the root's buffer stays until every rank has copied
      return Status();
    }

   private:
    static Status unneeded() { return internal_error("not used by a sharded save"); }
    ThreadWorld& w_;
    int rank_;
  };

 private:
  int ranks_;
  std::barrier<> barrier_;
  const void* source_ = nullptr;
};

TrainConfig shard_config() {
  TrainConfig c = test::tiny_offload_config("in_memory", "unused");
  c.ranks = 3;
  return c;
}

// A made-up training state: master | m | v per slab, (3, numel) each.
std::vector<std::vector<float>> made_up_state(const ParamLayout& layout) {
  std::vector<std::vector<float>> out;
  for (size_t s = 0; s < layout.slabs.size(); ++s) {
    out.push_back(test::random_floats(3 * layout.slabs[s].numel, 100 + s));
    std::vector<float>& v = out.back();
    for (int64_t i = 2 * layout.slabs[s].numel; i < 3 * layout.slabs[s].numel; ++i) {
      v[static_cast<size_t>(i)] = std::abs(v[static_cast<size_t>(i)]);  // v is a square's mean
    }
  }
  return out;
}

// Rank r's share of every slab, as shard_range's r-th of each, handed over in two pieces.
SlabReader share_of(const std::vector<std::vector<float>>& state, const ParamLayout& layout, int r,
                    int ranks) {
  return [&state, &layout, r, ranks](int64_t slab, const SlabPieceFn& take) {
    const int64_t n = layout.slabs[static_cast<size_t>(slab)].numel;
    const Range share = shard_range(n, ranks, r);
    const float* s = state[static_cast<size_t>(slab)].data();
    const int64_t mid = (share.begin + share.end) / 2;
    for (const auto [lo, hi] : {std::pair{share.begin, mid}, std::pair{mid, share.end}}) {
      float* base = const_cast<float*>(s);
      STRATA_RETURN_IF_ERROR(take({lo, hi - lo, base + lo, base + n + lo, base + 2 * n + lo}));
    }
    return Status();
  };
}

const CheckpointMeta kMeta{6, 5, 1234, 7, "in_memory", "", {}};

// Every rank's save, each on its own thread and engine (`faults[r]`: rank r's io.faults).
std::vector<Result<CheckpointSaveStats>> save_on_threads(
    const std::string& root, const TrainConfig& c, const std::vector<std::vector<float>>& state,
    const std::vector<std::string>& faults) {
  const int ranks = static_cast<int>(faults.size());
  const ParamLayout layout = make_param_layout(c.model);
  ThreadWorld world(ranks);
  std::vector<Result<CheckpointSaveStats>> out(static_cast<size_t>(ranks),
                                               internal_error("not run"));
  fs::create_directories(root);
  // The engines first, one at a time: their probes of the directory share a name per process.
  std::vector<std::unique_ptr<IoEngine>> engines;
  for (int r = 0; r < ranks; ++r) {
    IoConfig io = c.io;
    io.faults = faults[static_cast<size_t>(r)];
    auto engine = create_configured_engine(io, root);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    if (!engine.ok()) return out;
    engines.push_back(std::move(*engine));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadWorld::Rank me(world, r);
      out[static_cast<size_t>(r)] =
          save_sharded_checkpoint(*engines[static_cast<size_t>(r)], root, c, kMeta,
                                  share_of(state, layout, r, ranks), 0, me);
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// The state a load hands over, (3, numel) per slab.
Result<std::vector<std::vector<float>>> loaded(const std::string& dir, const TrainConfig& c) {
  const ParamLayout layout = make_param_layout(c.model);
  std::vector<std::vector<float>> out;
  for (const Slab& s : layout.slabs) out.emplace_back(static_cast<size_t>(3 * s.numel), -1.0f);
  auto meta = load_checkpoint(dir, c, [&](int64_t slab, const SlabPieceFn& fill) {
    const int64_t n = layout.slabs[static_cast<size_t>(slab)].numel;
    float* d = out[static_cast<size_t>(slab)].data();
    // Pieces of 1000 elements: each crosses the ranks' extents somewhere.
    for (int64_t at = 0; at < n; at += 1000) {
      const int64_t k = std::min<int64_t>(1000, n - at);
      STRATA_RETURN_IF_ERROR(fill({at, k, d + at, d + n + at, d + 2 * n + at}));
    }
    return Status();
  });
  if (!meta.ok()) return meta.status();
  EXPECT_EQ(meta->step, kMeta.step);
  EXPECT_EQ(meta->adam_steps, kMeta.adam_steps);
  EXPECT_EQ(meta->data_position, kMeta.data_position);
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(sharded_checkpoint, ThreeRanksWriteTheirSharesAndTheStateComesBackBitForBit) {
  const TrainConfig c = shard_config();
  const ParamLayout layout = make_param_layout(c.model);
  const auto state = made_up_state(layout);
  const std::string dir = test::make_temp_dir("sharded_ckpt_three");
  auto saved = save_on_threads(dir + "/ckpt", c, state, {"", "", ""});
  for (const auto& s : saved) ASSERT_TRUE(s.ok()) << s.status().to_string();
  const std::string step = dir + "/ckpt/step-00000006";
  EXPECT_EQ(saved[0]->dir, step);

  auto version = checkpoint_version(step);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, kShardedCheckpointVersion);
  // Each rank wrote a third of the state: 12 bytes per element of its shard_range of every slab;
  // rank 0's figure is every file.
  int64_t state_bytes = 0;
  for (int r = 0; r < 3; ++r) {
    int64_t elems = 0;
    for (const Slab& s : layout.slabs) {
      const Range share = shard_range(s.numel, 3, r);
      elems += share.end - share.begin;
    }
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(step + "/" + rank_shard_file_name(r))),
              12 * elems);
    if (r > 0) EXPECT_EQ(saved[static_cast<size_t>(r)]->bytes, 12 * elems);
    state_bytes += 12 * elems;
  }
  EXPECT_EQ(state_bytes, 12 * layout.total_elems);
  EXPECT_GT(saved[0]->bytes, state_bytes);
  for (const auto& e : fs::directory_iterator(dir + "/ckpt")) {
    EXPECT_EQ(e.path().filename().string(), "step-00000006") << "left behind: " << e.path();
  }

  auto back = loaded(step, c);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  for (size_t s = 0; s < state.size(); ++s) {
    ASSERT_EQ(std::memcmp((*back)[s].data(), state[s].data(), state[s].size() * 4), 0)
        << "slab " << layout.slabs[s].name;
  }

  // Gathered, it is the checkpoint one process writes of the same state, byte for byte.
  auto engine = create_configured_engine(c.io, dir);
  ASSERT_TRUE(engine.ok());
  auto gathered = gather_checkpoint(**engine, step, dir + "/gathered", 777);
  ASSERT_TRUE(gathered.ok()) << gathered.status().to_string();
  auto direct =
      save_checkpoint(**engine, dir + "/direct", c, kMeta, share_of(state, layout, 0, 1), 0);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  for (const char* name : {"model.safetensors", "exp_avg.safetensors", "exp_avg_sq.safetensors",
                           "config.json", "trainer_state.json", "manifest.json"}) {
    EXPECT_EQ(file_bytes(gathered->dir + "/" + name), file_bytes(direct->dir + "/" + name)) << name;
  }
}

TEST(sharded_checkpoint, AFailingRankFailsTheSaveEverywhereAndPublishesNothing) {
  const TrainConfig c = shard_config();
  const auto state = made_up_state(make_param_layout(c.model));
  const std::string root = test::make_temp_dir("sharded_ckpt_fail") + "/ckpt";
  const auto saved = save_on_threads(root, c, state, {"", "write:*:eio", ""});
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(saved[static_cast<size_t>(r)].ok()) << "rank " << r << " reported success";
    const std::string m = saved[static_cast<size_t>(r)].status().message();
    EXPECT_NE(m.find("step-00000006 not written"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  const std::string m0 = saved[0].status().message();
  EXPECT_NE(m0.find("rank 1: "), std::string::npos) << m0;
  EXPECT_NE(m0.find(rank_shard_file_name(1)), std::string::npos) << m0;
  EXPECT_TRUE(fs::is_empty(root)) << "a failed save left files in " << root;
}

// A saved three-rank checkpoint, its directory.
std::string three_rank_checkpoint(const std::string& name, const TrainConfig& c) {
  const auto state = made_up_state(make_param_layout(c.model));
  const std::string root = test::make_temp_dir(name) + "/ckpt";
  for (const auto& s : save_on_threads(root, c, state, {"", "", ""})) {
    EXPECT_TRUE(s.ok()) << s.status().to_string();
  }
  return root + "/step-00000006";
}

TEST(sharded_checkpoint, AFlippedByteInARanksFileIsNamed) {
  const TrainConfig c = shard_config();
  const std::string step = three_rank_checkpoint("sharded_ckpt_flip", c);
  {
    std::fstream f(step + "/" + rank_shard_file_name(2),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  auto back = loaded(step, c);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), ErrorCode::bad_format);
  EXPECT_NE(back.status().message().find(rank_shard_file_name(2) + " is corrupt: CRC32C"),
            std::string::npos)
      << back.status().message();
}

TEST(sharded_checkpoint, ExtentsWithAGapOrAnOverlapAreRefusedNamingTheSlab) {
  const TrainConfig c = shard_config();
  const std::string step = three_rank_checkpoint("sharded_ckpt_extents", c);
  const std::string mpath = step + "/manifest.json";
  const nlohmann::json good = nlohmann::json::parse(file_bytes(mpath));
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"gap", [](nlohmann::json& s) { s["files"][1]["extents"][0][2] = 1; },
       "exactly once (a gap or an overlap"},
      {"overlap", [](nlohmann::json& s) { s["files"][1]["extents"][0][1] = 0; },
       "exactly once (a gap or an overlap"},
      {"past the file",
       [](nlohmann::json& s) { s["files"][2]["extents"][0][3] = int64_t{1} << 40; },
       "lies past the end of"},
      {"a path for a name", [](nlohmann::json& s) { s["files"][0]["name"] = "../x.state"; },
       "is not rank 0's rank-00000.state"},
      {"a slab too many", [](nlohmann::json& s) { s["files"][0]["extents"][0][0] = 99; },
       "names slab 99"},
      {"ranks", [](nlohmann::json& s) { s["ranks"] = 2; }, "shards.files is not a list of 2"},
  };
  for (const Case& k : cases) {
    nlohmann::json m = good;
    k.edit(m["shards"]);
    std::ofstream(mpath, std::ios::trunc) << m.dump();
    auto back = loaded(step, c);
    ASSERT_FALSE(back.ok()) << k.what;
    EXPECT_EQ(back.status().code(), ErrorCode::bad_format) << k.what;
    EXPECT_NE(back.status().message().find(k.expect), std::string::npos)
        << k.what << ": " << back.status().message();
  }
  std::ofstream(mpath, std::ios::trunc) << good.dump();
  EXPECT_TRUE(loaded(step, c).ok());
}

}  // namespace
}  // namespace strata
