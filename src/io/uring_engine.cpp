#include "io/uring_engine.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/check.h"
#include "core/log.h"

namespace strata {

using io_detail::Block;
using io_detail::Next;
using io_detail::RequestSlot;

namespace {

// user_data of the eventfd read that wakes the ring's thread; block entries use their index.
constexpr uint64_t kWakeTag = ~0ull;
// The kernel's limit for one registered buffer.
constexpr uint64_t kMaxRegisteredBytes = 1ull << 30;

// Setup flags to try, best first. Older kernels reject the newer flags with EINVAL.
struct SetupFlags {
  unsigned flags;
  const char* name;
};
constexpr SetupFlags kSetupFlags[] = {
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL,
     "SINGLE_ISSUER|DEFER_TASKRUN|SUBMIT_ALL"},                                              // 6.1+
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN, "SINGLE_ISSUER|COOP_TASKRUN"},  // 6.0
    {0, "default"},
};

}  // namespace

// Named, not anonymous: UringEngine::Ring has external linkage and holds these.
namespace io_detail {

// Blocks [next, next + step, ...) of one request, for one ring.
struct WorkItem {
  RequestSlot* slot;
  uint64_t next;
  uint64_t step;
};

// A registered buffer as the ring knows it.
struct Registered {
  uintptr_t begin;
  uintptr_t end;
  int index;
};

}  // namespace io_detail

using io_detail::Registered;
using io_detail::WorkItem;

class UringEngine::Ring {
 public:
  Ring(UringEngine& engine, int id) : engine_(engine), id_(id) {}
  ~Ring() { stop(); }

  // Starts the thread and waits until it has set up its ring.
  Status start() {
    efd_ = eventfd(0, EFD_CLOEXEC);
    if (efd_ < 0) return unavailable(std::string("eventfd: ") + std::strerror(errno));
    std::future<Status> ready = setup_.get_future();
    try {
      thread_ = std::thread(&Ring::run, this);
    } catch (const std::system_error& e) {
      return unavailable(std::string("io_uring: cannot start a ring thread: ") + e.what());
    }
    return ready.get();
  }

