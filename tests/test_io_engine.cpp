// Storage engines (docs/design.md §4): every test runs on both io_uring and posix, except the
// io_uring submission-failure tests (posix has no submission step). Files live under the build
// tree (a real disk, so O_DIRECT works); faults are injected through IoFaultHook so the engines'
// own resubmission and error paths run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "io/io_engine.h"
#include "io/uring_engine.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

// Page-aligned memory for O_DIRECT, zero-filled.
struct Aligned {
  explicit Aligned(uint64_t n)
      : size(n), data(static_cast<uint8_t*>(std::aligned_alloc(4096, round(n)))) {
    std::memset(data, 0, round(n));
  }
  ~Aligned() { std::free(data); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  static uint64_t round(uint64_t n) { return (n + 4095) / 4096 * 4096; }
  uint64_t size;
  uint8_t* data;
};

void fill(uint8_t* p, uint64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<uint8_t>(s >> 56);
  }
}

bool matches(const uint8_t* p, uint64_t n, uint64_t seed) {
  std::vector<uint8_t> want(n);
  fill(want.data(), n, seed);
  return std::memcmp(p, want.data(), n) == 0;
}

// The file's bytes, read with plain pread (independent of the engines).
std::vector<uint8_t> file_bytes(const std::string& path, uint64_t offset, uint64_t n) {
  std::vector<uint8_t> out(n);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  uint64_t got = 0;
  while (fd >= 0 && got < n) {
    ssize_t r = pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  if (fd >= 0) ::close(fd);
  EXPECT_EQ(got, n) << path;
  return out;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A fault hook driven by a function; counts calls and the largest attempt it saw.
class FnHook : public IoFaultHook {
 public:
  using Fn = std::function<int64_t(const IoRequest&, uint64_t, int, int64_t)>;
  int64_t on_result(const IoRequest& r, uint64_t done, int attempt, int64_t result) override {
    calls++;
    int seen = max_attempt.load();
    while (attempt > seen && !max_attempt.compare_exchange_weak(seen, attempt)) {
    }
    if (!armed.load()) return result;
    return fn(r, done, attempt, result);
  }
  Fn fn;
  std::atomic<bool> armed{false};
  std::atomic<int64_t> calls{0};
  std::atomic<int> max_attempt{0};
};

class IoEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "uring") {
      auto probe = UringEngine::create(IoEngineOptions{});
      if (!probe.ok()) GTEST_SKIP() << "io_uring unavailable here: " << probe.status().to_string();
    }
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = test::make_temp_dir("io_engine_" + name);
  }

  std::unique_ptr<IoEngine> make_engine(IoEngineOptions o = {}) {
    o.kind = *parse_enum<IoEngineKind>("engine", GetParam());
    auto engine = create_io_engine(o, dir_);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    if (!engine.ok()) return nullptr;
    EXPECT_STREQ(engine.value()->name(), GetParam() == "uring" ? "io_uring" : "posix");
    return std::move(engine).value();
  }
  std::unique_ptr<IoFile> open_file(const std::string& name, bool direct) {
    auto f = open_io_file(dir_ + "/" + name, /*create=*/true, direct);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  std::string dir_;
};

Status run(IoEngine& e, IoOp op, const IoFile* f, uint64_t off, void* buf, uint64_t len) {
  auto t = e.submit({op, f, off, buf, len});
  if (!t.ok()) return t.status();
  return e.wait(t.value());
}

TEST_P(IoEngineTest, RoundTripOddSizesAndOffsets) {
  IoEngineOptions o;
  o.block_size = 64 * KiB;
  o.queue_depth = 4;
  auto engine = make_engine(o);
  auto file = open_file("odd.bin", /*direct=*/false);
  ASSERT_TRUE(engine && file);
  const std::pair<uint64_t, uint64_t> cases[] = {
      {0, 1}, {1, 4095}, {4095, 4097}, {12345, 3 * 64 * KiB + 17}, {MiB + 3, MiB + 12345}};
  uint64_t seed = 1;
  for (auto [offset, length] : cases) {
    std::vector<uint8_t> out(length), in(length);
    fill(out.data(), length, ++seed);
    ASSERT_TRUE(run(*engine, IoOp::write, file.get(), offset, out.data(), length).ok());
    ASSERT_TRUE(run(*engine, IoOp::read, file.get(), offset, in.data(), length).ok());
    EXPECT_EQ(in, out) << "offset " << offset << " length " << length;
    EXPECT_EQ(file_bytes(file->path, offset, length), out);
  }
  EXPECT_EQ(engine->in_flight(), 0);
}

