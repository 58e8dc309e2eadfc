// The striped extent store: round trips of odd sizes and offsets over 1-3 directories, bytes
// landing where the striping formula says, checksums catching a byte flipped behind the store's
// back, a full disk refused at creation, and misaligned or out-of-range transfers refused.
// Every case runs on the test's synchronous engine and on the real engines available here.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/check.h"
#include "io/fault_injector.h"
#include "io/host_buffer.h"
#include "io/tensor_store.h"
#include "sync_io_engine.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// Never empty, so .data() is a valid pointer even for a zero-byte extent.
std::vector<uint8_t> pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(std::max<uint64_t>(n, 1));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

HostBuffer buffer(uint64_t bytes) {
  auto b = HostBuffer::allocate(std::max<uint64_t>(bytes, 1), /*lock=*/false);
  STRATA_CHECK(b.ok());
  return std::move(b).value();
}

Status write_sync(TensorStore& s, const std::string& extent, uint64_t off, const void* p,
                  uint64_t n) {
  auto b = s.write(extent, off, p, n);
  if (!b.ok()) return b.status();
  return s.wait(*b);
}

Status read_sync(TensorStore& s, const std::string& extent, uint64_t off, void* p, uint64_t n) {
  auto b = s.read(extent, off, p, n);
  if (!b.ok()) return b.status();
  return s.wait(*b);
}

// A directory of its own for the running test: ctest runs each test as its own process, several
// at once, so tests must not share (and wipe) one directory.
std::string test_dir(const std::string& tag) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return test::make_temp_dir(tag + "_" + name);
}

void flip_byte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t b = 0;
  ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
  b ^= 0x5A;
  ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

class TensorStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = test_dir("store");
    if (GetParam() == "sync") {
      engine_ = std::make_unique<test::SyncIoEngine>();
      return;
    }
    IoEngineOptions o;
    o.kind = *parse_enum<IoEngineKind>("engine", GetParam());
    o.queue_depth = 8;
    o.block_size = 256 * kKiB;
    auto e = create_io_engine(o, root_);
    if (!e.ok()) GTEST_SKIP() << GetParam() << " engine unavailable: " << e.status().message();
    engine_ = std::move(e).value();
  }

  std::vector<std::string> make_dirs(int n, const std::string& tag) {
    std::vector<std::string> dirs;
    for (int i = 0; i < n; i++) {
      dirs.push_back(root_ + "/" + tag + "_d" + std::to_string(i));
      std::filesystem::create_directories(dirs.back());
    }
    return dirs;
  }

  std::unique_ptr<TensorStore> make_store(const StoreOptions& o,
                                          const std::vector<ExtentSpec>& specs) {
    auto s = TensorStore::create(*engine_, o, specs);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::string root_;
  std::unique_ptr<IoEngine> engine_;
};

const std::vector<ExtentSpec> kOddExtents = {
    {"one", 1},   {"page_minus", 4095},    {"page_plus", 4097},
    {"empty", 0}, {"big", 3 * kMiB + 123}, {"two_stripes_plus", 2 * 64 * kKiB + 5}};

