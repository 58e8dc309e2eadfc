// Small synchronization steps that several thread owners share.
#pragma once

#include <condition_variable>
#include <mutex>

namespace strata {

// Sets `flag` under `mutex`, then wakes every thread waiting on `cv`. Setting it under the lock
// is what makes the wake-up certain: a waiter checks the flag and goes to sleep under that same
// lock, so it cannot check, miss the notify, and sleep through it. The stop step of a worker
// thread that sleeps until it has work or is told to stop; the caller joins it afterwards.
inline void set_flag_and_notify_all(std::mutex& mutex, bool& flag, std::condition_variable& cv) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    flag = true;
  }
  cv.notify_all();
}

}  // namespace strata
