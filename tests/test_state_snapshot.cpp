// Snapshots behind training (Note [Asynchronous checkpoints] in model/state_snapshot.h):
//  - the gate's rules on their own: held slabs wait for their writes, writers wait for captures,
//    captures go in preference order among the ready, cancel and abandon release everyone;
//  - an offloaded trainer snapshotted at a step boundary, its slabs captured slowly by another
//    thread while it trains two more steps, gives exactly the state a standstill read gives at
//    that boundary, and trains on to exactly the state of an undisturbed run: for the vertical
//    schedule with pending steps (clipping on), with the alpha split (clipping off), the
//    horizontal one, state on host and on storage, the embed group's state on storage, bf16.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "model/state_snapshot.h"
#include "train/trainer.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(SnapshotGate, HeldSlabsAreReadyAfterTheirWritesAndCapturesFollowPreference) {
  SnapshotGate gate({2, 0, 1});
  gate.hold(2);
  auto first = gate.next_ready();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 0);  // 2 is preferred but held
  gate.captured(0);
  gate.expect_writes(2, 2);
  gate.wrote(2);
  EXPECT_EQ(*gate.next_ready(), 1);  // 2 still has a write due
  gate.wrote(2);
  EXPECT_EQ(*gate.next_ready(), 2);
  gate.captured(2);
  gate.captured(1);
  EXPECT_EQ(*gate.next_ready(), -1);
  EXPECT_TRUE(gate.finished());
}

