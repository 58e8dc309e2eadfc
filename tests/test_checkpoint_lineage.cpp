// Note [Checkpoint lineage]: which temporary save directories are leftovers. A save removes
// .tmp-step-N-<pid> only when process <pid> is gone or a zombie (killed, not yet reaped: it
// writes nothing more); never while it lives.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "formats/checkpoint_lineage.h"

namespace strata {
namespace {

std::string tmp_dir_of(pid_t pid) { return ".tmp-step-00000004-" + std::to_string(pid); }

TEST(CheckpointLineage, StaleSaveDirsAreThoseOfGoneOrZombieProcesses) {
  EXPECT_FALSE(is_stale_save_dir(tmp_dir_of(::getppid()))) << "a live process's";
  EXPECT_TRUE(is_stale_save_dir(tmp_dir_of(::getpid()))) << "this process's own leftover";
  EXPECT_FALSE(is_stale_save_dir("step-00000004"));
  EXPECT_TRUE(is_stale_save_dir(".tmp-step-00000004-notapid"));

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Not reaped yet: a zombie once it has exited.
  for (int i = 0; i < 200; ++i) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == child) {
      break;
    }
    ::usleep(10000);
  }
  EXPECT_TRUE(is_stale_save_dir(tmp_dir_of(child))) << "a zombie's";
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(is_stale_save_dir(tmp_dir_of(child))) << "a reaped process's";
}

}  // namespace
}  // namespace strata