  // Finishes everything queued, then ends the thread. Idempotent.
  void stop() {
    if (!thread_.joinable()) {
      close_eventfd();
      return;
    }
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      has_work_.store(true, std::memory_order_seq_cst);
    }
    wake();
    thread_.join();
    close_eventfd();
  }

  // False when the ring has stopped submitting (Note [A failed submission breaks the io_uring
  // engine]): the item was not taken and the caller fails its blocks.
  bool push(const WorkItem& item) {
    {
      std::lock_guard lock(mu_);
      if (broken_) return false;
      incoming_.push_back(item);
      has_work_.store(true, std::memory_order_seq_cst);
    }
    // Pairs with the thread's store to sleeping_ then load of has_work_: either it sees our work
    // before sleeping, or we see it asleep and wake it.
    if (sleeping_.exchange(false, std::memory_order_seq_cst)) wake();
    return true;
  }

  // Runs on the ring's thread: replaces the registered buffers (none for an empty list).
  Status register_buffers(const std::vector<iovec>& iovecs) {
    std::promise<Status> done;
    std::future<Status> result = done.get_future();
    {
      std::lock_guard lock(mu_);
      if (broken_) return engine_.broken_error("io_uring_register_buffers");
      register_iovecs_ = &iovecs;
      register_done_ = &done;
      has_work_.store(true, std::memory_order_seq_cst);
    }
    wake();
    return result.get();
  }

  int64_t fixed_transfers() const { return fixed_transfers_.load(std::memory_order_relaxed); }
  const char* setup_name() const { return setup_name_; }

 private:
  void run();
  void take_incoming();
  void fill();
  int submit_and_wait();
  void reap();
  void prepare(uint32_t entry);
  void arm_wake();
  Status apply_registration(const std::vector<iovec>& iovecs);
  int find_registered(const IoRequest& io) const;

  // Note [A failed submission breaks the io_uring engine], in the order it happens.
  void stop_submitting(int err);
  void fail_unsubmitted();
  void drain_in_flight();
  void fail_in_flight(const std::string& why);
  uint64_t unsubmitted_blocks() const;
  // Calls visit(user_data) for each SQE prepared but not yet taken by the kernel, oldest first.
  // Without SQPOLL the kernel takes SQEs only inside io_uring_enter, so after a failed enter
  // these are exactly the ones it never saw.
  template <typename Visit>
  void for_each_unsubmitted(Visit&& visit) const {
    for (unsigned at = *ring_.sq.khead; at != ring_.sq.sqe_tail; at++) {
      visit(ring_.sq.sqes[at & ring_.sq.ring_mask].user_data);
    }
  }

  void wake() {
    const uint64_t one = 1;
    // Not a runtime condition: adding 1 to our own eventfd fails only if the fd was closed or
    // clobbered behind our back (EBADF, a bug elsewhere). Filling the counter would take 2^64 - 2
    // unread wakes, and on this blocking eventfd would wait rather than fail. Going on would
    // leave the ring asleep with work queued, a silent hang.
    if (write(efd_, &one, sizeof one) != static_cast<ssize_t>(sizeof one)) {
      STRATA_CHECK_MSG(false, ("eventfd write failed: " + errno_text(errno)).c_str());
    }
  }
  void close_eventfd() {
    if (efd_ >= 0) ::close(efd_);
    efd_ = -1;
  }

  UringEngine& engine_;
  const int id_;
  std::thread thread_;
  std::promise<Status> setup_;
  const char* setup_name_ = "";
  int efd_ = -1;

  // Shared with submitters, guarded by mu_.
  std::mutex mu_;
  std::vector<WorkItem> incoming_;
  bool stop_ = false;
  const std::vector<iovec>* register_iovecs_ = nullptr;
  std::promise<Status>* register_done_ = nullptr;
  bool broken_ = false;  // the ring submits nothing more: push and register_buffers refuse
  std::atomic<bool> has_work_{false};  // anything in the fields above (read without mu_)
  std::atomic<bool> sleeping_{false};  // the thread may block with room for more blocks

  // Owned by the ring's thread.
  io_uring ring_{};
  uint64_t wake_value_ = 0;  // the eventfd read's target
  bool stopping_ = false;
  std::vector<WorkItem> pending_;  // taken from incoming_, not yet fully in flight
  size_t pending_head_ = 0;
  std::vector<Block> entries_;  // one per possible in-flight block; user_data is the index
  std::vector<uint32_t> free_entries_;
  std::vector<int> fixed_index_;        // per entry: registered buffer index, or -1
  std::vector<Registered> registered_;  // sorted by begin
  std::atomic<int64_t> fixed_transfers_{0};
  std::string submit_failure_;  // why the ring stopped submitting; empty while it works
};

void UringEngine::Ring::run() {
  const int depth = engine_.options_.queue_depth;
  int err = EINVAL;
  for (const SetupFlags& f : kSetupFlags) {
    io_uring_params params{};
    params.flags = f.flags;
    // One extra entry for the armed eventfd read; the CQ (twice the SQ) can never overflow.
    err = -io_uring_queue_init_params(static_cast<unsigned>(depth) + 1, &ring_, &params);
    if (err == 0) {
      setup_name_ = f.name;
      break;
    }
    if (err != EINVAL) break;  // not a question of flags: no point trying older ones
  }
  if (err != 0) {
    setup_.set_value(unavailable("io_uring_queue_init (ring " + std::to_string(id_) +
                                 "): " + std::strerror(err)));
    return;
  }
  entries_.resize(static_cast<size_t>(depth));
  fixed_index_.assign(static_cast<size_t>(depth), -1);
  for (int i = depth - 1; i >= 0; i--) free_entries_.push_back(static_cast<uint32_t>(i));
  setup_.set_value(Status());

  arm_wake();
  while (true) {
    take_incoming();
    fill();
    const bool idle = free_entries_.size() == entries_.size();
    if (stopping_ && idle && pending_head_ == pending_.size()) break;
    if (!free_entries_.empty()) {
      // Room for more: announce the sleep, then look once more (see push()).
      sleeping_.store(true, std::memory_order_seq_cst);
      if (has_work_.load(std::memory_order_seq_cst)) {
        sleeping_.store(false, std::memory_order_relaxed);
        continue;
      }
    }
    const int ret = submit_and_wait();
    sleeping_.store(false, std::memory_order_relaxed);
    // EINTR: a signal; EAGAIN/EBUSY: the kernel is short of resources or CQ space: reap and retry.
    if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
      stop_submitting(-ret);  // returns once the kernel holds nothing of ours
      break;
    }
    reap();
  }
  io_uring_queue_exit(&ring_);
}

