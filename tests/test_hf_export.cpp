// Streaming Hugging Face export (Note [Streaming export] in formats/hf_export.h):
//  - a sharded export holds, tensor by tensor, the bytes of the unsharded one, and its index lists
//    every tensor once with its shard and the total size;
//  - shards hold whole tensors up to the shard size, a larger tensor alone;
//  - the copy holds one chunk of host memory;
//  - a corrupt checkpoint, a config that disagrees with the weights and an --out inside the
//    checkpoint are refused; stale files of the other layout are removed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "formats/checkpoint.h"
#include "formats/hf_export.h"
#include "formats/safetensors.h"
#include "io/configured_engine.h"
#include "io/crc32c.h"
#include "model/layout.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TrainConfig export_config(const std::string& dir) {
  TrainConfig c = test::tiny_offload_config("in_memory", dir);
  c.model.n_layer = 4;
  return c;
}

// A checkpoint of `c` whose state is a known pattern, saved without training (the export copies
// bytes; their meaning does not matter here).
std::string patterned_checkpoint(const std::string& name, const TrainConfig& c) {
  const std::string dir = test::make_temp_dir(name);
  auto engine = create_configured_engine(c.io, dir);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  const ParamLayout layout = make_param_layout(c.model);
  SlabReader read = [&](int64_t slab, const SlabPieceFn& take) {
    const Slab& s = layout.slabs[static_cast<size_t>(slab)];
    std::vector<float> w(static_cast<size_t>(s.numel)), m(w.size()), v(w.size());  // (numel)
    for (int64_t i = 0; i < s.numel; ++i) {
      w[i] = static_cast<float>(s.offset + i) * 0.5f;
      m[i] = -w[i];
      v[i] = w[i] * w[i];
    }
    return take({0, s.numel, w.data(), m.data(), v.data()});
  };
  auto saved = save_checkpoint(**engine, dir + "/ckpt", c, {3, 3, 0, c.seed, "in_memory"}, read, 0);
  EXPECT_TRUE(saved.ok()) << saved.status().to_string();
  return saved.ok() ? saved->dir : "";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

TEST(HfExport, GroupIntoShardsKeepsTensorsWholeAndInOrder) {
  using Shards = std::vector<std::vector<size_t>>;
  EXPECT_EQ(group_into_shards({4, 4, 4}, 0), (Shards{{0, 1, 2}}));
  EXPECT_EQ(group_into_shards({4, 4, 4}, 12), (Shards{{0, 1, 2}}));
  EXPECT_EQ(group_into_shards({4, 4, 4}, 8), (Shards{{0, 1}, {2}}));
  EXPECT_EQ(group_into_shards({4, 20, 4, 4}, 8), (Shards{{0}, {1}, {2, 3}}));
  EXPECT_EQ(group_into_shards({20}, 8), (Shards{{0}}));
}

// The test the task asks for: shard, read every shard back, compare with the unsharded export.
TEST(HfExport, ShardedEqualsUnshardedTensorByTensor) {
  const std::string dir = test::make_temp_dir("hf_export_sharded");
  const TrainConfig c = export_config(dir);
  const std::string ckpt = patterned_checkpoint("hf_export_sharded_ckpt", c);
  auto plan = plan_hf_export(ckpt);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();

  auto one = write_hf_export(*plan, dir + "/one/model.safetensors", 0);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_EQ(one->weights, std::vector<std::string>{dir + "/one/model.safetensors"});
  EXPECT_TRUE(one->index.empty());
  EXPECT_TRUE(fs::exists(dir + "/one/config.json"));
  auto whole = read_safetensors(dir + "/one/model.safetensors");
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_EQ(whole->metadata.at("format"), "pt");

  constexpr int64_t kShard = 20000;  // a block's matrices are 4-16 KB: several shards
  auto sharded = write_hf_export(*plan, dir + "/sharded/", kShard);
  ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
  ASSERT_GT(sharded->weights.size(), 3u);
  EXPECT_EQ(sharded->index, dir + "/sharded/model.safetensors.index.json");
  EXPECT_TRUE(fs::exists(dir + "/sharded/config.json"));
  EXPECT_FALSE(fs::exists(dir + "/sharded/model.safetensors"));

  const nlohmann::json index = read_json(sharded->index);
  const auto& weight_map = index.at("weight_map");
  std::map<std::string, std::string> shard_of;  // from the shards themselves
  std::set<std::string> seen;
  int64_t total = 0;
  const size_t n = sharded->weights.size();
  for (size_t s = 0; s < n; ++s) {
    char want[64];
    std::snprintf(want, sizeof want, "model-%05zu-of-%05zu.safetensors", s + 1, n);
    const std::string path = sharded->weights[s];
    EXPECT_EQ(fs::path(path).filename().string(), want);
    std::ifstream f(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto shard = parse_safetensors(bytes, path);
    ASSERT_TRUE(shard.ok()) << shard.status().to_string();
    EXPECT_EQ(shard->metadata.at("format"), "pt");
    int64_t shard_data = 0;
    for (const StTensor& t : shard->tensors) {
      EXPECT_TRUE(seen.insert(t.name).second) << t.name << " in two shards";
      const StTensor* w = whole->find(t.name);
      ASSERT_NE(w, nullptr) << t.name;
      EXPECT_EQ(t.dtype, w->dtype) << t.name;
      EXPECT_EQ(t.shape, w->shape) << t.name;
      EXPECT_EQ(t.data, w->data) << t.name;
      EXPECT_EQ(weight_map.value(t.name, ""), want) << t.name;
      shard_data += static_cast<int64_t>(t.data.size());
    }
    EXPECT_TRUE(shard_data <= kShard || shard->tensors.size() == 1) << path;
    total += shard_data;
  }
  EXPECT_EQ(seen.size(), whole->tensors.size()) << "a tensor is in no shard";
  EXPECT_EQ(weight_map.size(), whole->tensors.size());
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);
  // Tensors in layout order across the shards, as in the single file.
  std::vector<std::string> order;
  for (const std::string& path : sharded->weights) {
    auto header = read_safetensors_header(path);
    ASSERT_TRUE(header.ok()) << header.status().to_string();
    for (const StEntry& e : header->tensors) order.push_back(e.name);
  }
  std::vector<std::string> single_order;
  for (const StTensor& t : whole->tensors) single_order.push_back(t.name);
  EXPECT_EQ(order, single_order);
  for (const auto& e : fs::directory_iterator(dir + "/sharded")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos)
        << "temporary file left: " << e.path();
  }
}