TEST_P(TensorStoreTest, RoundTripsOddSizesAndOffsets) {
  for (bool direct : {true, false}) {
    for (int ndirs : {1, 2, 3}) {
      SCOPED_TRACE("direct " + std::to_string(direct) + " dirs " + std::to_string(ndirs));
      StoreOptions o;
      o.dirs = make_dirs(ndirs, "rt" + std::to_string(direct));
      o.stripe_unit = 64 * kKiB;
      o.direct = direct;
      auto store = make_store(o, kOddExtents);
      ASSERT_TRUE(store);
      // Whole extents (up to io_bytes under direct), each with its own pattern.
      std::map<std::string, std::vector<uint8_t>> model;
      for (const auto& spec : kOddExtents) {
        ExtentInfo e = store->extent(spec.name).value();
        EXPECT_EQ(e.offset % o.stripe_unit, 0u);
        model[spec.name] = pattern(e.io_bytes, e.index + 10 * ndirs);
        HostBuffer b = buffer(e.io_bytes);
        std::memcpy(b.data(), model[spec.name].data(), e.io_bytes);
        ASSERT_TRUE(write_sync(*store, spec.name, 0, b.data(), e.io_bytes).ok()) << spec.name;
      }
      // Overwrite a range in the middle of "big" crossing several stripes, at odd offsets.
      uint64_t off = direct ? 3 * 4096 : 12345, len = direct ? 37 * 4096 : 150001;
      auto patch = pattern(len, 99);
      HostBuffer pb = buffer(len);
      std::memcpy(pb.data(), patch.data(), len);
      ASSERT_TRUE(write_sync(*store, "big", off, pb.data(), len).ok());
      std::memcpy(model["big"].data() + off, patch.data(), len);
      // Read back everything, whole and in odd pieces.
      for (const auto& spec : kOddExtents) {
        ExtentInfo e = store->extent(spec.name).value();
        HostBuffer b = buffer(e.io_bytes);
        ASSERT_TRUE(read_sync(*store, spec.name, 0, b.data(), e.io_bytes).ok());
        EXPECT_EQ(std::memcmp(b.data(), model[spec.name].data(), e.bytes), 0) << spec.name;
      }
      for (uint64_t roff : {0 * kKiB, 60 * kKiB, 64 * kKiB, 400 * kKiB}) {
        uint64_t rlen = direct ? 4096 * 33 : 70001;
        if (!direct) roff += 7;
        HostBuffer b = buffer(rlen);
        ASSERT_TRUE(read_sync(*store, "big", roff, b.data(), rlen).ok());
        EXPECT_EQ(std::memcmp(b.data(), model["big"].data() + roff, rlen), 0) << roff;
      }
    }
  }
}

TEST_P(TensorStoreTest, DataLandsWhereTheStripingFormulaSays) {
  for (int ndirs : {1, 2, 3}) {
    SCOPED_TRACE("dirs " + std::to_string(ndirs));
    StoreOptions o;
    o.dirs = make_dirs(ndirs, "formula");
    o.stripe_unit = 64 * kKiB;
    auto store = make_store(o, kOddExtents);
    ASSERT_TRUE(store);
    const uint64_t su = o.stripe_unit;
    // Layout: stripe-aligned offsets in order, logical size, per-dir file sizes.
    uint64_t expect_offset = 0;
    for (size_t i = 0; i < store->extent_count(); i++) {
      EXPECT_EQ(store->extent(i).offset, expect_offset);
      expect_offset += (kOddExtents[i].bytes + su - 1) / su * su;
    }
    EXPECT_EQ(store->logical_bytes(), expect_offset);
    uint64_t stripes = expect_offset / su, total = 0;
    for (int d = 0; d < ndirs; d++) {
      uint64_t held = 0;
      for (uint64_t k = d; k < stripes; k += ndirs) held += su;
      EXPECT_EQ(store->dir_bytes(d), held);
      struct stat st {};
      ASSERT_EQ(::stat(store->file(d).path.c_str(), &st), 0);
      EXPECT_EQ(static_cast<uint64_t>(st.st_size), held);
      EXPECT_EQ(store->file(d).path, o.dirs[d] + "/strata.store");
      total += held;
    }
    EXPECT_EQ(total, store->logical_bytes());

    ExtentInfo e = store->extent("big").value();
    auto data = pattern(e.io_bytes, 5);
    HostBuffer b = buffer(e.io_bytes);
    std::memcpy(b.data(), data.data(), e.io_bytes);
    ASSERT_TRUE(write_sync(*store, "big", 0, b.data(), e.io_bytes).ok());
    // Every stripe-sized piece of the extent, read straight from the file the formula names.
    for (uint64_t at = 0; at < e.bytes; at += su) {
      uint64_t logical = e.offset + at, k = logical / su;
      std::string path = o.dirs[k % ndirs] + "/strata.store";
      uint64_t file_offset = (k / ndirs) * su;
      uint64_t n = std::min(su, e.bytes - at);
      std::vector<uint8_t> got(n);
      int fd = ::open(path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::pread(fd, got.data(), n, static_cast<off_t>(file_offset)),
                static_cast<ssize_t>(n));
      ::close(fd);
      ASSERT_EQ(std::memcmp(got.data(), data.data() + at, n), 0) << "stripe " << k;
      TensorStore::Location loc = store->locate(logical);
      EXPECT_EQ(loc.dir, k % ndirs);
      EXPECT_EQ(loc.file_offset, file_offset);
    }
  }
}

