// The config's io section reaches the engine: fault injection and rate limits set in the config
// act on real requests.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "io/configured_engine.h"
#include "test_util.h"

namespace strata {
namespace {

struct AlignedBlock {
  void* p = std::aligned_alloc(kDirectIoAlignment, 1 << 20);
  ~AlignedBlock() { std::free(p); }
};

TEST(ConfiguredEngine, FaultSpecFromTheConfigFailsTheNamedRequestOnly) {
  const std::string dir = test::make_temp_dir("configured_engine_faults");
  IoConfig io;
  io.engine = IoEngineKind::posix;
  io.faults = "write:1:eio";  // the second write block fails
  auto engine = create_configured_engine(io, dir);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto file = open_io_file(dir + "/f", true, false);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  AlignedBlock b;
  std::memset(b.p, 1, 1 << 20);
  std::vector<Status> results;
  for (uint64_t i = 0; i < 3; i++) {
    auto t = engine.value()->submit({IoOp::write, file.value().get(), i << 20, b.p, 1 << 20});
    ASSERT_TRUE(t.ok());
    results.push_back(engine.value()->wait(t.value()));
  }
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(results[1].code(), ErrorCode::io_error);
  EXPECT_NE(results[1].message().find(dir + "/f"), std::string::npos) << results[1].message();
  EXPECT_TRUE(results[2].ok()) << "the engine must keep working after a fault";
}

TEST(ConfiguredEngine, BadFaultSpecNamesTheField) {
  IoConfig io;
  io.engine = IoEngineKind::posix;
  io.faults = "write:x:boom";
  auto engine = create_configured_engine(io, "");
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("io.faults"), std::string::npos);
}

TEST(ConfiguredEngine, ReadRateLimitFromTheConfigSlowsReads) {
  // A lower bound only: 2 MiB at 8 MiB/s cannot finish in under ~0.2 s (burst included).
  const std::string dir = test::make_temp_dir("configured_engine_rate");
  IoConfig io;
  io.engine = IoEngineKind::posix;
  io.read_bytes_per_s = 8 << 20;
  auto engine = create_configured_engine(io, dir);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto file = open_io_file(dir + "/f", true, false);
  ASSERT_TRUE(file.ok());
  AlignedBlock b;
  std::memset(b.p, 2, 1 << 20);
  for (uint64_t i = 0; i < 2; i++) {
    auto t = engine.value()->submit({IoOp::write, file.value().get(), i << 20, b.p, 1 << 20});
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(engine.value()->wait(t.value()).ok());
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < 2; i++) {
    auto t = engine.value()->submit({IoOp::read, file.value().get(), i << 20, b.p, 1 << 20});
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(engine.value()->wait(t.value()).ok());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 0.2);
}

}  // namespace
}  // namespace strata