// The copy goes through one chunk-sized buffer, whatever the tensors' size.
TEST(HfExport, CopyHoldsOneChunk) {
  const std::string dir = test::make_temp_dir("hf_export_memory");
  const TrainConfig c = export_config(dir);
  const std::string ckpt = patterned_checkpoint("hf_export_memory_ckpt", c);
  constexpr int64_t kChunk = 1000;  // not a multiple of a float: pieces split values
  CheckpointReadStats stats;
  CheckpointReadOptions options;
  options.chunk_bytes = kChunk;
  options.stats = &stats;
  auto plan = plan_hf_export(ckpt, options);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto files = write_hf_export(*plan, dir + "/out/model.safetensors", 30000, options);
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  EXPECT_LE(stats.reads.largest, kChunk);
  EXPECT_LE(stats.buffer_bytes, kChunk);
  EXPECT_GT(stats.reads.bytes, 10 * kChunk);

  auto reference = write_hf_export(*plan, dir + "/ref/model.safetensors", 30000);
  ASSERT_TRUE(reference.ok());
  ASSERT_EQ(files->weights.size(), reference->weights.size());
  for (size_t i = 0; i < files->weights.size(); ++i) {
    auto a = read_safetensors(files->weights[i]), b = read_safetensors(reference->weights[i]);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->tensors.size(), b->tensors.size());
    for (size_t t = 0; t < a->tensors.size(); ++t) {
      EXPECT_EQ(a->tensors[t].data, b->tensors[t].data) << a->tensors[t].name;
    }
  }
}