TEST_P(TensorStoreTest, ChecksumsCatchAByteFlippedBehindTheStore) {
  StoreOptions o;
  o.dirs = make_dirs(2, "crc");
  o.stripe_unit = 64 * kKiB;
  o.checksums = true;
  auto store = make_store(o, kOddExtents);
  ASSERT_TRUE(store);
  ExtentInfo e = store->extent("big").value();
  auto data = pattern(e.io_bytes, 8);
  HostBuffer b = buffer(e.io_bytes);
  std::memcpy(b.data(), data.data(), e.io_bytes);
  ASSERT_TRUE(write_sync(*store, "big", 0, b.data(), e.io_bytes).ok());
  HostBuffer r = buffer(e.io_bytes);
  ASSERT_TRUE(read_sync(*store, "big", 0, r.data(), e.io_bytes).ok());

  // Flip one byte of chunk 5 of "big" in its file.
  const uint64_t in_extent = 5 * o.stripe_unit + 777;
  TensorStore::Location loc = store->locate(e.offset + in_extent);
  flip_byte(store->file(loc.dir).path, loc.file_offset);
  Status s = read_sync(*store, "big", 0, r.data(), e.io_bytes);
  ASSERT_EQ(s.code(), ErrorCode::bad_format) << s.to_string();
  EXPECT_NE(s.message().find("checksum mismatch in extent 'big' at offset " +
                             std::to_string(5 * o.stripe_unit)),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(store->file(loc.dir).path), std::string::npos) << s.message();
  // A read of the chunk alone finds it too; one of another chunk, or part of it, does not.
  EXPECT_EQ(read_sync(*store, "big", 5 * o.stripe_unit, r.data(), o.stripe_unit).code(),
            ErrorCode::bad_format);
  EXPECT_TRUE(read_sync(*store, "big", 4 * o.stripe_unit, r.data(), o.stripe_unit).ok());
  EXPECT_TRUE(read_sync(*store, "big", 5 * o.stripe_unit, r.data(), 4096).ok());
  // Rewriting the chunk heals it.
  ASSERT_TRUE(write_sync(*store, "big", 5 * o.stripe_unit,
                         static_cast<uint8_t*>(b.data()) + 5 * o.stripe_unit, o.stripe_unit)
                  .ok());
  EXPECT_TRUE(read_sync(*store, "big", 0, r.data(), e.io_bytes).ok());
  EXPECT_EQ(std::memcmp(r.data(), data.data(), e.bytes), 0);

  // A short last chunk is checked over its real bytes: flip the last byte of "page_plus".
  ExtentInfo pp = store->extent("page_plus").value();
  HostBuffer pb = buffer(pp.io_bytes);
  std::memset(pb.data(), 0x11, pp.io_bytes);
  ASSERT_TRUE(write_sync(*store, "page_plus", 0, pb.data(), pp.io_bytes).ok());
  loc = store->locate(pp.offset + pp.bytes - 1);
  flip_byte(store->file(loc.dir).path, loc.file_offset);
  s = read_sync(*store, "page_plus", 0, pb.data(), pp.io_bytes);
  EXPECT_EQ(s.code(), ErrorCode::bad_format) << s.to_string();
  EXPECT_NE(s.message().find("'page_plus'"), std::string::npos);
}

