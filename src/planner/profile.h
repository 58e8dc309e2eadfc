// A hardware profile: the rates and capacities the cost model turns a plan's tasks into seconds
// (docs/design.md §7). Measured on this machine by `strata profile`, or hand-written for hardware
// we do not have (profiles/*.json, every figure with its public source in "sources").
//
// JSON format (all rates in units per second, bytes in bytes; unknown keys are errors so that a
// typo does not silently fall back to a default):
// {
//   "name": "a100-80gb-4nvme",
//   "description": "...",
//   "dtype": {"param_bytes": 2, "grad_bytes": 4, "optim_bytes": 12, "act_bytes": 2},
//   "compute": {
//     "block_fwd": [[tokens, flops_per_s], ...],  // one block's forward, by micro-batch tokens
//     "block_bwd": [[tokens, flops_per_s], ...],  // its backward (recompute not included)
//     "head":      [[tokens, flops_per_s], ...],  // final norm + LM head + loss + backward
//     "block_fwd_reuse": [[tokens, speedup], ...],  // optional, Note [Weights reused] in
//     "block_bwd_reuse": [[tokens, speedup], ...],  //   simulator.h (absent: 1)
//     "embed_s_per_token": 1e-8,   // embedding forward or backward, per token
//     "memset_bytes_per_s": 1e11,  // gradient-buffer zeroing
//     "task_overhead_s": 1e-5,     // per compute task (launch, sync)
//     "attention": "flash" | "materialized",  // sizes the device workspace
//     "gemm": [{"m":..,"n":..,"k":..,"flops_per_s":..}]  // raw GEMM measurements (for reading)
//   },
//   "link": {"h2d_bytes_per_s": .., "d2h_bytes_per_s": .., "latency_s": ..},
//   "storage": {"dirs": [{"path": "/nvme0", "read_bytes_per_s": .., "write_bytes_per_s": ..,
//                         "capacity_bytes": ..}], "latency_s": ..},
//   "cpu_optimizer": {"params_per_s": .., "reduce_bytes_per_s": .., "latency_s": ..},
//   "cores": {"shared": true,          // compute and the CPU optimizer share cores; while both
//             "compute_speed": 0.95,   // have a task each runs at its speed ("shared_speed": x
//             "optim_speed": 0.65,     // sets both, as older profiles do)
//             "io_s_per_byte": 3e-10}, // compute time lost per byte of storage traffic (optional)
//   "capacity": {"device_bytes": .., "host_bytes": ..},
//   "sources": {"<field>": "where the figure comes from", ...},
//   "measurement": {"load_before": .., "other_cpu": .., "steal": .., "rounds": ..,  // optional:
//                   "samples": .., "rejected": .., "round_spread": ..}  // how `strata profile`
//                   went
// }
// Throughput tables are interpolated linearly in log(tokens) and clamped at their ends: small
// micro-batches run GEMMs of poor shape, and that is what the table records.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace strata {

// (tokens per micro-batch, FLOP/s) points, sorted by tokens.
using RateTable = std::vector<std::pair<double, double>>;
double rate_at(const RateTable& table, double tokens);

struct StorageDir {
  std::string path;
  double read_bytes_per_s = 0, write_bytes_per_s = 0;
  int64_t capacity_bytes = 0;  // 0: unknown (no budget)
};

struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
};

// How a measured profile's figures were taken (`strata profile`), kept so that a reader can tell
// a profile taken on a busy machine. Absent from hand-written profiles (rounds 0).
struct ProfileMeasurement {
  int64_t rounds = 0;       // repetitions of the instrumented runs (0: not measured)
  double load_before = 0;   // /proc/loadavg's one-minute figure when measuring began
  double other_cpu = 0;     // CPU time of other processes while measuring / (wall x cores)
  double steal = 0;         // time the hypervisor took from the cores / (wall x cores)
  int64_t samples = 0;      // per-task timings the compute rates come from
  int64_t rejected = 0;     // timings dropped as outliers (Note [Robust timings])
  double round_spread = 0;  // the slowest round's block tasks over the fastest's, minus 1
};

struct HardwareProfile {
  std::string name, description;
  // Bytes per element of the state the plans move: working params, gradient accumulators,
  // optimizer state (master + m + v), activations (checkpoints).
  int param_bytes = 4, grad_bytes = 4, optim_bytes = 12, act_bytes = 4;

  RateTable block_fwd, block_bwd, head;
  // (tokens, speed-up) of a block task whose weights the previous block task on the compute queue
  // just used, over block_fwd / block_bwd (Note [Weights reused] in simulator.h); empty: 1.
  RateTable block_fwd_reuse, block_bwd_reuse;
  double embed_s_per_token = 0;
  double memset_bytes_per_s = 1e10;
  double task_overhead_s = 0;
  bool flash_attention = false;  // "attention": "flash" (no T x T scores kept) or "materialized"
  std::vector<GemmSample> gemm;

  double h2d_bytes_per_s = 1e10, d2h_bytes_per_s = 1e10, link_latency_s = 0;

  std::vector<StorageDir> storage_dirs;
  double storage_latency_s = 0;

  double optim_params_per_s = 1e8;
  double reduce_bytes_per_s = 1e10;  // gradient accumulate / sum of squares on host
  double optim_latency_s = 0;

  // Between the ranks of a data-parallel run (optional section "network", written back only when
  // read: `strata profile` does not measure it): the bytes per second one rank sends during a
  // collective (its bus bandwidth) and each collective's latency.
  bool has_network = false;
  double net_bytes_per_s = 1e10, net_latency_s = 0;

  // The CPU backend: compute and the CPU optimizer run on the same cores, so while both have a
  // task each runs at its shared speed (a fraction of its own pace), and storage traffic takes
  // io_s_per_byte of compute time per byte moved while compute runs (Note [Shared cores] in
  // simulator.h).
  bool shared_cores = false;
  double compute_shared_speed = 0.5, optim_shared_speed = 0.5;
  double io_s_per_byte = 0;

  int64_t device_bytes = 0, host_bytes = 0;  // 0: unknown (no budget)
  std::map<std::string, std::string> sources;
  ProfileMeasurement measurement;

  // Striped over all directories: the sum of their rates.
  double storage_read_bytes_per_s() const;
  double storage_write_bytes_per_s() const;
  int64_t storage_capacity_bytes() const;  // 0 when any directory's is unknown
};

// invalid_argument naming the field ("profile hw.json: compute.block_fwd: ...") on a bad value.
Result<HardwareProfile> profile_from_json(const nlohmann::json& j, const std::string& source);
Result<HardwareProfile> load_profile(const std::string& path);
nlohmann::json profile_to_json(const HardwareProfile& p);

}  // namespace strata