TEST_P(IoEngineTest, DirectLargeRequestsAreSplitAndReassembled) {
  for (int workers : {1, 3}) {
    IoEngineOptions o;
    o.block_size = 256 * KiB;  // a 6 MiB request is 24 blocks
    o.queue_depth = 8;
    o.workers = workers;
    auto engine = make_engine(o);
    auto file = open_file("direct.bin", /*direct=*/true);
    ASSERT_TRUE(engine && file);
    const uint64_t n = 6 * MiB + 8 * KiB, offset = MiB;
    Aligned out(n), in(n);
    fill(out.data, n, 7 + workers);
    ASSERT_TRUE(run(*engine, IoOp::write, file.get(), offset, out.data, n).ok());
    ASSERT_TRUE(run(*engine, IoOp::read, file.get(), offset, in.data, n).ok());
    EXPECT_EQ(std::memcmp(in.data, out.data, n), 0) << "workers " << workers;
    EXPECT_TRUE(matches(file_bytes(file->path, offset, n).data(), n, 7 + workers));
  }
}

TEST_P(IoEngineTest, HundredsOfTicketsWaitedInRandomOrder) {
  IoEngineOptions o;
  o.block_size = 8 * KiB;
  o.queue_depth = 8;
  auto engine = make_engine(o);
  auto file = open_file("many.bin", /*direct=*/true);
  ASSERT_TRUE(engine && file);
  constexpr int kRequests = 500;
  const uint64_t region = 20 * KiB;
  Aligned out(kRequests * region), in(kRequests * region);
  std::vector<uint64_t> length(kRequests);
  for (int i = 0; i < kRequests; i++) {
    length[i] = 4 * KiB * (1 + i % 5);  // 1 to 3 blocks
    fill(out.data + i * region, length[i], 100 + i);
  }
  std::mt19937 rng(42);
  for (IoOp op : {IoOp::write, IoOp::read}) {
    uint8_t* base = op == IoOp::write ? out.data : in.data;
    std::vector<std::pair<Ticket, int>> tickets;
    for (int i = 0; i < kRequests; i++) {
      auto t = engine->submit({op, file.get(), i * region, base + i * region, length[i]});
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      tickets.push_back({t.value(), i});
    }
    std::shuffle(tickets.begin(), tickets.end(), rng);
    for (auto [t, i] : tickets) ASSERT_TRUE(engine->wait(t).ok()) << "request " << i;
  }
  for (int i = 0; i < kRequests; i++) {
    ASSERT_TRUE(matches(in.data + i * region, length[i], 100 + i)) << "request " << i;
  }
  EXPECT_EQ(engine->in_flight(), 0);
}

TEST_P(IoEngineTest, PollWaitAllAndTicketConsumption) {
  auto hook = std::make_shared<FnHook>();
  hook->fn = [](const IoRequest&, uint64_t, int, int64_t result) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return result;
  };
  IoEngineOptions o;
  o.fault_hook = hook;
  auto engine = make_engine(o);
  auto file = open_file("poll.bin", /*direct=*/false);
  ASSERT_TRUE(engine && file);
  std::vector<uint8_t> buf(8192, 1);

  hook->armed = true;  // the first request takes 100 ms: the poll right after sees it running
  auto t = engine->submit({IoOp::write, file.get(), 0, buf.data(), buf.size()});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(engine->poll(t.value()).has_value());
  EXPECT_EQ(engine->in_flight(), 1);
  std::optional<Status> s;
  while (!(s = engine->poll(t.value()))) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(s->ok()) << s->to_string();
  hook->armed = false;
  // A consumed ticket, 0, and one never issued are all refused.
  for (Ticket bad : {t.value(), Ticket{0}, Ticket{123456789}}) {
    EXPECT_EQ(engine->wait(bad).code(), ErrorCode::invalid_argument) << bad;
    auto p = engine->poll(bad);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->code(), ErrorCode::invalid_argument) << bad;
  }

  EXPECT_TRUE(engine->wait_all().ok());  // nothing outstanding
  std::vector<Ticket> many;
  std::vector<uint8_t> into(10 * 4096);  // one region per concurrent read
  for (int i = 0; i < 10; i++) {
    auto ti = engine->submit({IoOp::read, file.get(), 0, &into[i * 4096], 4096});
    ASSERT_TRUE(ti.ok());
    many.push_back(ti.value());
  }
  EXPECT_TRUE(engine->wait_all().ok());
  EXPECT_EQ(engine->in_flight(), 0);
  for (Ticket ti : many) EXPECT_EQ(engine->wait(ti).code(), ErrorCode::invalid_argument);
}

