// The collectives on device memory (Note [Collectives on device memory] in
// src/dist/device_collectives.h) over MPI point-to-point, on both CPU devices, against the host
// all-reduce and the rank-order sum itself, bit for bit. Run under mpirun by
// tests/dist_collectives.sh; exits non-zero, naming the case, on the first difference. The
// reduce-scatter alone is checked over each rank's shard.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "dist/communicator.h"
#include "dist/device_collectives.h"
#include "dist/peer_transport.h"

namespace strata {
namespace {

// Rank r's value at i: signs and magnitudes spread over 2^-10 .. 2^10, so the order of a sum
// shows in its last bits.
std::vector<float> values_of(int rank, int64_t count) {
  Rng rng(static_cast<uint64_t>(1000 + rank));
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) {
    const float scale = static_cast<float>(1 << (rng.next_u64() % 21)) / 1024.0f;
    x = static_cast<float>(rng.next_unit() - 0.5) * scale;
  }
  return v;
}

// Every rank's values summed in rank order: what every rank must end with.
std::vector<float> expected_sum(int ranks, int64_t count) {
  std::vector<float> rows;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> v = values_of(r, count);
    rows.insert(rows.end(), v.begin(), v.end());
  }
  std::vector<float> out(static_cast<size_t>(count));
  sum_in_rank_order(out.data(), rows.data(), ranks, count, count);
  return out;
}

// The first index where a and b differ in any bit, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

bool fail(const Communicator& world, const std::string& what) {
  std::fprintf(stderr, "collectives_check rank %d: %s\n", world.rank(), what.c_str());
  return false;
}

