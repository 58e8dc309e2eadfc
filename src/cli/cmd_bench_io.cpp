// strata bench-io: measure the storage engine on one file, the way training will use it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/scratch_files.h"
#include "io/configured_engine.h"
#include "io/io_bench.h"

namespace strata::cli {

namespace {

// What to measure: --size --block --qd --op --pattern --buffered, and --file or --dir.
Result<IoBenchOptions> bench_options(const ParsedArgs& a) {
  IoBenchOptions o;
  STRATA_ASSIGN_OR_RETURN(o.size, parse_byte_size("size", a.get("size", "1G")));
  STRATA_ASSIGN_OR_RETURN(o.block, parse_byte_size("block", a.get("block", "1M")));
  try {
    o.queue_depth = std::stoi(a.get("qd", "32"));
  } catch (...) {
    return invalid_argument("--qd '" + a.get("qd") + "' is not a number");
  }
  const std::string op = a.get("op", "read"), pattern = a.get("pattern", "seq");
  if (op != "read" && op != "write") {
    return invalid_argument("--op must be read or write, got '" + op + "'");
  }
  if (pattern != "seq" && pattern != "rand") {
    return invalid_argument("--pattern must be seq or rand, got '" + pattern + "'");
  }
  o.op = op == "read" ? IoOp::read : IoOp::write;
  o.random = pattern == "rand";
  o.direct = !a.has("buffered");
  if (a.has("file")) {
    o.path = a.get("file");
  } else {
    const std::string dir = a.get("dir", ".");
    if (!std::filesystem::is_directory(dir)) {
      return invalid_argument("--dir " + dir + " is not a directory");
    }
    o.path =
        (std::filesystem::path(dir) / ("strata-bench-io." + std::to_string(getpid()))).string();
  }
  return o;
}

// The config's io section (rate limits, fault injection, engine), overridden by the flags.
Result<IoConfig> bench_io_config(const ParsedArgs& a, const IoBenchOptions& o) {
  STRATA_ASSIGN_OR_RETURN(TrainConfig cfg, load_config_from_args(a));
  IoConfig io = cfg.io;
  if (a.has("engine")) {
    STRATA_ASSIGN_OR_RETURN(io.engine, parse_enum<IoEngineKind>("--engine", a.get("engine")));
  }
  io.queue_depth = o.queue_depth;
  // A request is split into engine blocks; use the benchmark's block where the engine can.
  if (o.block % kDirectIoAlignment == 0) io.block_size = static_cast<int64_t>(o.block);
  if (a.has("workers")) {
    try {
      io.workers = std::stoi(a.get("workers"));
    } catch (...) {
      return invalid_argument("--workers '" + a.get("workers") + "' is not a number");
    }
  }
  return io;
}

void print_result(const IoEngine& engine, const IoBenchOptions& o, const IoBenchResult& r) {
  const char* op = o.op == IoOp::read ? "read" : "write";
  const char* pattern = o.random ? "rand" : "seq";
  std::printf("%s %s %s, %llu MiB in %llu KiB blocks, queue depth %d, %s\n", engine.name(), pattern,
              op, static_cast<unsigned long long>(o.size >> 20),
              static_cast<unsigned long long>(o.block >> 10), o.queue_depth,
              o.direct ? "O_DIRECT" : "buffered");
  std::printf("  %.3f GB/s  %.0f IOPS  latency p50 %.0f us  p99 %.0f us  %.3f CPU s/GB\n",
              r.gb_per_s, r.iops, r.p50_us, r.p99_us, r.cpu_s_per_gb);
  nlohmann::json j = {{"engine", engine.name()}, {"op", op},
                      {"pattern", pattern},      {"size", o.size},
                      {"block", o.block},        {"queue_depth", o.queue_depth},
                      {"direct", o.direct},      {"gb_per_s", r.gb_per_s},
                      {"iops", r.iops},          {"p50_us", r.p50_us},
                      {"p99_us", r.p99_us},      {"cpu_s_per_gb", r.cpu_s_per_gb}};
  std::printf("%s\n", j.dump().c_str());
}

const std::vector<FlagSpec> kBenchIoFlags = {
    {"dir", true, false},       {"file", true, false},   {"size", true, false},
    {"block", true, false},     {"qd", true, false},     {"op", true, false},
    {"pattern", true, false},   {"engine", true, false}, {"workers", true, false},
    {"buffered", false, false}, {"config", true, false}, {"set", true, true}};

int bench_io_main(const ParsedArgs& a) {
  auto o = bench_options(a);
  if (!o.ok()) return fail(o.status().message(), 2);
  auto io = bench_io_config(a, *o);
  if (!io.ok()) return fail(io.status().message(), 2);
  // Probe and engine in the file's directory; a file we named ourselves is removed after.
  const bool remove_after = !a.has("file");
  std::string dir = std::filesystem::path(o->path).parent_path().string();
  if (dir.empty()) dir = ".";
  auto engine = create_configured_engine(*io, dir);
  if (!engine.ok()) return fail(engine.status().message(), 2);

  ScratchFile scratch;  // a file we named: a signal removes it too (Note [Scratch files])
  if (remove_after) scratch = ScratchFile(o->path);
  auto r = run_io_bench(*engine.value(), *o);
  if (remove_after) std::filesystem::remove(o->path);
  if (!r.ok()) return fail(r.status().message(), 1);
  print_result(*engine.value(), *o, *r);
  return 0;
}

}  // namespace

int cmd_bench_io(const std::vector<std::string>& args) {
  return run_command(args, kBenchIoFlags, "bench-io", bench_io_main);
}

}  // namespace strata::cli