TEST_P(IoEngineTest, MisalignedDirectRequestsAreRefusedNamingTheField) {
  auto engine = make_engine();
  auto file = open_file("align.bin", /*direct=*/true);
  ASSERT_TRUE(engine && file);
  Aligned buf(64 * KiB);
  struct Case {
    void* buffer;
    uint64_t offset, length;
    const char* field;
  };
  const Case cases[] = {{buf.data + 512, 0, 4096, "buffer"},
                        {buf.data, 512, 4096, "offset"},
                        {buf.data, 4096, 1000, "length"},
                        {nullptr, 0, 4096, "buffer"},
                        {buf.data, 0, 0, "length"}};
  for (const Case& c : cases) {
    for (IoOp op : {IoOp::read, IoOp::write}) {
      auto t = engine->submit({op, file.get(), c.offset, c.buffer, c.length});
      ASSERT_FALSE(t.ok()) << c.field;
      EXPECT_EQ(t.status().code(), ErrorCode::invalid_argument);
      EXPECT_TRUE(contains(t.status().message(), c.field)) << t.status().message();
    }
  }
  EXPECT_EQ(engine->submit({IoOp::read, nullptr, 0, buf.data, 4096}).status().code(),
            ErrorCode::invalid_argument);
  EXPECT_EQ(engine->in_flight(), 0);
  EXPECT_TRUE(engine->wait_all().ok());
}

// One injected fault on the second block of region 3 of 8, for writes and then reads. The faulty
// request gets `expect`; the other requests, the next request, and every byte on disk are fine.
void check_fault(IoEngine& engine, FnHook& hook, const IoFile& file, ErrorCode expect) {
  constexpr int kRegions = 8;
  const uint64_t region = 64 * KiB, target = 3 * region + 16 * KiB;  // block_size 16 KiB
  Aligned out(kRegions * region), in(kRegions * region);
  for (int i = 0; i < kRegions; i++) fill(out.data + i * region, region, 500 + i);
  auto submit_all = [&](IoOp op, uint8_t* base) {
    std::vector<Ticket> tickets;
    for (int i = 0; i < kRegions; i++) {
      auto tk = engine.submit({op, &file, i * region, base + i * region, region});
      EXPECT_TRUE(tk.ok());
      tickets.push_back(tk.ok() ? tk.value() : 0);
    }
    return tickets;
  };
  auto fn = hook.fn;
  hook.fn = [fn, target](const IoRequest& r, uint64_t done, int attempt, int64_t result) {
    return r.offset == target ? fn(r, done, attempt, result) : result;
  };
  for (IoOp op : {IoOp::write, IoOp::read}) {
    SCOPED_TRACE(io_op_name(op));
    hook.armed = true;
    auto tickets = submit_all(op, op == IoOp::write ? out.data : in.data);
    for (int i = 0; i < kRegions; i++) {
      Status s = engine.wait(tickets[i]);
      if (i != 3 || expect == ErrorCode::ok) {
        EXPECT_TRUE(s.ok()) << "region " << i << ": " << s.to_string();
        continue;
      }
      EXPECT_EQ(s.code(), expect) << s.to_string();
      EXPECT_TRUE(contains(s.message(), file.path)) << s.message();
      EXPECT_TRUE(contains(s.message(), "offset " + std::to_string(target))) << s.message();
    }
    hook.armed = false;
    // The next request on the same engine runs normally.
    uint8_t* base = op == IoOp::write ? out.data : in.data;
    EXPECT_TRUE(run(engine, op, &file, 3 * region, base + 3 * region, region).ok());
    // Nothing else was touched: every region holds (or was read as) its own bytes.
    for (int i = 0; i < kRegions; i++) {
      if (op == IoOp::write) {
        EXPECT_TRUE(matches(file_bytes(file.path, i * region, region).data(), region, 500 + i))
            << "region " << i;
      } else {
        EXPECT_TRUE(matches(in.data + i * region, region, 500 + i)) << "region " << i;
      }
    }
  }
}