// The device all-gather of `count` elements of `width` bytes (f32, or bf16's two) against the
// host's and against every rank's shard of its own values: rank r's values are values_of(r)'s
// bytes, so its shard is known to every rank.
bool check_all_gather(Communicator& world, Device& dev, Stream& stream, DeviceCollectives& coll,
                      int64_t count, int64_t width, const std::string& name) {
  const auto bytes_of = [count, width](int rank) {
    const std::vector<float> v = values_of(rank, (count * width + 3) / 4);
    std::vector<char> b(static_cast<size_t>(count * width));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  std::vector<char> expected(static_cast<size_t>(count * width));
  for (int r = 0; r < world.size(); ++r) {
    const Range sh = shard_range(count, world.size(), r);
    const std::vector<char> theirs = bytes_of(r);
    std::memcpy(expected.data() + sh.begin * width, theirs.data() + sh.begin * width,
                static_cast<size_t>((sh.end - sh.begin) * width));
  }
  const std::vector<char> mine = bytes_of(world.rank());
  std::vector<char> host = mine;
  Status st = world.all_gather(host.data(), count, width);
  if (!st.ok()) return fail(world, name + ": host all-gather: " + st.to_string());
  auto buf = dev.alloc(std::max<int64_t>(count * width, 1));
  if (!buf.ok()) return fail(world, name + ": " + buf.status().to_string());
  dev.copy(stream, buf->data(), mine.data(), count * width);
  st = coll.all_gather(stream, buf->data(), count, width);
  if (!st.ok()) return fail(world, name + ": device all-gather: " + st.to_string());
  std::vector<char> device(static_cast<size_t>(count * width));
  dev.copy(stream, device.data(), buf->data(), count * width);
  stream.synchronize();
  for (const auto& [label, got] : {std::pair{"device", &device}, std::pair{"host", &host}}) {
    if (*got != expected) {
      return fail(world, name + ": the " + label + " all-gather of " + std::to_string(width) +
                             "-byte elements differs from every rank's shard");
    }
  }
  return true;
}

// One device, one round size: every count's device sum (and reduce-scatter, over this rank's
// shard) against the host's and the expected, and its all-gathers.
bool check_device(Communicator& world, bool discrete, int64_t round_elems) {
  CpuDeviceOptions o;
  o.discrete = discrete;
  std::unique_ptr<Device> dev = create_cpu_device(o);
  auto transport = make_mpi_peer_transport(world);
  if (!transport.ok()) return fail(world, transport.status().to_string());
  DeviceCollectives sum(*dev, world, std::move(*transport), round_elems);
  std::unique_ptr<Stream> stream = dev->create_stream("check");
  const std::string where = std::string(discrete ? "cpu-discrete" : "cpu") + ", rounds of " +
                            std::to_string(round_elems) + " elements";
  for (int64_t count : {0, 1, 2, 5, 1000, 100003}) {
    const std::string name = where + ", " + std::to_string(count) + " elements";
    const std::vector<float> mine = values_of(world.rank(), count);
    const std::vector<float> expected = expected_sum(world.size(), count);

    std::vector<float> host = mine;
    Status st = world.all_reduce_sum(host.data(), count);
    if (!st.ok()) return fail(world, name + ": host all-reduce: " + st.to_string());

    auto buf = dev->alloc(std::max<int64_t>(count, 1) * 4);
    if (!buf.ok()) return fail(world, name + ": " + buf.status().to_string());
    dev->copy(*stream, buf->f32(), mine.data(), count * 4);
    st = sum.all_reduce_sum(*stream, buf->f32(), count);
    if (!st.ok()) return fail(world, name + ": device all-reduce: " + st.to_string());
    std::vector<float> device(static_cast<size_t>(count));
    dev->copy(*stream, device.data(), buf->f32(), count * 4);
    stream->synchronize();

    // The reduce-scatter alone: this rank's shard holds the sums (the rest is unspecified).
    dev->copy(*stream, buf->f32(), mine.data(), count * 4);
    st = sum.reduce_scatter_sum(*stream, buf->f32(), count);
    if (!st.ok()) return fail(world, name + ": device reduce-scatter: " + st.to_string());
    const Range shard = shard_range(count, world.size(), world.rank());
    std::vector<float> scattered(static_cast<size_t>(count));
    dev->copy(*stream, scattered.data(), buf->f32(), count * 4);
    stream->synchronize();
    for (int64_t i = 0; i < count; ++i) {  // compare the shard only
      if (i < shard.begin || i >= shard.end)
        scattered[static_cast<size_t>(i)] = expected[static_cast<size_t>(i)];
    }

    for (const auto& [label, got] : {std::pair{"device", &device}, std::pair{"host", &host},
                                     std::pair{"device reduce-scatter", &scattered}}) {
      const int64_t at = first_difference(*got, expected);
      if (at >= 0) {
        char text[160];
        std::snprintf(text, sizeof text,
                      ": the %s sum differs from the rank-order sum at %lld "
                      "(%a, expected %a)",
                      label, static_cast<long long>(at), (*got)[static_cast<size_t>(at)],
                      expected[static_cast<size_t>(at)]);
        return fail(world, name + text);
      }
    }
    for (int64_t width : {4, 2}) {
      if (!check_all_gather(world, *dev, *stream, sum, count, width, name)) return false;
    }
  }
  return true;
}

// The check can fail: the values make order show, so summing three ranks' in another order gives
// other bits (whatever the world size: the values of every rank are known to every rank).
bool order_shows(const Communicator& world) {
  const int64_t count = 1000;
  const std::vector<float> a = values_of(0, count), b = values_of(1, count),
                           c = values_of(2, count);
  const std::vector<float> expected = expected_sum(3, count);
  std::vector<float> other(static_cast<size_t>(count));
  for (size_t i = 0; i < other.size(); ++i) other[i] = a[i] + (b[i] + c[i]);
  if (first_difference(other, expected) >= 0) return true;
  return fail(world, "a + (b + c) equals (a + b) + c everywhere: the values cannot show order");
}

int run() {
  auto opened = open_world();
  if (!opened.ok()) {
    std::fprintf(stderr, "collectives_check: %s\n", opened.status().to_string().c_str());
    return 2;
  }
  Communicator& world = **opened;
  if (!launched_by_mpi()) {
    std::fprintf(stderr, "collectives_check: run it under mpirun (tests/dist_collectives.sh)\n");
    return 2;
  }
  // One machine: every rank is local, in world order.
  if (world.local_size() != world.size() || world.local_rank() != world.rank()) {
    fail(world, "local rank " + std::to_string(world.local_rank()) + " of " +
                    std::to_string(world.local_size()) + " on one machine of " +
                    std::to_string(world.size()) + " ranks");
    return 1;
  }
  bool ok = order_shows(world);
  for (bool discrete : {false, true}) {
    for (int64_t round_elems : {kAllReduceChunkElems, int64_t{7}, int64_t{1000}}) {
      ok = ok && check_device(world, discrete, round_elems);
    }
  }
  // Every rank's verdict, so that no rank reports success while another failed.
  auto any_failed = world.all_reduce_max(ok ? 0 : 1);
  if (!any_failed.ok() || *any_failed != 0) return 1;
  if (world.rank() == 0) {
    std::printf(
        "collectives_check: %d ranks, device sums and reduce-scatters equal the host's and the "
        "rank-order sum bit for bit, and device all-gathers (4- and 2-byte elements) the host's "
        "and every rank's shard (cpu, cpu-discrete; rounds of 4Mi, 7, 1000 elements)\n",
        world.size());
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main() {
  return strata::run();
}
