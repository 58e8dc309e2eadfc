// Sharded checkpoints: Note [Sharded checkpoints] in checkpoint_shards.h.
#include "formats/checkpoint_shards.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/json_util.h"
#include "formats/checkpoint_publish.h"
#include "io/sequential_file.h"

namespace strata {

std::string rank_shard_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d.state", rank);
  return buf;
}

Result<RankShardFile> write_rank_shard(IoEngine& engine, const std::string& dir, int rank,
                                       int64_t slabs, const SlabReader& read_share) {
  RankShardFile out;
  out.name = rank_shard_file_name(rank);
  STRATA_ASSIGN_OR_RETURN(SequentialFile f, SequentialFile::create(engine, dir + "/" + out.name));
  for (int64_t slab = 0; slab < slabs; ++slab) {
    STRATA_RETURN_IF_ERROR(read_share(slab, [&](const SlabPiece& p) {
      if (p.count == 0) return Status();
      out.extents.push_back({slab, p.begin, p.count, f.position()});
      for (const float* stream : {p.master, p.m, p.v}) {
        STRATA_RETURN_IF_ERROR(f.append(stream, p.count * 4));
      }
      return Status();
    }));
  }
  STRATA_RETURN_IF_ERROR(f.finish());
  out.bytes = f.size();
  out.crc = f.crc();
  return out;
}

namespace {

// A rank's description for rank 0: its file, or the error that stopped it.
nlohmann::json describe_shard(Result<RankShardFile>& r, int rank) {
  if (!r.ok()) return {{"rank", rank}, {"error", r.status().message()}};
  nlohmann::json extents = nlohmann::json::array();
  for (const ShardExtent& e : r->extents) extents.push_back({e.slab, e.begin, e.count, e.offset});
  return {{"rank", rank},
          {"name", r->name},
          {"bytes", r->bytes},
          {"crc32c", crc32c_hex(r->crc)},
          {"extents", extents}};
}

// Every rank's description, in rank order, on rank 0 (the others get an empty list): one
// broadcast of its length and one of its text per rank.
Result<std::vector<nlohmann::json>> gather_descriptions(Communicator& world,
                                                        const nlohmann::json& mine) {
  std::vector<nlohmann::json> out;
  for (int r = 0; r < world.size(); ++r) {
    std::string text = r == world.rank() ? mine.dump() : std::string();
    int64_t length = static_cast<int64_t>(text.size());
    STRATA_RETURN_IF_ERROR(world.broadcast(&length, sizeof length, r));
    text.resize(static_cast<size_t>(length));
    STRATA_RETURN_IF_ERROR(world.broadcast(text.data(), length, r));
    if (world.rank() == 0) {
      STRATA_ASSIGN_OR_RETURN(nlohmann::json d,
                              parse_json(text, "rank " + std::to_string(r) + "'s shard"));
      out.push_back(std::move(d));
    }
  }
  return out;
}

// Rank 0: the manifest's entries and "shards" from every rank's description, or the first
// rank's error.
Status collect_shards(const std::vector<nlohmann::json>& descriptions,
                      std::vector<ManifestEntry>* files, nlohmann::json* shards) {
  nlohmann::json listed = nlohmann::json::array();
  for (const nlohmann::json& d : descriptions) {
    const int rank = d.at("rank").get<int>();
    if (d.contains("error")) {
      return io_error("rank " + std::to_string(rank) + ": " + d["error"].get<std::string>());
    }
    const std::string crc = d.at("crc32c").get<std::string>();
    files->push_back({d.at("name").get<std::string>(), d.at("bytes").get<int64_t>(),
                      static_cast<uint32_t>(std::stoul(crc, nullptr, 16))});
    listed.push_back({{"rank", rank}, {"name", d["name"]}, {"extents", d.at("extents")}});
  }
  *shards = {{"ranks", descriptions.size()}, {"files", listed}};
  return Status();
}

}  // namespace