TEST_P(TensorStoreTest, ChecksumWritesMustCoverWholeChunks) {
  StoreOptions o;
  o.dirs = make_dirs(1, "crcpart");
  o.stripe_unit = 64 * kKiB;
  o.checksums = true;
  auto store = make_store(o, kOddExtents);
  ASSERT_TRUE(store);
  HostBuffer b = buffer(4 * o.stripe_unit);
  auto s = store->write("big", 4096, b.data(), o.stripe_unit);
  ASSERT_EQ(s.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(s.status().message().find("chunks"), std::string::npos) << s.status().message();
  EXPECT_EQ(store->write("big", 0, b.data(), 4096).status().code(), ErrorCode::invalid_argument);
  // Whole chunks, and a last chunk that ends at the extent's (padded) end, are fine.
  EXPECT_TRUE(write_sync(*store, "big", o.stripe_unit, b.data(), 2 * o.stripe_unit).ok());
  ExtentInfo e = store->extent("big").value();
  uint64_t last = e.bytes / o.stripe_unit * o.stripe_unit;
  EXPECT_TRUE(write_sync(*store, "big", last, b.data(), e.io_bytes - last).ok());
  EXPECT_TRUE(write_sync(*store, "one", 0, b.data(), 4096).ok());
  // Reads may be partial.
  EXPECT_TRUE(read_sync(*store, "big", 4096, b.data(), 8192).ok());
}

TEST_P(TensorStoreTest, ChecksumTableSavesAndLoads) {
  StoreOptions o;
  o.dirs = make_dirs(3, "crcfile");
  o.stripe_unit = 64 * kKiB;
  o.checksums = true;
  const std::string table = root_ + "/crc.bin";
  ExtentInfo e;
  {
    auto store = make_store(o, kOddExtents);
    ASSERT_TRUE(store);
    e = store->extent("big").value();
    auto data = pattern(e.io_bytes, 21);
    HostBuffer b = buffer(e.io_bytes);
    std::memcpy(b.data(), data.data(), e.io_bytes);
    ASSERT_TRUE(write_sync(*store, "big", 0, b.data(), e.io_bytes).ok());
    ASSERT_TRUE(store->save_checksums(table).ok());
  }
  // Reopen the same files: the loaded table still catches a flipped byte.
  auto store = make_store(o, kOddExtents);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->load_checksums(table).ok());
  HostBuffer r = buffer(e.io_bytes);
  ASSERT_TRUE(read_sync(*store, "big", 0, r.data(), e.io_bytes).ok());
  TensorStore::Location loc = store->locate(e.offset + 2 * o.stripe_unit + 1);
  flip_byte(store->file(loc.dir).path, loc.file_offset);
  EXPECT_EQ(read_sync(*store, "big", 0, r.data(), e.io_bytes).code(), ErrorCode::bad_format);

  // A table for another layout is refused, naming what differs.
  auto other = kOddExtents;
  other[1].bytes = 4094;
  StoreOptions o2 = o;
  o2.file_name = "other.store";
  auto store2 = make_store(o2, other);
  ASSERT_TRUE(store2);
  Status s = store2->load_checksums(table);
  EXPECT_EQ(s.code(), ErrorCode::bad_format);
  EXPECT_NE(s.message().find("page_minus"), std::string::npos) << s.message();
  // A corrupted table file is refused.
  flip_byte(table, 20);
  s = store->load_checksums(table);
  EXPECT_EQ(s.code(), ErrorCode::bad_format);
  EXPECT_NE(s.message().find("corrupt"), std::string::npos) << s.message();
  EXPECT_EQ(store->load_checksums(root_ + "/missing.bin").code(), ErrorCode::not_found);
}

