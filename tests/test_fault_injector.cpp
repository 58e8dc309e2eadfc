// The fault injector: spec parsing (good specs round-trip, bad tokens are named), which requests
// each rule picks, what each kind does to a result, and counting under concurrent callers.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "io/fault_injector.h"

namespace strata {
namespace {

struct Fixture {
  IoFile buffered{-1, "/fake/buffered", false};
  IoFile direct{-1, "/fake/direct", true};
  IoRequest req(IoOp op, bool is_direct = false) {
    IoRequest r;
    r.op = op;
    r.file = is_direct ? &direct : &buffered;
    r.length = 1 << 20;
    return r;
  }
};

TEST(FaultSpec, ParsesEveryForm) {
  auto r = parse_fault_spec("write:3:eio, read:p0.01:short,any:*:delay_us=200,read:0:enospc");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& rules = (*r)->rules();
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].op, FaultOp::write);
  EXPECT_EQ(rules[0].which, FaultWhich::nth);
  EXPECT_EQ(rules[0].nth, 3u);
  EXPECT_EQ(rules[0].kind, FaultKind::eio);
  EXPECT_EQ(rules[1].which, FaultWhich::probability);
  EXPECT_DOUBLE_EQ(rules[1].probability, 0.01);
  EXPECT_EQ(rules[1].kind, FaultKind::short_transfer);
  EXPECT_EQ(rules[2].op, FaultOp::any);
  EXPECT_EQ(rules[2].which, FaultWhich::every);
  EXPECT_EQ(rules[2].kind, FaultKind::delay);
  EXPECT_EQ(rules[2].delay_us, 200u);
  EXPECT_EQ(rules[3].kind, FaultKind::enospc);
  EXPECT_EQ(fault_rule_to_string(rules[0]), "write:3:eio");
  EXPECT_EQ(fault_rule_to_string(rules[1]), "read:p0.01:short");
  EXPECT_EQ(fault_rule_to_string(rules[2]), "any:*:delay_us=200");
  EXPECT_TRUE(parse_fault_spec("seed=42,any:*:eintr,write:p1:eagain").ok());
}

TEST(FaultSpec, BadTokensAreNamed) {
  struct Case {
    const char* spec;
    const char* token;
  };
  for (const Case& c : {Case{"writ:3:eio", "'writ'"}, Case{"write:x:eio", "'x'"},
                        Case{"write:p1.5:eio", "'p1.5'"}, Case{"write:p:eio", "'p'"},
                        Case{"write:3:ebusy", "'ebusy'"}, Case{"read:1:delay_us=abc", "'abc'"},
                        Case{"read:1", "'read:1'"}, Case{"read:1:eio,,", "item 2"},
                        Case{"seed=-1,read:1:eio", "'-1'"}, Case{"write:-3:eio", "'-3'"}}) {
    auto r = parse_fault_spec(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument);
    EXPECT_NE(r.status().message().find(c.token), std::string::npos)
        << c.spec << " -> " << r.status().message();
  }
  EXPECT_FALSE(parse_fault_spec("").ok());
  EXPECT_FALSE(parse_fault_spec("seed=3").ok());  // no rules
}

TEST(FaultInjector, NthCountsMatchingFirstAttemptsOnly) {
  Fixture f;
  FaultInjector inj({FaultRule{FaultOp::write, FaultWhich::nth, 2, 0, FaultKind::eio, 0}});
  IoRequest w = f.req(IoOp::write), r = f.req(IoOp::read);
  EXPECT_EQ(inj.on_result(w, 0, 0, 4096), 4096);  // write #0
  EXPECT_EQ(inj.on_result(r, 0, 0, 4096), 4096);  // reads do not count
  EXPECT_EQ(inj.on_result(w, 0, 1, 4096), 4096);  // a resubmission does not count
  EXPECT_EQ(inj.on_result(w, 0, 0, 4096), 4096);  // write #1
  EXPECT_EQ(inj.on_result(w, 0, 0, 4096), -EIO);  // write #2
  EXPECT_EQ(inj.on_result(w, 0, 1, 4096), 4096);  // its retry passes
  EXPECT_EQ(inj.on_result(w, 0, 0, 4096), 4096);  // write #3
  EXPECT_EQ(inj.matched(0), 4u);
  EXPECT_EQ(inj.fired(0), 1u);
}

