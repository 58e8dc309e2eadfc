// The gradient sum of a data-parallel step by itself (Note [Collectives on device memory] in
// src/dist/device_collectives.h), for bench/collectives.sh, under mpirun: per buffer size,
// `repeats` times, interleaved, every rank waiting for the others first (so no rank's lateness
// is timed): "host" copies the device buffer out, runs Communicator::all_reduce_sum on host
// memory and copies it back, as the in-memory trainer does with collectives "host"; "device"
// runs DeviceCollectives::all_reduce_sum on the device buffer. Rank 0 prints the medians of
// rank 0's seconds as one JSON line, and whether both gave the same bits.
//   bench_collectives DEVICE(cpu|cpu-discrete) REPEATS MIB...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "dist/peer_transport.h"

namespace strata {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_collectives cpu|cpu-discrete REPEATS MIB...\n");
    return 2;
  }
  const std::string device_name = argv[1];
  const int repeats = std::atoi(argv[2]);
  auto opened = open_world();
  if (!opened.ok() || !launched_by_mpi() || repeats < 1) {
    std::fprintf(stderr, "bench_collectives: run under mpirun with REPEATS >= 1 (%s)\n",
                 opened.ok() ? "launched without mpirun" : opened.status().to_string().c_str());
    return 2;
  }
  Communicator& world = **opened;
  CpuDeviceOptions o;
  o.discrete = device_name == "cpu-discrete";
  std::unique_ptr<Device> dev = create_cpu_device(o);
  std::unique_ptr<Stream> stream = dev->create_stream("bench");
  auto transport = make_mpi_peer_transport(world);
  if (!transport.ok()) {
    std::fprintf(stderr, "bench_collectives: %s\n", transport.status().to_string().c_str());
    return 1;
  }
  DeviceCollectives device_sum(*dev, world, std::move(*transport));

  std::string json = "{\"device\": \"" + device_name +
                     "\", \"ranks\": " + std::to_string(world.size()) + ", \"sizes\": [";
  for (int a = 3; a < argc; ++a) {
    const int64_t count = std::atoll(argv[a]) * (int64_t{1} << 20) / 4;
    std::vector<float> values(static_cast<size_t>(count)), host(values.size()),
        via_host(values.size()), via_device(values.size());
    for (int64_t i = 0; i < count; ++i) {
      values[static_cast<size_t>(i)] =
          static_cast<float>((i * 7 + world.rank() * 13) % 101) * 0.01f;
    }
    auto buf = dev->alloc(count * 4);
    if (!buf.ok() || !device_sum.reserve(count).ok()) {
      std::fprintf(stderr, "bench_collectives: cannot allocate %lld floats\n",
                   static_cast<long long>(count));
      return 1;
    }
    std::vector<double> host_s, device_s;
    for (int k = 0; k < repeats; ++k) {
      // host: out, sum on host memory, back in.
      dev->copy(*stream, buf->f32(), values.data(), count * 4);
      stream->synchronize();
      if (!world.all_reduce_max(0).ok()) return 1;  // every rank ready
      auto t0 = std::chrono::steady_clock::now();
      dev->copy(*stream, host.data(), buf->f32(), count * 4);
      stream->synchronize();
      if (!world.all_reduce_sum(host.data(), count).ok()) return 1;
      dev->copy(*stream, buf->f32(), host.data(), count * 4);
      stream->synchronize();
      host_s.push_back(seconds_since(t0));
      dev->copy(*stream, via_host.data(), buf->f32(), count * 4);
      // device: in place.
      dev->copy(*stream, buf->f32(), values.data(), count * 4);
      stream->synchronize();
      if (!world.all_reduce_max(0).ok()) return 1;
      t0 = std::chrono::steady_clock::now();
      if (!device_sum.all_reduce_sum(*stream, buf->f32(), count).ok()) return 1;
      stream->synchronize();
      device_s.push_back(seconds_since(t0));
      dev->copy(*stream, via_device.data(), buf->f32(), count * 4);
      stream->synchronize();
    }
    const bool same = std::memcmp(via_host.data(), via_device.data(), via_host.size() * 4) == 0;
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s{\"mib\": %s, \"host_s\": %.6f, \"device_s\": %.6f, "
                  "\"device_over_host\": %.3f, \"same_bits\": %s}",
                  a > 3 ? ", " : "", argv[a], median(host_s), median(device_s),
                  median(device_s) / median(host_s), same ? "true" : "false");
    json += line;
    if (!same) {
      std::fprintf(stderr, "bench_collectives: the two sums differ (%s MiB)\n", argv[a]);
      return 1;
    }
  }
  if (world.rank() == 0) std::printf("%s]}\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  return strata::run(argc, argv);
}