class FaultTest : public IoEngineTest {
 protected:
  void check(FnHook::Fn fn, ErrorCode expect) {
    auto hook = std::make_shared<FnHook>();
    hook->fn = std::move(fn);
    IoEngineOptions o;
    o.block_size = 16 * KiB;
    o.queue_depth = 8;
    o.fault_hook = hook;
    auto engine = make_engine(o);
    auto file = open_file("fault.bin", /*direct=*/true);
    ASSERT_TRUE(engine && file);
    check_fault(*engine, *hook, *file, expect);
    max_attempt = hook->max_attempt;
  }
  int max_attempt = 0;
};

TEST_P(FaultTest, EioFailsOnlyThatRequest) {
  check([](const IoRequest&, uint64_t, int attempt, int64_t r) { return attempt == 0 ? -EIO : r; },
        ErrorCode::io_error);
}

TEST_P(FaultTest, EnospcIsNoSpace) {
  check([](const IoRequest&, uint64_t, int, int64_t) -> int64_t { return -ENOSPC; },
        ErrorCode::no_space);
}

TEST_P(FaultTest, ShortTransferIsResubmittedForTheRemainder) {
  check(
      [](const IoRequest& r, uint64_t done, int, int64_t result) -> int64_t {
        // Claim half of what was asked until 4 KiB remain: 16 KiB takes two resubmissions.
        const int64_t asked = static_cast<int64_t>(r.length - done);
        return result == asked && asked > 4096 ? asked / 2 : result;
      },
      ErrorCode::ok);
  EXPECT_GE(max_attempt, 2);
}

TEST_P(FaultTest, EintrAndEagainAreResubmitted) {
  check(
      [](const IoRequest&, uint64_t, int attempt, int64_t r) -> int64_t {
        return attempt == 0 ? -EINTR : attempt == 1 ? -EAGAIN : r;
      },
      ErrorCode::ok);
  EXPECT_GE(max_attempt, 2);
}

TEST_P(FaultTest, AddedLatencyIsHarmless) {
  check(
      [](const IoRequest&, uint64_t, int, int64_t r) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return r;
      },
      ErrorCode::ok);
}

TEST_P(IoEngineTest, WaitAllReportsTheEarliestFailure) {
  auto hook = std::make_shared<FnHook>();
  hook->fn = [](const IoRequest& r, uint64_t, int, int64_t result) -> int64_t {
    return r.offset == 5 * 4096 || r.offset == 2 * 4096 ? -EIO : result;
  };
  hook->armed = true;
  IoEngineOptions o;
  o.fault_hook = hook;
  auto engine = make_engine(o);
  auto file = open_file("waitall.bin", /*direct=*/false);
  ASSERT_TRUE(engine && file);
  std::vector<uint8_t> buf(8 * 4096, 3);
  for (int i = 7; i >= 0; i--) {  // region 5 is submitted before region 2
    ASSERT_TRUE(engine->submit({IoOp::write, file.get(), i * 4096ull, &buf[i * 4096], 4096}).ok());
  }
  Status s = engine->wait_all();
  EXPECT_EQ(s.code(), ErrorCode::io_error);
  EXPECT_TRUE(contains(s.message(), "offset " + std::to_string(5 * 4096))) << s.message();
  EXPECT_EQ(engine->in_flight(), 0);
}

TEST_P(IoEngineTest, ReadPastEndOfFileIsAnError) {
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  auto small = open_file("short.bin", /*direct=*/false);
  ASSERT_TRUE(small);
  std::vector<uint8_t> bytes(100, 9), in(8192);
  ASSERT_TRUE(run(*engine, IoOp::write, small.get(), 0, bytes.data(), bytes.size()).ok());
  for (uint64_t offset : {0ull, 4096ull}) {  // partly past the end, wholly past it
    Status s = run(*engine, IoOp::read, small.get(), offset, in.data(), 4096);
    EXPECT_EQ(s.code(), ErrorCode::io_error);
    EXPECT_TRUE(contains(s.message(), "end of file") && contains(s.message(), small->path))
        << s.message();
  }
  auto direct = open_file("short_direct.bin", /*direct=*/true);
  ASSERT_TRUE(direct);
  Aligned block(8192);
  ASSERT_TRUE(run(*engine, IoOp::write, direct.get(), 0, block.data, 4096).ok());
  Status s = run(*engine, IoOp::read, direct.get(), 0, block.data, 8192);
  EXPECT_EQ(s.code(), ErrorCode::io_error);
  EXPECT_TRUE(contains(s.message(), "end of file")) << s.message();
  EXPECT_TRUE(run(*engine, IoOp::read, direct.get(), 0, block.data, 4096).ok());
}

