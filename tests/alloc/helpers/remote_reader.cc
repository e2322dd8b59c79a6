// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_alloc_remote_reader FD [attach|noattach] — a reader process of a
// ReaderRegistry (alloc/reader_registry.h), for
// tests/alloc/reader_registry_test.cc.  FD is the registry's memfd,
// inherited with FD_CLOEXEC clear.
//
// Prints "ready PID RC" (RC: attach()'s result, or "-" for noattach), then
// answers each command line on stdin with one line on stdout:
//   attach        -> "attach RC"
//   lock          -> "lock SLOT"      read_lock() (nests)
//   unlock        -> "unlock"
//   in            -> "in 0|1"         in_read_section()
//   thread        -> "thread SLOT"    a thread reads once and exits (joined)
//   fork          -> "fork PID"       the child reads (in the section it
//                    inherited, else in a new one), waits for SIGUSR1,
//                    leaves; exits 0 if it had a slot of its own and was
//                    inside when it began, else 1
//   reap          -> "reap STATUS"    waitpid() of that child: exit code, or
//                    -signal
//   exec attach|noattach             execs itself (prints "ready" again)
//   sig           -> "sig IN_HANDLER IN_AFTER"  raise() a signal whose
//                    handler reads
//   storm N       -> "storm BAD HANDLED MISMATCH"  N nested sections (and
//                    until 100 signals were handled) while another
//                    thread signals this one; BAD: nesting seen
//                    wrong, MISMATCH: the slot's nest count != the thread's after
//   exit          -> exit(0)
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "alloc/reader_registry.h"

namespace {

namespace rr = norefs::alloc::remote_rcu;

int g_fd = -1;
pid_t g_child = -1;
std::atomic<int> g_handled{0};
volatile sig_atomic_t g_handler_in = 0;

void reply(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

void on_signal(int) {
  int saved = errno;
  rr::read_lock();
  g_handler_in = rr::in_read_section() ? 1 : 0;
  rr::read_unlock();
  g_handled.fetch_add(1, std::memory_order_relaxed);
  errno = saved;
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

[[noreturn]] void child_main(long parent_slot) {
  bool inherited = rr::in_read_section();
  if (!inherited) rr::read_lock();
  long mine = rr::debug_slot_index();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  int sig = 0;
  sigwait(&set, &sig);
  bool inside = rr::in_read_section();
  rr::read_unlock();
  bool ok = mine >= 0 && mine != parent_slot && inside;
  std::exit(ok ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FD [attach|noattach]\n", argv[0]);
    return 2;
  }
  g_fd = std::atoi(argv[1]);
  std::string rc = "-";
  if (argc > 2 && std::strcmp(argv[2], "attach") == 0) rc = std::to_string(rr::attach(g_fd));
  reply("ready " + std::to_string(getpid()) + " " + rc);

  char line[256];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    std::string cmd(line);
    while (!cmd.empty() && (cmd.back() == '\n' || cmd.back() == ' ')) cmd.pop_back();
    if (cmd == "attach") {
      reply("attach " + std::to_string(rr::attach(g_fd)));
    } else if (cmd == "lock") {
      rr::read_lock();
      reply("lock " + std::to_string(rr::debug_slot_index()));
    } else if (cmd == "unlock") {
      rr::read_unlock();
      reply("unlock");
    } else if (cmd == "in") {
      reply(std::string("in ") + (rr::in_read_section() ? "1" : "0"));
    } else if (cmd == "thread") {
      long slot = -1;
      std::thread([&] {
        rr::ReadGuard g;
        slot = rr::debug_slot_index();
      }).join();
      reply("thread " + std::to_string(slot));
    } else if (cmd == "fork") {
      long parent_slot = rr::debug_slot_index();
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR1);
      sigprocmask(SIG_BLOCK, &set, nullptr);  // the child waits for it with sigwait()
      pid_t pid = fork();
      if (pid == 0) child_main(parent_slot);
      g_child = pid;
      reply("fork " + std::to_string(pid));
    } else if (cmd == "reap") {
      int status = 0;
      if (waitpid(g_child, &status, 0) != g_child) status = -1;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      reply("reap " + std::to_string(code));
    } else if (cmd.rfind("exec ", 0) == 0) {
      std::string mode = cmd.substr(5);
      std::fflush(stdout);
      char* args[] = {argv[0], argv[1], mode.data(), nullptr};
      execv(argv[0], args);
      reply("exec-failed");
    } else if (cmd == "sig") {
      install_handler();
      g_handler_in = 0;
      raise(SIGUSR2);
      reply(std::string("sig ") + (g_handler_in ? "1" : "0") + " " +
            (rr::in_read_section() ? "1" : "0"));
    } else if (cmd.rfind("storm ", 0) == 0) {
      long n = std::atol(cmd.c_str() + 6);
      install_handler();
      rr::register_thread();  // registration is not for a signal handler
      g_handled = 0;
      pthread_t self = pthread_self();
      std::atomic<bool> stop{false};
      std::thread signaller([&] {
        while (!stop.load(std::memory_order_relaxed)) {
          pthread_kill(self, SIGUSR2);
          std::this_thread::yield();
        }
      });
      long bad = 0;
      // At least n iterations and 100 signals handled (the signaller may
      // start late), at most 3 s.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      for (long i = 0; (i < n || g_handled.load(std::memory_order_relaxed) < 100) &&
                       std::chrono::steady_clock::now() < deadline;
           i++) {
        rr::read_lock();
        rr::read_lock();
        if (!rr::in_read_section()) bad++;
        rr::read_unlock();
        if (!rr::in_read_section()) bad++;
        rr::read_unlock();
        if (rr::in_read_section()) bad++;
      }
      stop = true;
      signaller.join();
      namespace d = norefs::alloc::remote_rcu::detail;
      // The nest counts must agree.  The phase bits of an inactive word may
      // not: a handler that ran between the outermost unlock's two stores
      // leaves the thread-local with the phase it read (see the header).
      constexpr std::uint64_t kNest = norefs::alloc::reader_registry_layout::kNestMask;
      long mismatch =
          (d::tls_slot->ctr.load(std::memory_order_relaxed) & kNest) != (d::tls_ctr & kNest) ? 1
                                                                                             : 0;
      reply("storm " + std::to_string(bad) + " " + std::to_string(g_handled.load()) + " " +
            std::to_string(mismatch));
    } else if (cmd == "exit") {
      std::exit(0);
    } else {
      reply("unknown " + cmd);
    }
  }
  return 0;
}
