// Storage engines (DESIGN §4): every test runs against both io_uring and posix. Files live under
// the build tree (a real disk, so O_DIRECT works); faults are injected through IoFaultHook so the
// engines' own resubmission and error paths run.
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
#include <memory>
#include <random>
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