int UringEngine::Ring::submit_and_wait() {
  if (IoFaultHook* hook = engine_.options_.fault_hook.get()) {
    const uint64_t blocks = unsubmitted_blocks();
    if (blocks > 0) {
      if (const int err = hook->on_uring_submit(blocks); err != 0) return -err;
    }
  }
  return io_uring_submit_and_wait(&ring_, 1);
}

uint64_t UringEngine::Ring::unsubmitted_blocks() const {
  uint64_t blocks = 0;
  for_each_unsubmitted([&](uint64_t tag) { blocks += tag != kWakeTag; });
  return blocks;
}

void UringEngine::Ring::stop_submitting(int err) {
  submit_failure_ =
      "io_uring submission failed on ring " + std::to_string(id_) + ": " + errno_text(err);
  log_error(submit_failure_ + "; the io_uring engine accepts no new requests");
  // Broken first, so new requests are refused before the ring stops taking them.
  engine_.mark_broken(submit_failure_);
  std::vector<WorkItem> queued;
  std::promise<Status>* registration = nullptr;
  {
    std::lock_guard lock(mu_);
    broken_ = true;
    queued.swap(incoming_);
    std::swap(registration, register_done_);
    register_iovecs_ = nullptr;
  }
  if (registration != nullptr) {
    registration->set_value(engine_.broken_error("io_uring_register_buffers"));
  }
  fail_unsubmitted();
  for (; pending_head_ < pending_.size(); pending_head_++) {
    const WorkItem& item = pending_[pending_head_];
    engine_.fail_blocks(item.slot, item.next, item.step, submit_failure_);
  }
  for (const WorkItem& item : queued) {
    engine_.fail_blocks(item.slot, item.next, item.step, submit_failure_);
  }
  drain_in_flight();
}

void UringEngine::Ring::fail_unsubmitted() {
  for_each_unsubmitted([&](uint64_t tag) {
    if (tag == kWakeTag) return;
    const auto entry = static_cast<uint32_t>(tag);
    engine_.fail_block(entries_[entry], submit_failure_);
    free_entries_.push_back(entry);
  });
  // Those SQEs stay in the SQ: from here on the ring only waits (io_uring_wait_cqe submits
  // nothing), so the kernel never takes them.
}

void UringEngine::Ring::drain_in_flight() {
  while (free_entries_.size() < entries_.size()) {
    io_uring_cqe* cqe = nullptr;
    const int ret = io_uring_wait_cqe(&ring_, &cqe);
    if (ret == -EINTR || ret == -EAGAIN || ret == -EBUSY) continue;
    if (ret < 0) {
      fail_in_flight(submit_failure_ +
                     "; then waiting for completions failed: " + errno_text(-ret));
      return;
    }
    reap();  // resubmissions fail with submit_failure_; the wake read is not re-armed
  }
}

void UringEngine::Ring::fail_in_flight(const std::string& why) {
  std::vector<bool> is_free(entries_.size(), false);
  for (uint32_t entry : free_entries_) is_free[entry] = true;
  for (uint32_t entry = 0; entry < entries_.size(); entry++) {
    if (is_free[entry]) continue;
    engine_.fail_block(entries_[entry], why);
    free_entries_.push_back(entry);
  }
}

