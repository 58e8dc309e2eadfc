// Tools' view of a checkpoint, gathered when sharded; gathered_checkpoint.h.
#include "cli/gathered_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "core/config.h"
#include "core/log.h"
#include "formats/checkpoint.h"
#include "formats/checkpoint_shards.h"
#include "io/configured_engine.h"

namespace strata::cli {

namespace fs = std::filesystem;

Result<CheckpointSaveStats> gather_into(const std::string& dir, const std::string& out_root) {
  std::error_code ec;
  fs::create_directories(out_root, ec);
  if (ec) return io_error("cannot create " + out_root + " to gather into: " + ec.message());
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine,
                          create_configured_engine(IoConfig{}, out_root));
  return gather_checkpoint(*engine, dir, out_root);
}

Result<HfReadableCheckpoint> HfReadableCheckpoint::open(const std::string& dir,
                                                        const std::string& scratch_parent) {
  STRATA_ASSIGN_OR_RETURN(const int version, checkpoint_version(dir));
  if (version != kShardedCheckpointVersion) return HfReadableCheckpoint(dir, "");
  const std::string scratch =
      (fs::path(scratch_parent) / (".tmp-gather-" + std::to_string(::getpid()))).string();
  log_info("checkpoint " + dir + " is sharded over ranks: gathering it in " + scratch);
  HfReadableCheckpoint out("", scratch);  // removes the scratch on every way out
  STRATA_ASSIGN_OR_RETURN(CheckpointSaveStats saved, gather_into(dir, scratch));
  out.dir_ = saved.dir;
  return out;
}

HfReadableCheckpoint::HfReadableCheckpoint(HfReadableCheckpoint&& other) noexcept
    : dir_(std::move(other.dir_)),
      scratch_(std::exchange(other.scratch_, "")),
      registered_(std::move(other.registered_)) {}

HfReadableCheckpoint::~HfReadableCheckpoint() {
  if (scratch_.empty()) return;
  std::error_code ec;
  fs::remove_all(scratch_, ec);
}

}  // namespace strata::cli
