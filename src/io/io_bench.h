// The measurement behind `strata bench-io`: one pass of block-sized requests over a file with a
// fixed number in flight, reporting throughput, IOPS, latency percentiles and CPU cost.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "io/io_engine.h"

namespace strata {

struct IoBenchOptions {
  std::string path;                 // the file; created and preallocated if shorter than size
  uint64_t size = 1ull << 30;       // bytes covered by the pass
  uint64_t block = 1ull << 20;      // bytes per request
  int queue_depth = 32;             // requests kept in flight
  IoOp op = IoOp::read;
  bool random = false;              // random block order (a fixed permutation) vs sequential
  bool direct = true;               // O_DIRECT
  uint64_t seed = 1;
};

struct IoBenchResult {
  double seconds = 0;
  double gb_per_s = 0;  // 1e9 bytes per second
  double iops = 0;
  double p50_us = 0;    // submit-to-completion latency per request
  double p99_us = 0;
  double cpu_s_per_gb = 0;  // user+system CPU of the whole process per 1e9 bytes
};

// Before a read pass the file is filled (untimed) so reads hit real blocks.
Result<IoBenchResult> run_io_bench(IoEngine& engine, const IoBenchOptions& options);

}  // namespace strata