TEST_P(TensorStoreTest, MisalignedAndOutOfRangeTransfersRefused) {
  StoreOptions o;
  o.dirs = make_dirs(2, "align");
  o.stripe_unit = 64 * kKiB;
  auto store = make_store(o, kOddExtents);
  ASSERT_TRUE(store);
  HostBuffer b = buffer(64 * kKiB);
  auto* p = static_cast<uint8_t*>(b.data());
  struct Case {
    uint64_t off, len;
    uint8_t* buf;
    const char* field;
  };
  for (const Case& c : {Case{100, 4096, p, "offset"}, Case{4096, 100, p, "length"},
                        Case{0, 4096, p + 8, "buffer address"}}) {
    auto w = store->write("big", c.off, c.buf, c.len);
    ASSERT_EQ(w.status().code(), ErrorCode::invalid_argument) << c.field;
    EXPECT_NE(w.status().message().find(c.field), std::string::npos) << w.status().message();
    EXPECT_NE(w.status().message().find("'big'"), std::string::npos) << w.status().message();
    EXPECT_EQ(store->read("big", c.off, c.buf, c.len).status().code(), ErrorCode::invalid_argument);
  }
  // Past the end: "page_minus" may be moved as one 4096-byte block, not two.
  EXPECT_TRUE(write_sync(*store, "page_minus", 0, p, 4096).ok());
  auto past = store->read("page_minus", 0, p, 8192);
  ASSERT_EQ(past.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(past.status().message().find("'page_minus'"), std::string::npos);
  EXPECT_EQ(store->read("page_minus", 8192, p, 4096).status().code(), ErrorCode::invalid_argument);
  EXPECT_EQ(store->read("nope", 0, p, 4096).status().code(), ErrorCode::not_found);
  EXPECT_EQ(store->read(99, 0, p, 4096).status().code(), ErrorCode::invalid_argument);
  // A zero-length transfer is an empty batch.
  auto z = store->read("empty", 0, p, 0);
  ASSERT_TRUE(z.ok());
  EXPECT_FALSE(z->pending());
  EXPECT_TRUE(store->wait(*z).ok());
}

TEST_P(TensorStoreTest, ConcurrentBatchesAndUnwaitedBatches) {
  StoreOptions o;
  o.dirs = make_dirs(3, "conc");
  o.stripe_unit = 64 * kKiB;
  o.checksums = true;
  std::vector<ExtentSpec> specs;
  for (int i = 0; i < 8; i++) specs.push_back({"blk." + std::to_string(i), 300 * kKiB + 4096});
  auto store = make_store(o, specs);
  ASSERT_TRUE(store);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 8; i += 4) {
        ExtentInfo e = store->extent(i);
        auto data = pattern(e.io_bytes, 100 + i);
        HostBuffer b = buffer(e.io_bytes), r = buffer(e.io_bytes);
        std::memcpy(b.data(), data.data(), e.io_bytes);
        auto w = store->write(i, 0, b.data(), e.io_bytes);
        if (!w.ok() || !store->wait(*w).ok()) failures++;
        auto rd = store->read(i, 0, r.data(), e.io_bytes);
        if (!rd.ok() || !store->wait(*rd).ok()) failures++;
        if (std::memcmp(r.data(), data.data(), e.bytes) != 0) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // A batch dropped without wait() is waited by its destructor.
  HostBuffer b = buffer(store->extent(0).io_bytes);
  {
    auto w = store->write(0, 0, b.data(), b.size());
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE(w->pending());
    EXPECT_GE(w->requests(), 2u);
  }
  EXPECT_EQ(engine_->in_flight(), 0);
}

// Note [One run per store file]: a second store on a directory a live store uses is refused
// before it sizes, writes or removes anything, and works once the first is gone.
TEST_P(TensorStoreTest, SecondStoreOnTheSameFilesIsRefused) {
  StoreOptions o;
  o.dirs = make_dirs(2, "shared");
  o.stripe_unit = 64 * kKiB;
  o.direct = false;
  auto first = make_store(o, {{"a", 256 * kKiB}});
  ASSERT_TRUE(first);
  const std::vector<uint8_t> want = pattern(256 * kKiB, 7);
  HostBuffer b = buffer(256 * kKiB);
  std::memcpy(b.data(), want.data(), want.size());
  ASSERT_TRUE(write_sync(*first, "a", 0, b.data(), 256 * kKiB).ok());
  const auto size_before = std::filesystem::file_size(o.dirs[1] + "/strata.store");

  auto second = TensorStore::create(*engine_, o, {{"a", 4 * kMiB}});  // would resize the files
  ASSERT_FALSE(second.ok());
  test::expect_error(second.status(), ErrorCode::invalid_argument,
                     {o.dirs[0] + "/strata.store", "is in use by other runs"});
  EXPECT_EQ(std::filesystem::file_size(o.dirs[1] + "/strata.store"), size_before);
  std::memset(b.data(), 0, 256 * kKiB);
  ASSERT_TRUE(read_sync(*first, "a", 0, b.data(), 256 * kKiB).ok());
  EXPECT_EQ(std::memcmp(b.data(), want.data(), want.size()), 0) << "the first store's data changed";

  first.reset();  // closing releases the files
  auto third = TensorStore::create(*engine_, o, {{"a", 4 * kMiB}});
  EXPECT_TRUE(third.ok()) << third.status().to_string();
}

// With instances > 1 a second store takes the next free name in every directory, leaves the
// first one's files as they are, and a third takes the first name again once it is free.
TEST_P(TensorStoreTest, SecondStoreTakesTheNextFreeName) {
  StoreOptions o;
  o.dirs = make_dirs(2, "instances");
  o.stripe_unit = 64 * kKiB;
  o.direct = false;
  o.instances = 2;
  auto first = make_store(o, {{"a", 256 * kKiB}});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->file_name(), "strata.store");
  const std::vector<uint8_t> want = pattern(256 * kKiB, 3);
  HostBuffer b = buffer(256 * kKiB);
  std::memcpy(b.data(), want.data(), want.size());
  ASSERT_TRUE(write_sync(*first, "a", 0, b.data(), 256 * kKiB).ok());

  auto second = TensorStore::create(*engine_, o, {{"a", 1 * kMiB}});
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ((*second)->file_name(), "strata.1.store");
  for (size_t d = 0; d < 2; ++d) {
    EXPECT_EQ((*second)->file(d).path, o.dirs[d] + "/strata.1.store");
  }
  auto third = TensorStore::create(*engine_, o, {{"a", 64 * kKiB}});
  ASSERT_FALSE(third.ok());
  test::expect_error(third.status(), ErrorCode::invalid_argument,
                     {o.dirs[0] + "/strata.store", "and the 1 names after it are in use"});
  std::memset(b.data(), 0, 256 * kKiB);
  ASSERT_TRUE(read_sync(*first, "a", 0, b.data(), 256 * kKiB).ok());
  EXPECT_EQ(std::memcmp(b.data(), want.data(), want.size()), 0) << "the first store's data changed";

  first.reset();
  auto fourth = TensorStore::create(*engine_, o, {{"a", 64 * kKiB}});
  ASSERT_TRUE(fourth.ok()) << fourth.status().to_string();
  EXPECT_EQ((*fourth)->file_name(), "strata.store");
  for (size_t d = 0; d < 2; ++d) {  // the live second store's files are not stale
    EXPECT_TRUE(std::filesystem::exists(o.dirs[d] + "/strata.1.store"));
  }

  // A killed run's later-instance files (here: files nobody holds) are removed by the next store
  // that takes a name, once the first name is free again.
  second->reset();
  fourth->reset();
  for (size_t d = 0; d < 2; ++d) {
    std::ofstream(o.dirs[d] + "/strata.1.store") << "left by a killed run";
  }
  auto fifth = TensorStore::create(*engine_, o, {{"a", 64 * kKiB}});
  ASSERT_TRUE(fifth.ok()) << fifth.status().to_string();
  EXPECT_EQ((*fifth)->file_name(), "strata.store");
  for (size_t d = 0; d < 2; ++d) {
    EXPECT_FALSE(std::filesystem::exists(o.dirs[d] + "/strata.1.store")) << o.dirs[d];
  }
}

