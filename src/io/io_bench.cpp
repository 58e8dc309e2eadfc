#include "io/io_bench.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/rng.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Makes sure the file holds `size` bytes of written data (not a hole), so a read pass measures
// the device rather than the file system's zero-fill of unwritten extents.
Status prepare_file(IoEngine& engine, const IoFile& file, uint64_t size, uint64_t block,
                    void* buffer) {
  struct stat st{};
  if (fstat(file.fd, &st) != 0) return io_error("fstat " + file.path + ": " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) >= size) return Status();
  std::memset(buffer, 0x5a, block);
  for (uint64_t off = 0; off < size; off += block) {
    IoRequest w{IoOp::write, &file, off, buffer, std::min(block, size - off)};
    STRATA_ASSIGN_OR_RETURN(Ticket t, engine.submit(w));
    STRATA_RETURN_IF_ERROR(engine.wait(t));
  }
  if (fsync(file.fd) != 0) return io_error("fsync " + file.path + ": " + std::strerror(errno));
  return Status();
}

}  // namespace

Result<IoBenchResult> run_io_bench(IoEngine& engine, const IoBenchOptions& o) {
  if (o.block == 0 || o.size < o.block || o.size % o.block != 0) {
    return invalid_argument("bench-io: size " + std::to_string(o.size) +
                            " must be a positive multiple of block " + std::to_string(o.block));
  }
  if (o.queue_depth < 1) return invalid_argument("bench-io: queue depth must be at least 1");
  const uint64_t blocks = o.size / o.block;
  const int depth = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(o.queue_depth), blocks));

  STRATA_ASSIGN_OR_RETURN(auto file, open_io_file(o.path, /*create=*/true, o.direct));

  // One aligned buffer per slot in flight (registered with the engine where it supports that).
  std::vector<void*> buffers(static_cast<size_t>(depth), nullptr);
  std::vector<std::pair<void*, uint64_t>> regions;
  for (auto& b : buffers) {
    b = std::aligned_alloc(kDirectIoAlignment, o.block);
    if (b == nullptr) return out_of_memory("bench-io: cannot allocate " + std::to_string(o.block));
    std::memset(b, 0xa5, o.block);
    regions.emplace_back(b, o.block);
  }
  struct Freer {
    std::vector<void*>& v;
    ~Freer() {
      for (void* p : v) std::free(p);
    }
  } freer{buffers};
  STRATA_RETURN_IF_ERROR(engine.register_buffers(regions));
  if (o.op == IoOp::read) STRATA_RETURN_IF_ERROR(prepare_file(engine, *file, o.size, o.block, buffers[0]));

  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  if (o.random) {
    Rng rng(o.seed);
    for (uint64_t i = blocks - 1; i > 0; i--) std::swap(order[i], order[rng.next_u64() % (i + 1)]);
  }

  std::vector<Ticket> tickets(static_cast<size_t>(depth));
  std::vector<Clock::time_point> started(static_cast<size_t>(depth));
  std::vector<double> latency_us;
  latency_us.reserve(blocks);
  uint64_t next = 0;
  auto submit_slot = [&](int slot) -> Status {
    IoRequest r{o.op, file.get(), order[next++] * o.block, buffers[static_cast<size_t>(slot)], o.block};
    started[static_cast<size_t>(slot)] = Clock::now();
    STRATA_ASSIGN_OR_RETURN(tickets[static_cast<size_t>(slot)], engine.submit(r));
    return Status();
  };

  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  for (int s = 0; s < depth; s++) STRATA_RETURN_IF_ERROR(submit_slot(s));
  // Slots complete roughly in submission order; waiting on the oldest keeps `depth` in flight.
  for (uint64_t done = 0; done < blocks; done++) {
    const int slot = static_cast<int>(done % static_cast<uint64_t>(depth));
    STRATA_RETURN_IF_ERROR(engine.wait(tickets[static_cast<size_t>(slot)]));
    latency_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - started[static_cast<size_t>(slot)])
            .count());
    if (next < blocks) STRATA_RETURN_IF_ERROR(submit_slot(slot));
  }
  if (o.op == IoOp::write && fdatasync(file->fd) != 0) {
    return io_error("fdatasync " + o.path + ": " + std::strerror(errno));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;

  std::sort(latency_us.begin(), latency_us.end());
  auto pct = [&](double p) {
    return latency_us[std::min(latency_us.size() - 1,
                               static_cast<size_t>(p * static_cast<double>(latency_us.size())))];
  };
  IoBenchResult r;
  r.seconds = seconds;
  r.gb_per_s = static_cast<double>(o.size) / seconds / 1e9;
  r.iops = static_cast<double>(blocks) / seconds;
  r.p50_us = pct(0.50);
  r.p99_us = pct(0.99);
  r.cpu_s_per_gb = cpu / (static_cast<double>(o.size) / 1e9);
  return r;
}

}  // namespace strata
