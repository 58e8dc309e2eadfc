// The rate limiter: data arrives intact through it, each direction is forwarded in submission
// order, a throttled direction never holds back the other, throttling costs no CPU, and the rate
// is a lower bound on time (only lower bounds: a loaded CI box may always be slower).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "io/host_buffer.h"
#include "io/rate_limited_engine.h"
#include "sync_io_engine.h"
#include "test_util.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double cpu_seconds() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Records the order in which requests reach it, then delegates.
class RecordingEngine final : public IoEngine {
 public:
  explicit RecordingEngine(std::unique_ptr<IoEngine> inner) : inner_(std::move(inner)) {}
  const char* name() const override { return inner_->name(); }
  Result<Ticket> submit(const IoRequest& r) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      (r.op == IoOp::read ? reads_ : writes_).push_back(r.offset);
    }
    return inner_->submit(r);
  }
  Status wait(Ticket t) override { return inner_->wait(t); }
  std::optional<Status> poll(Ticket t) override { return inner_->poll(t); }
  Status wait_all() override { return inner_->wait_all(); }
  int64_t in_flight() const override { return inner_->in_flight(); }
  std::vector<uint64_t> reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }
  std::vector<uint64_t> writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  std::unique_ptr<IoEngine> inner_;
  std::mutex mu_;
  std::vector<uint64_t> reads_, writes_;
};

// A directory of its own for the running test: ctest runs each test as its own process, several
// at once, so tests must not share (and wipe) one directory.
std::string test_dir(const std::string& tag) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return test::make_temp_dir(tag + "_" + name);
}

// The inner engines: the test's synchronous one, and the real ones where they can run here.
Result<std::unique_ptr<IoEngine>> make_inner(const std::string& kind) {
  if (kind == "sync") return std::unique_ptr<IoEngine>(new test::SyncIoEngine());
  IoEngineOptions o;
  STRATA_ASSIGN_OR_RETURN(o.kind, parse_enum<IoEngineKind>("engine", kind));
  o.queue_depth = 8;
  o.block_size = 256 * 1024;
  return create_io_engine(o, test_dir("rate_probe"));
}

class RateLimitedTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto inner = make_inner(GetParam());
    if (!inner.ok())
      GTEST_SKIP() << GetParam() << " engine unavailable: " << inner.status().message();
    inner_ = std::move(inner).value();
    dir_ = test_dir("rate");
    auto f = open_io_file(dir_ + "/data", true, /*direct=*/true);
    if (!f.ok()) f = open_io_file(dir_ + "/data", true, /*direct=*/false);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    file_ = std::move(f).value();
  }
  std::unique_ptr<IoEngine> take_inner() { return std::move(inner_); }

  std::unique_ptr<IoEngine> inner_;
  std::string dir_;
  std::unique_ptr<IoFile> file_;
};

void fill(HostBuffer& b, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(b.data());
  for (uint64_t i = 0; i < b.size(); i++) p[i] = static_cast<uint8_t>((i * 131 + seed * 7) >> 3);
}

TEST_P(RateLimitedTest, RoundTripAndPerDirectionOrder) {
  auto rec_owned = std::make_unique<RecordingEngine>(take_inner());
  RecordingEngine* rec = rec_owned.get();
  RateLimitedEngine eng(std::move(rec_owned), RateLimits{64 * kMiB, 64 * kMiB, 0});
  const int n = 16;
  const uint64_t piece = 64 * 1024;
  auto src = HostBuffer::allocate(n * piece);
  auto dst = HostBuffer::allocate(n * piece);
  ASSERT_TRUE(src.ok() && dst.ok());
  fill(*src, 1);
  // Writes in a scrambled offset order; their order at the inner engine must be the same.
  std::vector<uint64_t> order;
  for (int i = 0; i < n; i++) order.push_back(static_cast<uint64_t>((i * 7) % n) * piece);
  std::vector<Ticket> tickets;
  for (uint64_t off : order) {
    IoRequest r{IoOp::write, file_.get(), off, static_cast<char*>(src->data()) + off, piece};
    auto t = eng.submit(r);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tickets.push_back(*t);
  }
  for (Ticket t : tickets) ASSERT_TRUE(eng.wait(t).ok());
  EXPECT_EQ(rec->writes(), order);

  std::vector<uint64_t> rorder(order.rbegin(), order.rend());
  for (uint64_t off : rorder) {
    IoRequest r{IoOp::read, file_.get(), off, static_cast<char*>(dst->data()) + off, piece};
    ASSERT_TRUE(eng.submit(r).ok());
  }
  EXPECT_TRUE(eng.wait_all().ok());
  EXPECT_EQ(eng.in_flight(), 0);
  EXPECT_EQ(rec->reads(), rorder);
  EXPECT_EQ(std::memcmp(src->data(), dst->data(), n * piece), 0);
}