Result<CheckpointSaveStats> save_sharded_checkpoint(IoEngine& engine, const std::string& root,
                                                    const TrainConfig& cfg,
                                                    const CheckpointMeta& meta,
                                                    const SlabReader& read_share, int64_t keep,
                                                    Communicator& world) {
  const int rank = world.rank();
  const std::string step_dir = checkpoint_step_dir(root, meta.step);
  // 1. Rank 0 opens the save: {0 write it, 1 saved already, 2 failed; its pid}.
  enum : int64_t { kWrite, kSavedAlready, kFailed };
  Result<PendingSave> pending = internal_error("only rank 0 begins a sharded save");
  int64_t head[2] = {kWrite, 0};
  if (rank == 0) {
    pending = begin_checkpoint_save(root, meta.step, ::getpid());
    head[0] = !pending.ok() ? kFailed : pending->done ? kSavedAlready : kWrite;
    head[1] = ::getpid();
  }
  STRATA_RETURN_IF_ERROR(world.broadcast(head, sizeof head, 0));
  if (head[0] == kFailed) {
    if (rank == 0) return pending.status();
    return io_error("checkpoint " + step_dir + " not written: rank 0 could not begin it");
  }
  CheckpointSaveStats stats;
  stats.dir = step_dir;
  if (head[0] == kSavedAlready) return stats;

  // 2. Every rank its file; 3. the descriptions to rank 0.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tmp = checkpoint_tmp_dir(root, meta.step, static_cast<long>(head[1]));
  const int64_t slabs = static_cast<int64_t>(make_param_layout(cfg.model, cfg.lora).slabs.size());
  Result<RankShardFile> mine = write_rank_shard(engine, tmp, rank, slabs, read_share);
  STRATA_ASSIGN_OR_RETURN(std::vector<nlohmann::json> descriptions,
                          gather_descriptions(world, describe_shard(mine, rank)));

  // 4. Rank 0 writes the JSON files and publishes; its verdict goes to every rank.
  int64_t failed = 0;
  Result<CheckpointSaveStats> published = stats;
  if (rank == 0) {
    std::vector<ManifestEntry> files;
    nlohmann::json shards;
    Status written = collect_shards(descriptions, &files, &shards);
    if (written.ok()) {
      written = write_checkpoint_meta(engine, pending->tmp, cfg, meta, kShardedCheckpointVersion,
                                      std::move(files), {{"shards", shards}}, &pending->stats);
    }
    published = publish_checkpoint_save(std::move(*pending), root, keep, std::move(written));
    failed = published.ok() ? 0 : 1;
  }
  STRATA_RETURN_IF_ERROR(world.broadcast(&failed, sizeof failed, 0));
  if (rank == 0) return published;
  if (!mine.ok()) {
    return Status(mine.status().code(),
                  "checkpoint " + step_dir + " not written: " + mine.status().message());
  }
  if (failed != 0) {
    return io_error("checkpoint " + step_dir + " not written: rank 0 could not publish it");
  }
  stats.bytes = mine->bytes;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

// ---- reading ------------------------------------------------------------------------------------

namespace {

// bad_format for a field of the manifest's shards: "<where><field> <what>".
Status bad_field(const std::string& where, const std::string& field, const std::string& what) {
  return bad_format(where + field + " " + what);
}

// Rank r's entry of the shards: its file, opened, and the extents in it.
struct RankShard {
  ReadOnlyFile file;
  std::vector<ShardExtent> extents;
};

// Entry `f` (.files[r]) checked: it names rank r's file, which the manifest lists (`verified`);
// every extent is a range of a slab of the layout that lies inside the file.
Result<RankShard> open_rank_shard(const std::string& dir, const std::string& where,
                                  const nlohmann::json& f, int r, const ParamLayout& layout,
                                  const std::vector<std::string>& verified, ReadStats* stats) {
  const std::string field = ".files[" + std::to_string(r) + "]";
  // The name is the one rank r writes, never a path from the file.
  const auto rank = f.find("rank"), name = f.find("name");
  const bool named = f.is_object() && rank != f.end() && rank->is_number_integer() &&
                     rank->get<int64_t>() == r && name != f.end() && name->is_string() &&
                     name->get<std::string>() == rank_shard_file_name(r);
  if (!named) {
    return bad_field(where, field,
                     "is not rank " + std::to_string(r) + "'s " + rank_shard_file_name(r));
  }
  if (std::find(verified.begin(), verified.end(), rank_shard_file_name(r)) == verified.end()) {
    return bad_format("checkpoint " + dir + ": its manifest does not list " +
                      rank_shard_file_name(r));
  }
  STRATA_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::open(dir + "/" + rank_shard_file_name(r),
                                                                "checkpoint file"));
  if (stats != nullptr) file.count_reads_in(stats);
  const auto extents = f.find("extents");
  if (extents == f.end() || !extents->is_array()) {
    return bad_field(where, field + ".extents", "is not a list");
  }
  const auto n_slabs = static_cast<int64_t>(layout.slabs.size());
  RankShard shard{std::move(file), {}};
  for (size_t i = 0; i < extents->size(); ++i) {
    const nlohmann::json& e = (*extents)[i];
    const std::string ef = field + ".extents[" + std::to_string(i) + "]";
    const bool four = e.is_array() && e.size() == 4 &&
                      std::all_of(e.begin(), e.end(), [](const nlohmann::json& v) {
                        return v.is_number_integer() && v.get<int64_t>() >= 0;
                      });
    if (!four) {
      return bad_field(where, ef, "is not [slab, begin, count, offset] (non-negative integers)");
    }
    const ShardExtent x{e[0].get<int64_t>(), e[1].get<int64_t>(), e[2].get<int64_t>(),
                        e[3].get<int64_t>()};
    if (x.slab >= n_slabs) {
      return bad_field(where, ef,
                       "names slab " + std::to_string(x.slab) + " of " + std::to_string(n_slabs));
    }
    const int64_t numel = layout.slabs[static_cast<size_t>(x.slab)].numel;
    if (x.count == 0 || x.begin > numel || x.count > numel - x.begin) {
      return bad_field(where, ef,
                       "is not a range of slab " + std::to_string(x.slab) + "'s " +
                           std::to_string(numel) + " elements");
    }
    const ReadOnlyFile& in = shard.file;
    if (x.offset > in.size() || 12 * x.count > in.size() - x.offset) {
      return bad_field(
          where, ef,
          "lies past the end of " + in.path() + " (" + std::to_string(in.size()) + " bytes)");
    }
    shard.extents.push_back(x);
  }
  return shard;
}

}  // namespace