void UringEngine::Ring::take_incoming() {
  if (!has_work_.load(std::memory_order_acquire)) return;
  const std::vector<iovec>* iovecs = nullptr;
  std::promise<Status>* done = nullptr;
  {
    std::lock_guard lock(mu_);
    if (pending_head_ == pending_.size()) {
      pending_.clear();
      pending_head_ = 0;
      pending_.swap(incoming_);  // both keep their capacity: no allocation in steady state
    } else {
      pending_.insert(pending_.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    stopping_ = stop_;
    std::swap(iovecs, register_iovecs_);
    std::swap(done, register_done_);
    has_work_.store(false, std::memory_order_relaxed);
  }
  if (done != nullptr) done->set_value(apply_registration(*iovecs));
}

void UringEngine::Ring::fill() {
  while (!free_entries_.empty() && pending_head_ < pending_.size()) {
    WorkItem& item = pending_[pending_head_];
    Block block = engine_.make_block(item.slot, item.next);
    item.next += item.step;
    if (item.next >= item.slot->blocks) pending_head_++;
    if (request_failed(block)) {
      engine_.finish_block(block, nullptr);  // its request already failed: skip the I/O
      continue;
    }
    const uint32_t entry = free_entries_.back();
    free_entries_.pop_back();
    entries_[entry] = block;
    fixed_index_[entry] = find_registered(block.io);
    prepare(entry);
  }
}

void UringEngine::Ring::prepare(uint32_t entry) {
  const Block& b = entries_[entry];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  // The SQ has depth + 1 entries and at most depth blocks plus the wake read are unsubmitted.
  STRATA_CHECK(sqe != nullptr);
  void* buffer = static_cast<char*>(b.io.buffer) + b.done;
  const auto length = static_cast<unsigned>(b.io.length - b.done);  // block_size <= 1 GiB
  const uint64_t offset = b.io.offset + b.done;
  const int fd = b.io.file->fd;
  const int fixed = fixed_index_[entry];
  if (fixed >= 0) {
    if (b.io.op == IoOp::read) {
      io_uring_prep_read_fixed(sqe, fd, buffer, length, offset, fixed);
    } else {
      io_uring_prep_write_fixed(sqe, fd, buffer, length, offset, fixed);
    }
    fixed_transfers_.fetch_add(1, std::memory_order_relaxed);
  } else if (b.io.op == IoOp::read) {
    io_uring_prep_read(sqe, fd, buffer, length, offset);
  } else {
    io_uring_prep_write(sqe, fd, buffer, length, offset);
  }
  io_uring_sqe_set_data64(sqe, entry);
}

void UringEngine::Ring::arm_wake() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  STRATA_CHECK(sqe != nullptr);
  io_uring_prep_read(sqe, efd_, &wake_value_, sizeof wake_value_, 0);
  io_uring_sqe_set_data64(sqe, kWakeTag);
}

void UringEngine::Ring::reap() {
  unsigned head = 0;
  unsigned seen = 0;
  bool rearm = false;
  io_uring_cqe* cqe = nullptr;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    seen++;
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    if (tag == kWakeTag) {
      rearm = true;  // whatever woke us is picked up by take_incoming()
      continue;
    }
    STRATA_CHECK(tag < entries_.size());
    const auto entry = static_cast<uint32_t>(tag);
    if (engine_.finish_attempt(entries_[entry], cqe->res) == Next::finished) {
      free_entries_.push_back(entry);
    } else if (submit_failure_.empty()) {
      prepare(entry);  // the remainder, or the same bytes after EINTR/EAGAIN
    } else {
      engine_.fail_block(entries_[entry], submit_failure_);  // it cannot be resubmitted
      free_entries_.push_back(entry);
    }
  }
  io_uring_cq_advance(&ring_, seen);
  // A ring that stopped submitting takes no more work, so it needs no more waking.
  if (rearm && submit_failure_.empty()) arm_wake();
}

Status UringEngine::Ring::apply_registration(const std::vector<iovec>& iovecs) {
  if (!registered_.empty()) {
    registered_.clear();
    const int ret = io_uring_unregister_buffers(&ring_);
    if (ret < 0) return io_error(std::string("io_uring_unregister_buffers: ") + strerror(-ret));
  }
  if (iovecs.empty()) return Status();
  const int ret =
      io_uring_register_buffers(&ring_, iovecs.data(), static_cast<unsigned>(iovecs.size()));
  if (ret < 0) {
    return io_error(std::string("io_uring_register_buffers: ") + std::strerror(-ret) +
                    (ret == -ENOMEM ? " (over RLIMIT_MEMLOCK?)" : ""));
  }
  for (size_t i = 0; i < iovecs.size(); i++) {
    const auto begin = reinterpret_cast<uintptr_t>(iovecs[i].iov_base);
    registered_.push_back({begin, begin + iovecs[i].iov_len, static_cast<int>(i)});
  }
  std::sort(registered_.begin(), registered_.end(),
            [](const Registered& a, const Registered& b) { return a.begin < b.begin; });
  return Status();
}

