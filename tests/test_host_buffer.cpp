// Host buffers: alignment and rounding, locking that never fails the allocation, move semantics,
// and the pool's blocking and non-blocking hand-out with its byte counts.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "io/host_buffer.h"

namespace strata {
namespace {

TEST(HostBuffer, AlignedRoundedZeroFilled) {
  for (uint64_t bytes : {1ull, 4095ull, 4096ull, 4097ull, (3ull << 20) + 123}) {
    auto b = HostBuffer::allocate(bytes);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kHostBufferAlignment, 0u);
    EXPECT_EQ(b->size() % kHostBufferAlignment, 0u);
    EXPECT_GE(b->size(), bytes);
    EXPECT_LT(b->size() - bytes, kHostBufferAlignment);
    const auto* p = static_cast<const uint8_t*>(b->data());
    for (uint64_t i = 0; i < b->size(); i += 509) ASSERT_EQ(p[i], 0) << "byte " << i;
    std::memset(b->data(), 0xAB, b->size());  // the whole rounded size is usable
  }
}

TEST(HostBuffer, ZeroSizeRefused) {
  auto b = HostBuffer::allocate(0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::invalid_argument);
}

TEST(HostBuffer, SmallBufferLocksUnderDefaultLimit) {
  struct rlimit lim {};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < 64 * 1024) {
    GTEST_SKIP() << "RLIMIT_MEMLOCK is " << lim.rlim_cur << " bytes: too small to lock 4 KiB";
  }
  auto b = HostBuffer::allocate(4096);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->locked());
  auto u = HostBuffer::allocate(4096, /*lock=*/false);
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->locked());
}

TEST(HostBuffer, LockRefusedStillAllocates) {
  // With a zero lock limit mlock fails (unless the process has CAP_IPC_LOCK, e.g. root, which
  // ignores the limit); either way the buffer must come back usable.
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  struct rlimit zero = saved;
  zero.rlim_cur = 0;
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &zero), 0);
  auto b = HostBuffer::allocate(1 << 16);
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  std::memset(b->data(), 1, b->size());
  EXPECT_EQ(static_cast<uint8_t*>(b->data())[b->size() - 1], 1);
}

TEST(HostBuffer, MoveTransfersOwnership) {
  auto r = HostBuffer::allocate(8192);
  ASSERT_TRUE(r.ok());
  HostBuffer a = std::move(r).value();
  void* p = a.data();
  HostBuffer b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_FALSE(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 8192u);
  HostBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  c.reset();
  EXPECT_FALSE(c);
}

TEST(HostBufferPool, CountsAndTryAcquire) {
  auto r = HostBufferPool::create(5000, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  HostBufferPool& pool = **r;
  EXPECT_EQ(pool.buffer_bytes(), 8192u);
  EXPECT_EQ(pool.capacity(), 3);
  EXPECT_EQ(pool.bytes_total(), 3u * 8192);
  EXPECT_EQ(pool.regions().size(), 3u);
  EXPECT_EQ(pool.bytes_in_use(), 0u);

  HostBuffer a = pool.acquire();
  auto b = pool.try_acquire();
  auto c = pool.try_acquire();
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(pool.try_acquire().has_value());
  EXPECT_EQ(pool.available(), 0);
  EXPECT_EQ(pool.bytes_in_use(), 3u * 8192);
  EXPECT_EQ(a.size(), 8192u);
  EXPECT_NE(a.data(), b->data());

  pool.release(std::move(*b));
  EXPECT_EQ(pool.available(), 1);
  EXPECT_EQ(pool.bytes_in_use(), 2u * 8192);
  pool.release(std::move(a));
  pool.release(std::move(*c));
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(HostBufferPool, AcquireBlocksUntilRelease) {
  auto r = HostBufferPool::create(4096, 1);
  ASSERT_TRUE(r.ok());
  HostBufferPool& pool = **r;
  HostBuffer held = pool.acquire();
  void* addr = held.data();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    HostBuffer b = pool.acquire();
    got = true;
    EXPECT_EQ(b.data(), addr);
    pool.release(std::move(b));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  pool.release(std::move(held));
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(pool.available(), 1);
}

TEST(HostBufferPool, BadArguments) {
  EXPECT_EQ(HostBufferPool::create(4096, 0).status().code(), ErrorCode::invalid_argument);
  EXPECT_EQ(HostBufferPool::create(0, 2).status().code(), ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace strata