TEST_P(IoEngineTest, RealEnospcOnSmallTmpfs) {
  const std::string mnt = dir_ + "/tmpfs";
  std::filesystem::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs at " << mnt << ": " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { EXPECT_EQ(umount2(path.c_str(), MNT_DETACH), 0) << std::strerror(errno); }
  } unmount{mnt};
  IoEngineOptions o;
  o.block_size = 256 * KiB;
  auto engine = make_engine(o);
  auto file = open_io_file(mnt + "/full.bin", /*create=*/true, /*direct=*/false);
  ASSERT_TRUE(engine && file.ok()) << file.status().to_string();
  std::vector<uint8_t> bytes(2 * MiB, 1);
  Status s = run(*engine, IoOp::write, file->get(), 0, bytes.data(), bytes.size());
  EXPECT_EQ(s.code(), ErrorCode::no_space) << s.to_string();
  EXPECT_TRUE(contains(s.message(), mnt + "/full.bin")) << s.message();
}

TEST_P(IoEngineTest, RegisteredBuffersCarryTransfers) {
  IoEngineOptions o;
  o.block_size = 256 * KiB;
  o.workers = 2;
  auto engine = make_engine(o);
  auto file = open_file("fixed.bin", /*direct=*/true);
  ASSERT_TRUE(engine && file);
  Aligned reg(2 * MiB), other(MiB);
  ASSERT_TRUE(engine->register_buffers({{reg.data, reg.size}}).ok());
  fill(reg.data, MiB, 31);
  fill(other.data, MiB, 32);
  ASSERT_TRUE(run(*engine, IoOp::write, file.get(), 0, reg.data, MiB).ok());
  ASSERT_TRUE(run(*engine, IoOp::write, file.get(), MiB, other.data, MiB).ok());
  ASSERT_TRUE(run(*engine, IoOp::read, file.get(), MiB, reg.data + MiB, MiB).ok());
  ASSERT_TRUE(run(*engine, IoOp::read, file.get(), 0, other.data, MiB).ok());
  EXPECT_TRUE(matches(other.data, MiB, 31));
  EXPECT_TRUE(matches(reg.data + MiB, MiB, 32));
  if (auto* uring = dynamic_cast<UringEngine*>(engine.get())) {
    EXPECT_EQ(uring->fixed_buffer_transfers(), 8);  // 1 MiB in and out of `reg`, 256 KiB blocks
  }
  EXPECT_TRUE(engine->register_buffers({}).ok());
}

