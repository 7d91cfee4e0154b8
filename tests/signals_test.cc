#include "engine/train/signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>
#include <vector>

namespace crumb {
namespace {

// Copies of one stop request handled at the same moment on different threads (a terminal's Ctrl-C to the
// process group and `timeout` forwarding it land together; Linux hands a process's signal to another
// thread while the first one's is pending) are one request: none of them may end the process as a second
// signal would. Each trial is a child process (the handlers' state lasts a process) whose threads all
// signal themselves at once; it must come back to report the stop.
TEST(Signals, CopiesHandledTogetherOnThreadsAreOneStop) {
  constexpr int kTrials = 100, kThreads = 4;
  int ended_by_signal = 0, other = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      catch_interrupts();
      StopOnSignal stop;
      std::atomic<int> ready{0};
      std::vector<std::thread> threads;
      for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&] {
          ready.fetch_add(1);
          while (ready.load() < kThreads) {
          }
          pthread_kill(pthread_self(), SIGINT);
        });
      for (std::thread& t : threads) t.join();
      _exit(interrupted() == SIGINT ? 0 : 3);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    // Ended as the signal ends a process: by it, or by 128 + its number (raised again inside its handler,
    // where it is blocked).
    if (WIFSIGNALED(status) || WEXITSTATUS(status) == 128 + SIGINT)
      ++ended_by_signal;
    else if (WEXITSTATUS(status) != 0)
      ++other;
  }
  EXPECT_EQ(ended_by_signal, 0) << "of " << kTrials << " trials, a copy of the signal ended the process";
  EXPECT_EQ(other, 0) << "of " << kTrials << " trials, the stop was not noted";
}

// Each run starts afresh (a second fit after a stopped one trains, and its first signal stops it rather than
// ending the process), and outside a run a signal ends the process by that signal, as its default action
// would, so that a shell sees a process killed by SIGINT.
TEST(Signals, EachRunStartsAfreshAndOutsideOneTheSignalEndsTheProcess) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    catch_interrupts();
    {
      StopOnSignal first;
      raise(SIGINT);
      if (interrupted() != SIGINT) _exit(3);
    }
    if (interrupted() != 0) _exit(4);
    {
      StopOnSignal second;
      if (interrupted() != 0) _exit(5);
      raise(SIGTERM);  // the first of this run: noted, not the end
      if (interrupted() != SIGTERM) _exit(6);
    }
    raise(SIGINT);
    _exit(7);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFEXITED(status)) << "exit code " << WEXITSTATUS(status);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// A host that keeps SIGINT (Python) has SIGTERM caught for one run only: a stop during it, the default
// action after it; a handler of the host's own is left alone.
TEST(Signals, CatchTerminateHoldsForOneRun) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    {
      CatchTerminate term;
      StopOnSignal run;
      raise(SIGTERM);
      if (interrupted() != SIGTERM) _exit(3);
    }
    struct sigaction own {};
    own.sa_handler = SIG_IGN;
    sigaction(SIGTERM, &own, nullptr);
    {
      CatchTerminate term;
      StopOnSignal run;
      raise(SIGTERM);  // the host's own action (ignore) stays
      if (interrupted() != 0) _exit(4);
    }
    own.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &own, nullptr);
    raise(SIGTERM);
    _exit(5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFEXITED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace crumb