TEST_P(RateLimitedTest, RateIsALowerBoundOnTime) {
  // 4 MiB at 16 MiB/s: at least (4 MiB - burst) / rate = 0.25 s - 16 ms; the bound is 0.2 s.
  RateLimitedEngine eng(take_inner(), RateLimits{16 * kMiB, 16 * kMiB, 0});
  auto buf = HostBuffer::allocate(4 * kMiB);
  ASSERT_TRUE(buf.ok());
  fill(*buf, 2);
  auto t0 = Clock::now();
  IoRequest w{IoOp::write, file_.get(), 0, buf->data(), 4 * kMiB};
  auto t = eng.submit(w);  // one request larger than the burst
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(eng.wait(*t).ok());
  EXPECT_GE(seconds_since(t0), 0.2);

  t0 = Clock::now();
  for (uint64_t off = 0; off < 4 * kMiB; off += kMiB) {  // four requests of 1 MiB
    IoRequest r{IoOp::read, file_.get(), off, static_cast<char*>(buf->data()) + off, kMiB};
    ASSERT_TRUE(eng.submit(r).ok());
  }
  ASSERT_TRUE(eng.wait_all().ok());
  EXPECT_GE(seconds_since(t0), 0.2);
}

TEST_P(RateLimitedTest, ThrottledWritesDoNotHoldBackUnlimitedReads) {
  // Writes at 1 MiB/s with a 4 KiB burst: a 512 KiB write waits ~0.5 s in the limiter.
  RateLimitedEngine eng(take_inner(), RateLimits{0, kMiB, 4096});
  auto buf = HostBuffer::allocate(kMiB);
  ASSERT_TRUE(buf.ok());
  IoRequest w0{IoOp::write, file_.get(), 0, buf->data(), 4096};
  ASSERT_TRUE(eng.submit(w0).ok());  // uses the burst
  ASSERT_TRUE(eng.wait_all().ok());
  IoRequest w{IoOp::write, file_.get(), 0, buf->data(), 512 * 1024};
  auto tw = eng.submit(w);
  ASSERT_TRUE(tw.ok());
  IoRequest r{IoOp::read, file_.get(), 0, static_cast<char*>(buf->data()) + 512 * 1024, 4096};
  auto tr = eng.submit(r);
  ASSERT_TRUE(tr.ok());
  ASSERT_TRUE(eng.wait(*tr).ok());
  EXPECT_FALSE(eng.poll(*tw).has_value());  // still waiting for tokens
  EXPECT_GE(eng.in_flight(), 1);
  double cpu0 = cpu_seconds();
  auto t0 = Clock::now();
  ASSERT_TRUE(eng.wait(*tw).ok());
  double wall = seconds_since(t0), cpu = cpu_seconds() - cpu0;
  EXPECT_GE(wall, 0.2);
  EXPECT_LT(cpu, 0.5 * wall) << "the limiter must sleep, not spin, while a request waits";
}

TEST_P(RateLimitedTest, RefusalsAndTickets) {
  RateLimitedEngine eng(take_inner(), RateLimits{kMiB, kMiB, 0});
  auto buf = HostBuffer::allocate(8192);
  ASSERT_TRUE(buf.ok());
  IoRequest null_buf{IoOp::write, file_.get(), 0, nullptr, 4096};
  EXPECT_EQ(eng.submit(null_buf).status().code(), ErrorCode::invalid_argument);
  IoRequest empty{IoOp::write, file_.get(), 0, buf->data(), 0};
  EXPECT_EQ(eng.submit(empty).status().code(), ErrorCode::invalid_argument);
  if (file_->direct) {
    IoRequest odd{IoOp::read, file_.get(), 100, buf->data(), 4096};
    auto s = eng.submit(odd);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("offset"), std::string::npos) << s.status().message();
  }
  EXPECT_EQ(eng.wait(12345).code(), ErrorCode::invalid_argument);
  IoRequest w{IoOp::write, file_.get(), 0, buf->data(), 4096};
  auto t = eng.submit(w);
  ASSERT_TRUE(t.ok());
  std::optional<Status> s;
  while (!(s = eng.poll(*t)).has_value()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(s->ok());
  EXPECT_EQ(eng.wait(*t).code(), ErrorCode::invalid_argument);  // consumed already
}

TEST_P(RateLimitedTest, InnerErrorsReachTheTicket) {
  // Reading past the end of an empty buffered file: every engine reports it as an error.
  auto f = open_io_file(dir_ + "/empty", true, /*direct=*/false);
  ASSERT_TRUE(f.ok());
  RateLimitedEngine eng(take_inner(), RateLimits{kMiB, 0, 0});
  auto buf = HostBuffer::allocate(4096);
  ASSERT_TRUE(buf.ok());
  IoRequest r{IoOp::read, f->get(), 0, buf->data(), 4096};
  auto t = eng.submit(r);
  ASSERT_TRUE(t.ok());
  Status s = eng.wait(*t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.to_string();
}

TEST_P(RateLimitedTest, DestructorFinishesQueuedRequests) {
  auto buf = HostBuffer::allocate(256 * 1024);
  ASSERT_TRUE(buf.ok());
  fill(*buf, 3);
  {
    RateLimitedEngine eng(take_inner(), RateLimits{0, 64 * 1024, 4096});
    IoRequest w{IoOp::write, file_.get(), 0, buf->data(), buf->size()};
    ASSERT_TRUE(eng.submit(w).ok());  // ~4 s at this rate; never waited
  }
  auto check = HostBuffer::allocate(256 * 1024);
  ASSERT_TRUE(check.ok());
  ASSERT_EQ(pread(file_->fd, check->data(), check->size(), 0), static_cast<ssize_t>(check->size()));
  EXPECT_EQ(std::memcmp(check->data(), buf->data(), buf->size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, RateLimitedTest, ::testing::Values("sync", "posix", "uring"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace strata