Result<std::unique_ptr<ShardedStateReader>> ShardedStateReader::open(
    const std::string& dir, const ParamLayout& layout, const nlohmann::json& shards,
    const std::vector<std::string>& verified, ReadStats* stats) {
  const std::string where = "checkpoint manifest " + dir + "/manifest.json: shards";
  if (!shards.is_object()) return bad_field(where, "", "is not an object");
  const auto ranks = shards.find("ranks"), files = shards.find("files");
  if (ranks == shards.end() || !ranks->is_number_integer() || ranks->get<int64_t>() < 1 ||
      ranks->get<int64_t>() > 65536) {
    return bad_field(where, ".ranks", "is not a number of ranks (1 to 65536)");
  }
  const int n = ranks->get<int>();
  if (files == shards.end() || !files->is_array() || files->size() != static_cast<size_t>(n)) {
    return bad_field(where, ".files", "is not a list of " + std::to_string(n) + " ranks' files");
  }
  const auto n_slabs = static_cast<int64_t>(layout.slabs.size());
  std::unique_ptr<ShardedStateReader> reader(new ShardedStateReader());
  reader->extents_.resize(static_cast<size_t>(n_slabs));
  for (int r = 0; r < n; ++r) {
    STRATA_ASSIGN_OR_RETURN(
        RankShard shard,
        open_rank_shard(dir, where, (*files)[static_cast<size_t>(r)], r, layout, verified, stats));
    for (const ShardExtent& x : shard.extents) {
      reader->extents_[static_cast<size_t>(x.slab)].push_back({x, static_cast<size_t>(r)});
    }
    reader->files_.push_back(std::move(shard.file));
  }
  // Every slab tiled exactly once.
  for (int64_t s = 0; s < n_slabs; ++s) {
    auto& list = reader->extents_[static_cast<size_t>(s)];
    std::sort(list.begin(), list.end(),
              [](const Extent& a, const Extent& b) { return a.at.begin < b.at.begin; });
    int64_t next = 0;
    for (const Extent& e : list) {
      if (e.at.begin != next) break;
      next += e.at.count;
    }
    const int64_t numel = layout.slabs[static_cast<size_t>(s)].numel;
    if (next != numel) {
      return bad_field(where, "",
                       "do not cover slab " + layout.slabs[static_cast<size_t>(s)].name +
                           " exactly once (a gap or an overlap at element " + std::to_string(next) +
                           " of " + std::to_string(numel) + ")");
    }
  }
  return reader;
}

Status ShardedStateReader::fill(int64_t slab, const SlabPiece& p) {
  const int64_t lo = p.begin, hi = p.begin + p.count;
  for (const Extent& e : extents_.at(static_cast<size_t>(slab))) {
    const int64_t a = std::max(lo, e.at.begin), b = std::min(hi, e.at.begin + e.at.count);
    if (a >= b) continue;
    const ReadOnlyFile& f = files_[e.file];
    const int64_t at = e.at.offset + (a - e.at.begin) * 4, stream = e.at.count * 4;
    float* dst[3] = {p.master, p.m, p.v};
    for (int k = 0; k < 3; ++k) {
      if (dst[k] == nullptr) continue;
      STRATA_RETURN_IF_ERROR(f.read_at(dst[k] + (a - lo), (b - a) * 4, at + k * stream));
    }
  }
  return Status();
}

// ---- gathering ----------------------------------------------------------------------------------

Result<CheckpointSaveStats> gather_checkpoint(IoEngine& engine, const std::string& dir,
                                              const std::string& out_root, int64_t piece_elems) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, read_checkpoint_config(dir));
  CheckpointMeta meta;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StateSource> source,
                          open_checkpoint_state(dir, cfg, &meta));
  const ParamLayout layout = make_param_layout(cfg.model, cfg.lora);
  std::vector<float> buf(static_cast<size_t>(3 * piece_elems));  // (3, piece_elems) master, m, v
  const SlabReader read = [&](int64_t slab, const SlabPieceFn& take) {
    const int64_t numel = layout.slabs.at(static_cast<size_t>(slab)).numel;
    for (int64_t at = 0; at < numel; at += piece_elems) {
      const int64_t n = std::min(piece_elems, numel - at);
      const SlabPiece p{at, n, buf.data(), buf.data() + piece_elems, buf.data() + 2 * piece_elems};
      STRATA_RETURN_IF_ERROR(source->fill(slab, p));
      STRATA_RETURN_IF_ERROR(take(p));
    }
    return Status();
  };
  return save_checkpoint(engine, out_root, cfg, meta, read, 0);
}

}  // namespace strata