TEST_P(TensorStoreTest, CreateRefusesBadOptions) {
  StoreOptions o;
  o.dirs = make_dirs(1, "bad");
  o.stripe_unit = 64 * kKiB;
  auto expect = [&](const StoreOptions& opts, const std::vector<ExtentSpec>& specs, ErrorCode code,
                    const std::string& needle) {
    auto s = TensorStore::create(*engine_, opts, specs);
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_EQ(s.status().code(), code) << s.status().to_string();
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
  };
  expect(o, {{"a", 1}, {"a", 2}}, ErrorCode::invalid_argument, "'a'");
  expect(o, {{"", 1}}, ErrorCode::invalid_argument, "empty name");
  StoreOptions bad_su = o;
  bad_su.stripe_unit = 1000;
  expect(bad_su, {{"a", 1}}, ErrorCode::invalid_argument, "stripe_unit");
  StoreOptions missing = o;
  missing.dirs.push_back(root_ + "/does_not_exist");
  expect(missing, {{"a", 1}}, ErrorCode::not_found, root_ + "/does_not_exist");
  StoreOptions twice = o;
  twice.dirs.push_back(o.dirs[0] + "/.");
  expect(twice, {{"a", 1}}, ErrorCode::invalid_argument, "listed twice");
  StoreOptions none = o;
  none.dirs.clear();
  expect(none, {{"a", 1}}, ErrorCode::invalid_argument, "directories");
}

// The engines with a fault hook (the synchronous test engine has none): their own instantiation,
// so no case is skipped.
class FaultHookedStoreTest : public TensorStoreTest {};