// Exporting sharded over an unsharded export (and back) removes the other layout's files, which
// a loader would otherwise pick up.
TEST(HfExport, StaleFilesOfTheOtherLayoutAreRemoved) {
  const std::string dir = test::make_temp_dir("hf_export_stale");
  const TrainConfig c = export_config(dir);
  auto plan = plan_hf_export(patterned_checkpoint("hf_export_stale_ckpt", c));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const std::string out = dir + "/hf/model.safetensors";
  ASSERT_TRUE(write_hf_export(*plan, out, 0).ok());
  std::ofstream(dir + "/hf/notes.txt") << "mine";

  auto sharded = write_hf_export(*plan, out, 20000);
  ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
  EXPECT_EQ(sharded->removed, std::vector<std::string>{out});
  EXPECT_FALSE(fs::exists(out));

  auto fewer = write_hf_export(*plan, out, 60000);  // fewer shards: the extra ones go
  ASSERT_TRUE(fewer.ok()) << fewer.status().to_string();
  EXPECT_EQ(fewer->removed.size(), sharded->weights.size());

  auto single = write_hf_export(*plan, out, 0);
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir + "/hf")) {
    left.insert(e.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"config.json", "model.safetensors", "notes.txt"}));
}

TEST(HfExport, RefusesCorruptMismatchedOrSelfOverwritingExports) {
  const std::string dir = test::make_temp_dir("hf_export_refused");
  const TrainConfig c = export_config(dir);
  const std::string ckpt = patterned_checkpoint("hf_export_refused_ckpt", c);

  auto inside = write_hf_export(*plan_hf_export(ckpt), ckpt + "/model.safetensors", 0);
  EXPECT_EQ(inside.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(inside.status().message().find("is inside the checkpoint"), std::string::npos)
      << inside.status().message();

  // The config claims a wider model than the weights. Unless the manifest vouches for it, the
  // CRC says so; if it does, the first tensor's shape does.
  const std::string other = test::make_temp_dir("hf_export_refused_other") + "/step";
  fs::copy(ckpt, other);
  TrainConfig wider = c;
  wider.model.n_embd = 64;
  const std::string text = config_to_json(wider).dump(2) + "\n";
  std::ofstream(other + "/config.json") << text;
  auto unvouched = plan_hf_export(other);
  EXPECT_EQ(unvouched.status().code(), ErrorCode::bad_format);
  EXPECT_NE(unvouched.status().message().find("config.json is corrupt"), std::string::npos)
      << "the config is checked against the manifest too: " << unvouched.status().message();
  nlohmann::json manifest = read_json(other + "/manifest.json");
  for (auto& f : manifest["files"]) {
    if (f["name"] != "config.json") continue;
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(text.data(), text.size()));
    f["bytes"] = text.size();
    f["crc32c"] = crc;
  }
  std::ofstream(other + "/manifest.json") << manifest.dump(2);
  auto mismatch = plan_hf_export(other);
  EXPECT_EQ(mismatch.status().code(), ErrorCode::bad_format);
  EXPECT_NE(mismatch.status().message().find("tensor 'wte.weight' has shape (64, 32), expected "
                                             "(64, 64) for the model of " +
                                             other + "/config.json"),
            std::string::npos)
      << mismatch.status().message();

  const std::string path = ckpt + "/model.safetensors";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(path) / 2);
    f.seekg(middle);
    const char ch = static_cast<char>(f.get() ^ 0x10);
    f.seekp(middle);
    f.put(ch);
  }
  auto corrupt = plan_hf_export(ckpt);
  EXPECT_EQ(corrupt.status().code(), ErrorCode::bad_format);
  EXPECT_NE(corrupt.status().message().find("model.safetensors is corrupt: CRC32C"),
            std::string::npos)
      << corrupt.status().message();
  EXPECT_EQ(corrupt.status().message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace strata