TEST(SnapshotGate, AWriterWaitsUntilItsSlabIsCaptured) {
  SnapshotGate gate({0, 1});
  std::atomic<bool> passed{false};
  std::thread writer([&] {
    gate.wait_captured(1);
    passed = true;
  });
  gate.captured(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(passed.load());  // slab 1 is not captured yet
  gate.captured(1);
  writer.join();
  EXPECT_TRUE(passed.load());
  EXPECT_GT(gate.stalled_seconds(), 0.03);
}

TEST(SnapshotGate, CancelReleasesWritersAndAbandonStopsTheCapture) {
  SnapshotGate cancelled({0});
  std::thread writer([&] { cancelled.wait_captured(0); });
  cancelled.cancel();
  writer.join();
  EXPECT_TRUE(cancelled.finished());

  SnapshotGate abandoned({0, 1});
  abandoned.hold(0);
  abandoned.hold(1);
  std::thread capture([&] {
    auto next = abandoned.next_ready();
    EXPECT_FALSE(next.ok());
    EXPECT_NE(next.status().message().find("disk on fire"), std::string::npos);
  });
  abandoned.abandon(io_error("disk on fire"));
  capture.join();
}

// ---- A trainer snapshotted while it trains on ---------------------------------------------------

struct SlabState {
  std::vector<float> master, m, v;
  bool operator==(const SlabState&) const = default;
};

std::vector<SlabState> read_all(Trainer& t) {
  std::vector<SlabState> out;
  for (size_t i = 0; i < t.layout().slabs.size(); ++i) {
    const auto n = static_cast<size_t>(t.layout().slabs[i].numel);
    SlabState s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
    EXPECT_TRUE(
        t.read_slab_state(static_cast<int64_t>(i), s.master.data(), s.m.data(), s.v.data()).ok());
    out.push_back(std::move(s));
  }
  return out;
}

void train(Trainer& t, const TrainConfig& c, int64_t first_step, int64_t steps) {
  const int64_t n = c.grad_accum * c.batch_size * c.seq_len;
  for (int64_t s = first_step; s < first_step + steps; ++s) {
    const auto in = test::random_ints(n, 100 + static_cast<uint64_t>(s), 0,
                                      static_cast<int32_t>(c.model.vocab_size));
    const auto tg = test::random_ints(n, 200 + static_cast<uint64_t>(s), 0,
                                      static_cast<int32_t>(c.model.vocab_size));
    auto st = t.train_step(in.data(), tg.data());
    ASSERT_TRUE(st.ok()) << st.status().to_string();
  }
}

// Trains 2 steps, snapshots, trains 2 more while a thread captures the slabs (sleeping before
// each, so that training runs into the gate); the captures must be the standstill state at step
// 2 and the final state that of a run never snapshotted.
void expect_snapshot_exact(const TrainConfig& c, const std::string& what) {
  auto dev = test::make_test_device();
  std::vector<SlabState> at_boundary, undisturbed;
  {
    auto ref = create_trainer(*dev, c);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    train(**ref, c, 0, 2);
    at_boundary = read_all(**ref);
    train(**ref, c, 2, 2);
    undisturbed = read_all(**ref);
  }
  auto t = create_trainer(*dev, c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  train(**t, c, 0, 2);
  auto snap = (*t)->begin_snapshot();
  ASSERT_TRUE(snap.ok()) << what << ": " << snap.status().to_string();
  std::vector<SlabState> captured(at_boundary.size());
  Status capture_status;
  std::thread capture([&] {
    for (;;) {
      auto slab = snap->gate->next_ready();
      if (!slab.ok()) {
        capture_status = slab.status();
        return;
      }
      if (*slab < 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      SlabState& s = captured[static_cast<size_t>(*slab)];
      const auto n = at_boundary[static_cast<size_t>(*slab)].master.size();
      s = {std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
      capture_status = snap->read(*slab, [&](const SlabPiece& p) {
        const auto bytes = static_cast<size_t>(p.count) * 4;
        std::memcpy(s.master.data() + p.begin, p.master, bytes);
        std::memcpy(s.m.data() + p.begin, p.m, bytes);
        std::memcpy(s.v.data() + p.begin, p.v, bytes);
        return Status();
      });
      if (!capture_status.ok()) return;
      snap->gate->captured(*slab);
    }
  });
  train(**t, c, 2, 2);
  capture.join();
  ASSERT_TRUE(capture_status.ok()) << what << ": " << capture_status.to_string();
  EXPECT_TRUE(snap->gate->finished());
  for (size_t i = 0; i < captured.size(); ++i) {
    EXPECT_TRUE(captured[i] == at_boundary[i]) << what << ": slab " << i;
  }
  const auto final_state = read_all(**t);
  for (size_t i = 0; i < final_state.size(); ++i) {
    EXPECT_TRUE(final_state[i] == undisturbed[i]) << what << ": slab " << i << " after 4 steps";
  }
}

TEST(StateSnapshot, VerticalWithPendingStepsOnStorageIsTheBoundaryState) {
  const std::string dir = test::make_temp_dir("snapshot_vertical");
  expect_snapshot_exact(test::tiny_offload_config("vertical", dir), "vertical, storage");
}

TEST(StateSnapshot, VerticalAlphaSplitIsTheBoundaryState) {
  const std::string dir = test::make_temp_dir("snapshot_alpha");
  TrainConfig c = test::tiny_offload_config("vertical", dir);
  c.optim.grad_clip = 0;
  c.optim.alpha = 0.5;
  expect_snapshot_exact(c, "vertical alpha 0.5, storage");
  c.offload.optim_on_host = 1;
  expect_snapshot_exact(c, "vertical alpha 0.5, optimizer state on host");
}

// Note [Speculative steps]: with clipping on in every step, each speculative part 0 is repaired
// and its state slots swapped at the boundary; "auto" then waits for the norm, leaving both parts
// pending for the steps the snapshot races with.
TEST(StateSnapshot, SpeculativeStepsAreTheBoundaryState) {
  const std::string dir = test::make_temp_dir("snapshot_spec");
  TrainConfig c = test::tiny_offload_config("vertical", dir);
  c.optim.grad_clip = 1e-6f;
  c.optim.alpha = 0.5;
  c.optim.speculation = Speculation::on;
  expect_snapshot_exact(c, "vertical, speculative part 0 repaired, storage");
  c.offload.optim_on_host = 1;
  expect_snapshot_exact(c, "vertical, speculative part 0 repaired, optimizer state on host");
  c.optim.speculation = Speculation::automatic;
  expect_snapshot_exact(c, "vertical, speculation auto (waits after step 0), host");
}

TEST(StateSnapshot, HorizontalAndEmbedStateOnStorageIsTheBoundaryState) {
  const std::string dir = test::make_temp_dir("snapshot_horizontal");
  TrainConfig c = test::tiny_offload_config("horizontal", dir);
  c.offload.embed_optim_on_host = false;
  expect_snapshot_exact(c, "horizontal, embed state on storage");
  TrainConfig v = test::tiny_offload_config("vertical", dir);
  v.offload.embed_optim_on_host = false;
  v.precision = Precision::bf16;
  expect_snapshot_exact(v, "vertical bf16, embed state on storage");
}

TEST(StateSnapshot, TheInMemoryTrainerSavesAtAStandstill) {
  auto dev = test::make_test_device();
  TrainConfig c = test::tiny_offload_config("in_memory", test::make_temp_dir("snapshot_mem"));
  auto t = create_trainer(*dev, c);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->begin_snapshot().status().code(), ErrorCode::unavailable);
}

}  // namespace
}  // namespace strata