TEST_P(FaultHookedStoreTest, InjectedFaultsSurfaceOrAreRetried) {
  struct Case {
    const char* spec;
    ErrorCode write_code;  // ok: the engine must absorb the fault
  };
  for (const Case& c :
       {Case{"any:*:short", ErrorCode::ok}, Case{"any:*:eintr", ErrorCode::ok},
        Case{"any:p0.5:eagain,any:*:delay_us=100", ErrorCode::ok},
        Case{"write:2:eio", ErrorCode::io_error}, Case{"write:0:enospc", ErrorCode::no_space}}) {
    SCOPED_TRACE(c.spec);
    auto hook = parse_fault_spec(c.spec);
    ASSERT_TRUE(hook.ok());
    IoEngineOptions eo;
    eo.kind = *parse_enum<IoEngineKind>("engine", GetParam());
    eo.queue_depth = 4;
    eo.block_size = 64 * kKiB;
    eo.fault_hook = *hook;
    auto engine = create_io_engine(eo, root_);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    StoreOptions o;
    o.dirs = make_dirs(2, "fault");
    o.stripe_unit = 64 * kKiB;
    o.checksums = true;
    auto created = TensorStore::create(**engine, o, kOddExtents);
    ASSERT_TRUE(created.ok()) << created.status().to_string();
    TensorStore& store = **created;
    ExtentInfo e = store.extent("big").value();
    auto data = pattern(e.io_bytes, 77);
    HostBuffer b = buffer(e.io_bytes), r = buffer(e.io_bytes);
    std::memcpy(b.data(), data.data(), e.io_bytes);
    Status w = write_sync(store, "big", 0, b.data(), e.io_bytes);
    EXPECT_GT((*hook)->total_fired(), 0u);
    if (c.write_code != ErrorCode::ok) {
      EXPECT_EQ(w.code(), c.write_code) << w.to_string();
      EXPECT_NE(w.message().find("extent 'big'"), std::string::npos) << w.message();
      // The failed write forgot its chunks' checksums; a clean rewrite and read then work.
      ASSERT_TRUE(write_sync(store, "big", 0, b.data(), e.io_bytes).ok());
    } else {
      ASSERT_TRUE(w.ok()) << w.to_string();
    }
    ASSERT_TRUE(read_sync(store, "big", 0, r.data(), e.io_bytes).ok());
    EXPECT_EQ(std::memcmp(r.data(), data.data(), e.bytes), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, TensorStoreTest, ::testing::Values("sync", "posix", "uring"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Engines, FaultHookedStoreTest, ::testing::Values("posix", "uring"),
                         [](const auto& info) { return info.param; });

// ---- a full disk at creation --------------------------------------------------------------------

class TensorStoreFullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_dir("store_tmpfs");
    if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=2m") != 0) {
      GTEST_SKIP() << "cannot mount a 2 MiB tmpfs at " << dir_ << ": " << std::strerror(errno)
                   << " (needs root)";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_ && ::umount(dir_.c_str()) != 0) {
      ADD_FAILURE() << "umount " << dir_ << ": " << std::strerror(errno);
    }
  }
  std::string dir_;
  bool mounted_ = false;
  test::SyncIoEngine engine_;
};

TEST_F(TensorStoreFullDisk, NoSpaceNamesTheDirectory) {
  std::string big = test_dir("store_tmpfs_neighbour");
  StoreOptions o;
  o.dirs = {big, dir_};  // the tmpfs holds the odd stripes: 2 of 4 MiB, more than its 2 MiB
  o.direct = false;
  auto s = TensorStore::create(engine_, o, {{"a", 4 * kMiB}, {"b", 3 * kMiB}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::no_space) << s.status().to_string();
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("storage directory " + dir_), std::string::npos) << m;
  EXPECT_NE(m.find("needs " + std::to_string(3 * kMiB) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("available"), std::string::npos) << m;
  // The files this attempt created are gone again.
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/strata.store"));
  EXPECT_FALSE(std::filesystem::exists(big + "/strata.store"));
  // What fits is fine.
  auto ok = TensorStore::create(engine_, o, {{"a", 1 * kMiB}, {"b", 1 * kMiB}});
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

TEST_F(TensorStoreFullDisk, DirectOnTmpfsEitherWorksOrSaysWhy) {
  // tmpfs gained O_DIRECT in Linux 6.6; older kernels refuse it, and the error must say so.
  StoreOptions o;
  o.dirs = {dir_};
  o.stripe_unit = 64 * kKiB;
  auto s = TensorStore::create(engine_, o, {{"a", 64 * kKiB}});
  if (s.ok()) return;
  EXPECT_EQ(s.status().code(), ErrorCode::unavailable);
  EXPECT_NE(s.status().message().find("O_DIRECT"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find(dir_), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace strata