TEST_P(IoEngineTest, ConcurrentSubmittersAndDestructionWithRequestsOutstanding) {
  IoEngineOptions o;
  o.block_size = 64 * KiB;
  o.workers = 2;
  o.queue_depth = 4;
  auto engine = make_engine(o);
  auto file = open_file("threads.bin", /*direct=*/true);
  ASSERT_TRUE(engine && file);
  constexpr int kThreads = 4, kRounds = 30;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Aligned out(256 * KiB), in(256 * KiB);
      for (int r = 0; r < kRounds; r++) {
        fill(out.data, out.size, t * 1000 + r);
        const uint64_t off = t * 256 * KiB;
        if (!run(*engine, IoOp::write, file.get(), off, out.data, out.size).ok() ||
            !run(*engine, IoOp::read, file.get(), off, in.data, in.size).ok() ||
            std::memcmp(in.data, out.data, in.size) != 0) {
          failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  // Requests never waited: the destructor lets them finish before the buffer goes away.
  Aligned last(2 * MiB);
  fill(last.data, last.size, 77);
  for (int i = 0; i < 8; i++) {
    ASSERT_TRUE(engine
                    ->submit({IoOp::write, file.get(), MiB + i * 256 * KiB,
                              last.data + i * 256 * KiB, 256 * KiB})
                    .ok());
  }
  engine.reset();
  EXPECT_TRUE(matches(file_bytes(file->path, MiB, 2 * MiB).data(), 2 * MiB, 77));
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest, ::testing::Values("uring", "posix"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Engines, FaultTest, ::testing::Values("uring", "posix"),
                         [](const auto& info) { return info.param; });

// Note [A failed submission breaks the io_uring engine]. io_uring only: the posix engine has no
// submission step. The failure is injected through IoFaultHook::on_uring_submit, so the
// engine's real recovery path runs; every wait is bounded, so a hang fails the test instead of
// stalling it.
class SubmitFaultHook : public IoFaultHook {
 public:
  int64_t on_result(const IoRequest&, uint64_t, int, int64_t result) override { return result; }
  int on_uring_submit(uint64_t) override {
    if (submissions.fetch_add(1) != fail_at.load()) return 0;
    // Holding the failure back lets a test be blocked in wait() when it happens.
    while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return err;
  }
  // The next submission that carries blocks fails (call with the ring idle).
  void fail_next() { fail_at = submissions.load(); }
  bool fired() const { return submissions.load() > fail_at.load() && fail_at.load() >= 0; }

  int err = EBADF;
  std::atomic<int64_t> fail_at{-1};  // which block-carrying submission fails, from 0; -1: none
  std::atomic<int64_t> submissions{0};
  std::atomic<bool> hold{false};
};

// The ticket's status, or nullopt if it has not finished within `limit` (a hang).
std::optional<Status> finish_within(IoEngine& engine, Ticket ticket,
                                    std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto status = engine.poll(ticket)) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

class UringSubmitFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto probe = UringEngine::create(IoEngineOptions{});
    if (!probe.ok()) GTEST_SKIP() << "io_uring unavailable here: " << probe.status().to_string();
    dir_ = test::make_temp_dir(std::string("io_engine_submit_") +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  std::unique_ptr<UringEngine> make_engine(int workers, int queue_depth, uint64_t block_size) {
    IoEngineOptions o;
    o.workers = workers;
    o.queue_depth = queue_depth;
    o.block_size = block_size;
    o.fault_hook = hook_;
    auto engine = UringEngine::create(o);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    return engine.ok() ? std::move(engine).value() : nullptr;
  }
  std::unique_ptr<IoFile> open_file(const std::string& name) {
    auto f = open_io_file(dir_ + "/" + name, /*create=*/true, /*direct=*/true);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(f).value() : nullptr;
  }
  // What every request failed by the injected submission error says.
  std::string submission_error() const {
    return "io_uring submission failed on ring 0: " + std::string(std::strerror(hook_->err)) +
           " (errno " + std::to_string(hook_->err) + ")";
  }

  std::shared_ptr<SubmitFaultHook> hook_ = std::make_shared<SubmitFaultHook>();
  std::string dir_;
};

TEST_F(UringSubmitFailureTest, FailedSubmissionFailsItsRequestAndBreaksTheEngine) {
  Aligned before(64 * KiB), after(64 * KiB), back(64 * KiB);  // outlive the engine
  auto engine = make_engine(/*workers=*/1, /*queue_depth=*/4, /*block_size=*/16 * KiB);
  auto file = open_file("broken.bin");
  ASSERT_TRUE(engine && file);
  fill(before.data, before.size, 1);
  fill(after.data, after.size, 2);
  ASSERT_TRUE(run(*engine, IoOp::write, file.get(), 0, before.data, before.size).ok());

  hook_->hold = true;
  hook_->fail_next();
  auto ticket = engine->submit({IoOp::write, file.get(), 64 * KiB, after.data, after.size});
  ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();  // it failed after submit() returned
  // A waiter already blocked in wait() when the submission fails is woken with the error.
  std::promise<Status> waited;
  std::future<Status> wait_result = waited.get_future();
  std::thread waiter([&] { waited.set_value(engine->wait(ticket.value())); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it block (either way is valid)
  hook_->hold = false;
  if (wait_result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    waiter.detach();  // still blocked: joining would hang the test binary
    FAIL() << "the waiter of the failed submission was never woken";
  }
  waiter.join();
  const Status failed = wait_result.get();
  EXPECT_TRUE(hook_->fired());
  EXPECT_EQ(failed.code(), ErrorCode::io_error) << failed.to_string();
  EXPECT_TRUE(contains(failed.message(), submission_error())) << failed.message();
  EXPECT_TRUE(contains(failed.message(), "write " + file->path)) << failed.message();
  EXPECT_EQ(failed.message().find('\n'), std::string::npos) << failed.message();
  EXPECT_EQ(engine->in_flight(), 0);

  // Broken: later requests are refused at once, naming the first failure.
  auto refused = engine->submit({IoOp::read, file.get(), 0, back.data, back.size});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::io_error);
  EXPECT_TRUE(contains(refused.status().message(), "io_uring engine is broken"))
      << refused.status().message();
  EXPECT_TRUE(contains(refused.status().message(), submission_error()))
      << refused.status().message();
  Status registration = engine->register_buffers({{back.data, back.size}});
  EXPECT_EQ(registration.code(), ErrorCode::io_error) << registration.to_string();
  EXPECT_TRUE(contains(registration.message(), "broken")) << registration.message();
  EXPECT_TRUE(engine->wait_all().ok());  // nothing left outstanding
  EXPECT_EQ(engine->in_flight(), 0);

  // What finished before the failure is on disk, and nothing of the failed write reached it.
  EXPECT_TRUE(matches(file_bytes(file->path, 0, before.size).data(), before.size, 1));
  EXPECT_EQ(std::filesystem::file_size(file->path), before.size);
  engine.reset();  // the ring thread has stopped submitting; destruction must not hang
}

TEST_F(UringSubmitFailureTest, BlocksTheKernelHoldsFinishAndQueuedBlocksFail) {
  // Depth 2: a pipe read parks one entry in the kernel until the pipe has data, leaving one
  // entry for the 4 blocks of the request whose submission fails (1 prepared, 3 queued).
  Aligned piped(4 * KiB), held(4 * KiB), probe(4 * KiB), queued(16 * KiB);  // outlive the engine
  auto engine = make_engine(/*workers=*/1, /*queue_depth=*/2, /*block_size=*/4 * KiB);
  auto file = open_file("held.bin");
  ASSERT_TRUE(engine && file);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0) << std::strerror(errno);
  // Declared after the engine, so on an early return the write end closes first: the parked
  // read then ends (end of file) and the engine's destructor does not wait on it forever.
  IoFile pipe_read_end(fds[0], "pipe", /*direct=*/false);
  IoFile pipe_write_end(fds[1], "pipe (write end)", /*direct=*/false);
  fill(piped.data, piped.size, 3);
  auto parked = engine->submit({IoOp::read, &pipe_read_end, 0, held.data, held.size});
  ASSERT_TRUE(parked.ok()) << parked.status().to_string();
  // The ring submits in order, so once this later request is done the pipe read is in the kernel.
  ASSERT_TRUE(run(*engine, IoOp::write, file.get(), 0, probe.data, probe.size).ok());
  ASSERT_FALSE(engine->poll(parked.value()).has_value()) << "the pipe read finished with no data";

  hook_->fail_next();
  auto doomed = engine->submit({IoOp::write, file.get(), 4 * KiB, queued.data, queued.size});
  ASSERT_TRUE(doomed.ok()) << doomed.status().to_string();
  const std::optional<Status> failed = finish_within(*engine, doomed.value());
  ASSERT_TRUE(failed.has_value()) << "queued blocks of the failed submission were never failed";
  EXPECT_TRUE(hook_->fired());
  EXPECT_EQ(failed->code(), ErrorCode::io_error) << failed->to_string();
  EXPECT_TRUE(contains(failed->message(), submission_error())) << failed->message();
  EXPECT_FALSE(engine->submit({IoOp::read, file.get(), 0, probe.data, probe.size}).ok());

  // The kernel still holds the pipe read's buffer: it is not failed early, and it finishes
  // normally once data arrives.
  EXPECT_FALSE(engine->poll(parked.value()).has_value());
  EXPECT_EQ(engine->in_flight(), 1);
  // One write of at most PIPE_BUF bytes is atomic: the read gets all of it at once.
  ASSERT_EQ(write(pipe_write_end.fd, piped.data, piped.size), static_cast<ssize_t>(piped.size));
  const std::optional<Status> read = finish_within(*engine, parked.value());
  ASSERT_TRUE(read.has_value()) << "the request held by the kernel never finished";
  EXPECT_TRUE(read->ok()) << read->to_string();
  EXPECT_TRUE(matches(held.data, held.size, 3));
  EXPECT_EQ(engine->in_flight(), 0);
}

TEST_F(UringSubmitFailureTest, ConcurrentSubmittersAcrossRingsNeverHang) {
  // Two rings, requests striped over both: one ring breaks mid-stream while four threads submit
  // and wait. Every request must succeed, be refused at submit, or fail with an io_error.
  Aligned last(4 * KiB);
  auto engine = make_engine(/*workers=*/2, /*queue_depth=*/4, /*block_size=*/16 * KiB);
  auto file = open_file("threads.bin");
  ASSERT_TRUE(engine && file);
  hook_->fail_at = 40;
  constexpr int kThreads = 4, kRounds = 40;
  std::atomic<int> succeeded{0}, refused{0}, failed{0}, hung{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      Aligned buffer(64 * KiB);
      fill(buffer.data, buffer.size, t);
      for (int r = 0; r < kRounds; r++) {
        auto ticket =
            engine->submit({IoOp::write, file.get(), t * 64 * KiB, buffer.data, buffer.size});
        if (!ticket.ok()) {
          refused++;
          if (!contains(ticket.status().message(), "io_uring engine is broken")) wrong++;
          continue;
        }
        const std::optional<Status> status = finish_within(*engine, ticket.value());
        if (!status.has_value()) {
          hung++;
          return;
        }
        if (status->ok()) {
          succeeded++;
        } else {
          failed++;
          if (status->code() != ErrorCode::io_error ||
              !contains(status->message(), "io_uring submission failed on ring")) {
            wrong++;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(hung.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(hook_->fired());
  EXPECT_GT(succeeded.load(), 0);
  EXPECT_GT(failed.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_EQ(succeeded + refused + failed, kThreads * kRounds);
  EXPECT_EQ(engine->in_flight(), 0);
  auto after = engine->submit({IoOp::write, file.get(), 0, last.data, last.size});
  ASSERT_FALSE(after.ok());
  EXPECT_TRUE(contains(after.status().message(), "io_uring engine is broken"))
      << after.status().message();
}

TEST(IoEngineCreate, AutoKindsAndOptions) {
  const std::string dir = test::make_temp_dir("io_engine_create");
  IoEngineOptions o;
  auto automatic = create_io_engine(o, dir);
  ASSERT_TRUE(automatic.ok()) << automatic.status().to_string();
  const bool uring_works = UringEngine::create(IoEngineOptions{}).ok();
  EXPECT_STREQ(automatic.value()->name(), uring_works ? "io_uring" : "posix");
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // the probe file is gone

  EXPECT_FALSE(create_io_engine(o, dir + "/missing").ok());
  for (auto bad : {std::pair{"block", 1000}, {"depth", 0}, {"workers", 0}}) {
    IoEngineOptions b;
    b.kind = IoEngineKind::posix;
    if (std::string(bad.first) == "block") b.block_size = static_cast<uint64_t>(bad.second);
    if (std::string(bad.first) == "depth") b.queue_depth = bad.second;
    if (std::string(bad.first) == "workers") b.workers = bad.second;
    EXPECT_EQ(create_io_engine(b, dir).status().code(), ErrorCode::invalid_argument) << bad.first;
  }
  EXPECT_EQ(open_io_file(dir + "/nope.bin", /*create=*/false, false).status().code(),
            ErrorCode::not_found);
}

TEST(IoFileTest, MoveOnlyAndClosesOnDestruction) {
  const std::string dir = test::make_temp_dir("io_file");
  auto f = open_io_file(dir + "/f.bin", /*create=*/true, /*direct=*/false);
  ASSERT_TRUE(f.ok());
  const int fd = f.value()->fd;
  IoFile moved = std::move(*f.value());
  EXPECT_EQ(f.value()->fd, -1);
  EXPECT_EQ(moved.fd, fd);
  close_io_file(moved);
  EXPECT_EQ(moved.fd, -1);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // really closed
  close_io_file(moved);               // idempotent
}

}  // namespace
}  // namespace strata