TEST(FaultInjector, KindsChangeResults) {
  Fixture f;
  auto spec = parse_fault_spec("any:*:short");
  ASSERT_TRUE(spec.ok());
  FaultInjector& inj = **spec;
  EXPECT_EQ(inj.on_result(f.req(IoOp::read), 0, 0, 1000), 500);
  EXPECT_EQ(inj.on_result(f.req(IoOp::read), 0, 0, 1), 1);                  // too small to halve
  EXPECT_EQ(inj.on_result(f.req(IoOp::read), 0, 0, -EIO), -EIO);            // real errors stay
  EXPECT_EQ(inj.on_result(f.req(IoOp::read, true), 0, 0, 3 * 4096), 4096);  // aligned half
  EXPECT_EQ(inj.on_result(f.req(IoOp::read, true), 0, 0, 4096), 4096);      // cannot halve

  for (auto [name, err] : {std::pair{"eio", EIO}, std::pair{"enospc", ENOSPC},
                           std::pair{"eintr", EINTR}, std::pair{"eagain", EAGAIN}}) {
    auto s = parse_fault_spec(std::string("read:0:") + name);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->on_result(f.req(IoOp::read), 0, 0, 4096), -err) << name;
    EXPECT_EQ((*s)->on_result(f.req(IoOp::read), 0, 0, 4096), 4096) << name;
  }
}

TEST(FaultInjector, FirstChangingRuleWinsDelaysAdd) {
  Fixture f;
  auto s = parse_fault_spec("any:*:delay_us=20000,write:*:eintr,write:*:eio,any:*:delay_us=20000");
  ASSERT_TRUE(s.ok());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ((*s)->on_result(f.req(IoOp::write), 0, 0, 4096), -EINTR);
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(dt, 0.040);
  EXPECT_EQ((*s)->fired(1), 1u);
  EXPECT_EQ((*s)->fired(2), 0u);  // matched, but an earlier rule already changed the result
  EXPECT_EQ((*s)->matched(2), 1u);
  EXPECT_EQ((*s)->fired(3), 1u);
  EXPECT_EQ((*s)->on_result(f.req(IoOp::read), 0, 0, 4096), 4096);  // only delayed
  EXPECT_EQ((*s)->total_fired(), 5u);
}

TEST(FaultInjector, ProbabilityIsSeededAndRoughlyRight) {
  Fixture f;
  auto a = parse_fault_spec("seed=7,read:p0.25:eio");
  auto b = parse_fault_spec("seed=7,read:p0.25:eio");
  auto c = parse_fault_spec("seed=8,read:p0.25:eio");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int hits = 0, same = 0, same_other_seed = 0;
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    int64_t ra = (*a)->on_result(f.req(IoOp::read), 0, 0, 4096);
    int64_t rb = (*b)->on_result(f.req(IoOp::read), 0, 0, 4096);
    int64_t rc = (*c)->on_result(f.req(IoOp::read), 0, 0, 4096);
    hits += ra < 0;
    same += ra == rb;
    same_other_seed += ra == rc;
  }
  EXPECT_EQ(same, n);
  EXPECT_LT(same_other_seed, n);
  EXPECT_NEAR(hits, n / 4, n / 40);  // 5000 +- 500; the binomial sd is ~61
  EXPECT_EQ((*a)->fired(0), static_cast<uint64_t>(hits));

  auto never = parse_fault_spec("any:p0:eio");
  auto always = parse_fault_spec("any:p1:eio");
  for (int i = 0; i < 1000; i++) {
    EXPECT_EQ((*never)->on_result(f.req(IoOp::write), 0, 0, 8), 8);
    EXPECT_EQ((*always)->on_result(f.req(IoOp::write), 0, 0, 8), -EIO);
  }
}

TEST(FaultInjector, CountsHoldUnderConcurrentCallers) {
  Fixture f;
  auto s = parse_fault_spec("any:*:delay_us=0,write:777:eio");
  ASSERT_TRUE(s.ok());
  FaultInjector& inj = **s;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      IoRequest w = f.req(IoOp::write);
      for (int i = 0; i < 5000; i++) errors += inj.on_result(w, 0, 0, 4096) < 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(inj.matched(0), 20000u);
  EXPECT_EQ(inj.matched(1), 20000u);
  EXPECT_EQ(inj.fired(1), 1u);
  EXPECT_EQ(errors.load(), 1);
}

}  // namespace
}  // namespace strata