int UringEngine::Ring::find_registered(const IoRequest& io) const {
  if (registered_.empty()) return -1;
  const auto begin = reinterpret_cast<uintptr_t>(io.buffer);
  // The last registered buffer starting at or before `begin`.
  auto it = std::upper_bound(registered_.begin(), registered_.end(), begin,
                             [](uintptr_t value, const Registered& r) { return value < r.begin; });
  if (it == registered_.begin()) return -1;
  --it;
  return begin + io.length <= it->end ? it->index : -1;
}

UringEngine::UringEngine(const IoEngineOptions& options) : BlockEngine(options) {}

UringEngine::~UringEngine() {
  for (auto& ring : rings_) ring->stop();
}

Result<std::unique_ptr<UringEngine>> UringEngine::create(const IoEngineOptions& options) {
  STRATA_RETURN_IF_ERROR(io_detail::validate_engine_options(options));
  std::unique_ptr<UringEngine> engine(new UringEngine(options));
  for (int i = 0; i < options.workers; i++) {
    engine->rings_.push_back(std::make_unique<Ring>(*engine, i));
    STRATA_RETURN_IF_ERROR(engine->rings_.back()->start());
  }
  return engine;
}

void UringEngine::enqueue(RequestSlot* slot) {
  const uint64_t rings = rings_.size();
  const uint64_t first = next_ring_.fetch_add(1, std::memory_order_relaxed) % rings;
  const uint64_t stripes = std::min(rings, slot->blocks);
  for (uint64_t i = 0; i < stripes; i++) {
    if (!rings_[(first + i) % rings]->push({slot, i, rings})) {
      // That ring broke after submit() checked (the engine was marked broken before the ring
      // refused work, so the reason is set): this stripe can never run.
      fail_blocks(slot, i, rings, broken_message());
    }
  }
}

Status UringEngine::register_buffers(const std::vector<std::pair<void*, uint64_t>>& buffers) {
  STRATA_RETURN_IF_ERROR(broken_error("register_buffers"));
  if (in_flight() != 0) {
    return invalid_argument("register_buffers with " + std::to_string(in_flight()) +
                            " requests in flight");
  }
  std::vector<iovec> iovecs;
  for (const auto& [data, bytes] : buffers) {
    if (data == nullptr || bytes == 0) {
      return invalid_argument("register_buffers: a buffer is null or empty");
    }
    // The kernel takes at most 1 GiB per buffer: register bigger ones as consecutive pieces (a
    // block straddling two pieces simply goes unregistered).
    for (uint64_t at = 0; at < bytes; at += kMaxRegisteredBytes) {
      iovecs.push_back({static_cast<char*>(data) + at, std::min(kMaxRegisteredBytes, bytes - at)});
    }
  }
  Status first;
  for (auto& ring : rings_) {
    Status s = ring->register_buffers(iovecs);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  if (first.ok()) return Status();
  // Fixed buffers only save page pinning; without them every transfer still works.
  for (auto& ring : rings_) (void)ring->register_buffers({});
  log_warn("io_uring: buffers not registered, transfers run unregistered: " + first.message());
  return Status();
}

std::string UringEngine::describe() const {
  return std::to_string(rings_.size()) + (rings_.size() == 1 ? " ring" : " rings") + " x depth " +
         std::to_string(options_.queue_depth) + ", " +
         (rings_.empty() ? "" : rings_.front()->setup_name());
}

int64_t UringEngine::fixed_buffer_transfers() const {
  int64_t n = 0;
  for (const auto& ring : rings_) n += ring->fixed_transfers();
  return n;
}

}  // namespace strata
