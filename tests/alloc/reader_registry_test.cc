// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The cross-process grace period (alloc/reader_registry.h), with readers in
// separate processes (the helper norefs_alloc_remote_reader, exec'd with the
// registry's fd):
//  1. synchronize() waits for a remote reader inside a section, not for one
//     outside, and for the outermost unlock of a nested one;
//  2. a reader killed (-9) inside a section does not stop grace periods: its
//     slot is reclaimed (zombie or reaped), and an idle dead one by a sweep;
//  3. a slot whose pid is alive but whose start time differs is reclaimed;
//     with the right start time it is waited for (forged slots);
//  4. a stopped reader (SIGSTOP) is waited for and named by stats();
//  5. fork outside and inside a section, thread exit, exec (with and without
//     attaching again, inside and outside a section), a signal handler that
//     reads inside another section;
//  6. rcu::synchronize() and rcu::call() wait for remote readers;
//  7. the cost when nothing can be waited for: no registry -> none is
//     created or consulted; a registry with no slot in use -> no membarrier
//     (stats().membarriers);
//  8. the test control debug_ignore_readers() returns at once.
// Timing rule (test_util.h): sleeps only give a broken registry time to
// return early; the bounds on returning are far above need.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alloc/reader_registry.h"
#include "test_util.h"

extern char** environ;

namespace norefs::alloc::test {
namespace registry_test {

namespace layout = reader_registry_layout;

// A reader process: the helper with the registry's fd as fd 3 (adddup2
// clears FD_CLOEXEC on the copy), stdin and stdout as pipes.
class RemoteReader {
 public:
  explicit RemoteReader(const ReaderRegistry& reg, bool attach = true) {
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_adddup2(&fa, reg.fd(), 3);
    std::string prog = NOREFS_HELPER_REMOTE_READER;
    std::string mode = attach ? "attach" : "noattach";
    char fd_arg[] = "3";
    char* argv[] = {prog.data(), fd_arg, mode.data(), nullptr};
    if (posix_spawn(&pid_, prog.c_str(), &fa, nullptr, argv, environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(to[0]);
    close(from[1]);
    to_ = to[1];
    from_ = from[0];
    ready_ = line();
  }
  ~RemoteReader() {
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  RemoteReader(const RemoteReader&) = delete;
  RemoteReader& operator=(const RemoteReader&) = delete;

  pid_t pid() const { return pid_; }
  // "ready PID RC" as first printed.
  const std::string& ready() const { return ready_; }
  bool attached_ok() const { return ready_ == "ready " + std::to_string(pid_) + " 0"; }

  // One line, "" on EOF or after 10 s.
  std::string line() {
    for (;;) {
      auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, 10'000) <= 0) return "";
      char tmp[256];
      ssize_t n = read(from_, tmp, sizeof tmp);
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
  }
  void send(const std::string& cmd) {
    std::string l = cmd + "\n";
    EXPECT_EQ(write(to_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  std::string ask(const std::string& cmd) {
    send(cmd);
    return line();
  }
  // Exits (thread_local destructors run) and reaps; the exit code.
  int exit() {
    send("exit");
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // kill -9; reaped only if `reap`.
  void kill9(bool reap) {
    kill(pid_, SIGKILL);
    if (reap) {
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  void reap() {
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buf_;
  std::string ready_;
};

// The registry's shared memory, mapped by the test: to forge slots.
class Mapping {
 public:
  explicit Mapping(const ReaderRegistry& reg) {
    size_ = static_cast<std::size_t>(lseek(reg.fd(), 0, SEEK_END));
    mem_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, reg.fd(), 0);
  }
  ~Mapping() { munmap(mem_, size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  layout::Header& header() const { return *static_cast<layout::Header*>(mem_); }
  layout::Slot& slot(std::size_t i) const {
    return reinterpret_cast<layout::Slot*>(static_cast<char*>(mem_) +
                                           header().slot_offset.load())[i];
  }

 private:
  void* mem_;
  std::size_t size_;
};

// A call (synchronize(), ...) on its own thread, to watch it wait.  If it
// still waits when the test ends (a broken registry), that fails the test,
// and every slot of `unblock` is taken out of its section so that the
// thread can be joined: a broken property fails, it does not hang.
class Async {
 public:
  Async(const ReaderRegistry& unblock, std::function<void()> f)
      : unblock_(unblock), thread_([this, f = std::move(f)] {
          f();
          done_.store(true, std::memory_order_release);
        }) {}
  ~Async() {
    if (!done()) {
      ADD_FAILURE() << "still waiting at the end of the test; readers forced out";
      Mapping m(unblock_);
      while (!done()) {
        for (std::size_t i = 0; i < unblock_.capacity(); i++) m.slot(i).ctr.store(0);
        std::this_thread::sleep_for(1ms);
      }
    }
    thread_.join();
  }
  Async(const Async&) = delete;
  Async& operator=(const Async&) = delete;
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Whether it finished within `limit`.
  bool wait(std::chrono::milliseconds limit) {
    return wait_until([this] { return done(); }, limit);
  }

 private:
  const ReaderRegistry& unblock_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

constexpr auto kHold = 100ms;     // how long a broken registry gets to return early
constexpr auto kReturn = 2000ms;  // bound on returning once nothing holds it

// The second word of "lock SLOT", "fork PID", ...
long field(const std::string& l, int n = 1) {
  std::istringstream is(l);
  std::string w;
  for (int i = 0; i <= n; i++) is >> w;
  return std::stol(w);
}

// Field 22 of a stat file.
std::uint64_t start_time(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  std::string s(buf);
  std::istringstream is(s.substr(s.rfind(')') + 2));
  std::string w;
  for (int i = 3; i <= 22; i++) is >> w;
  return std::stoull(w);
}

TEST(RemoteReaderTest, SynchronizeWaitsForReaderInsideOnly) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(reg.stats().slots_in_use, 1u);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "synchronize() returned while a remote reader was inside";
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_TRUE(sync.wait(kReturn)) << "synchronize() still waits after the reader left";
  }
  EXPECT_EQ(reg.stats().waited, 1u);

  // Registered, outside any section: nothing to wait for.
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(reg.stats().waited, 1u);

  // Nested: only the outermost unlock ends the section.
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("lock"), "lock 0");
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_EQ(r.ask("in"), "in 1");
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "returned after an inner unlock, the outer section still open";
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(r.ask("in"), "in 0");
  EXPECT_EQ(r.exit(), 0);
  EXPECT_EQ(reg.stats().slots_in_use, 0u) << "exit released the slot";
  EXPECT_EQ(reg.stats().reclaimed_dead, 0u);
}

TEST(RemoteReaderTest, KilledReaderIsReclaimed) {
  ReaderRegistry reg(16);
  {
    RemoteReader r(reg);
    ASSERT_TRUE(r.attached_ok()) << r.ready();
    EXPECT_EQ(r.ask("lock"), "lock 0");
    r.kill9(false);  // a zombie until reaped: state Z
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn)) << "a dead reader stops grace periods";
    EXPECT_EQ(reg.stats().reclaimed_dead, 1u);
    EXPECT_EQ(reg.stats().slots_in_use, 0u);
    r.reap();
  }
  {
    RemoteReader r(reg);
    ASSERT_TRUE(r.attached_ok()) << r.ready();
    EXPECT_EQ(r.ask("lock"), "lock 0");
    r.kill9(true);  // reaped: no /proc entry
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn));
    EXPECT_EQ(reg.stats().reclaimed_dead, 2u);
  }
  // Outside a section it holds nothing back, but keeps the slot (and the
  // full path of synchronize()) until a sweep.
  {
    RemoteReader r(reg);
    ASSERT_TRUE(r.attached_ok()) << r.ready();
    EXPECT_EQ(r.ask("lock"), "lock 0");
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_EQ(reg.reclaim_dead(), 0u) << "a live reader's slot was reclaimed";
    r.kill9(true);
    EXPECT_EQ(reg.stats().slots_in_use, 1u);
    EXPECT_EQ(reg.reclaim_dead(), 1u);
    EXPECT_EQ(reg.stats().slots_in_use, 0u);
    EXPECT_EQ(reg.stats().reclaimed_dead, 3u);
  }
}

// Slots forged in the mapping, naming this (live) process and thread.
TEST(RemoteReaderTest, PidReuseIsReclaimedAndTheRightOwnerWaitedFor) {
  ReaderRegistry reg(16);
  Mapping m(reg);
  layout::Header& h = m.header();
  layout::Slot& s = m.slot(3);
  pid_t pid = getpid();
  auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  std::uint64_t proc_start = start_time("/proc/self/stat");
  std::uint64_t thread_start = start_time("/proc/thread-self/stat");
  ASSERT_NE(proc_start, 0u);
  auto forge = [&](std::uint64_t seq, std::uint64_t pstart) {
    s.tid.store(tid);
    s.proc_start.store(pstart);
    s.thread_start.store(thread_start);
    s.ctr.store(h.gp_ctr.load());  // inside a section, current phase
    h.slots_in_use.fetch_add(1);
    if (h.slots_hwm.load() < 4) h.slots_hwm.store(4);
    s.owner.store(layout::make_owner(seq, false, pid));
  };

  // Alive pid, other start time: a reused pid, the owner is dead.
  forge(1, proc_start + 1);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn)) << "waited for a slot whose pid was reused";
  }
  EXPECT_EQ(reg.stats().reclaimed_dead, 1u);
  EXPECT_EQ(s.owner.load(), 0u);
  EXPECT_EQ(h.slots_in_use.load(), 0u);

  // The right start time: this process, alive, mapping the registry.
  forge(2, proc_start);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "a live owner's section was not waited for";
    EXPECT_EQ(reg.stats().blocking_pid, pid);
    s.ctr.store(0);  // the forged reader leaves
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(reg.stats().reclaimed_dead, 1u);
  EXPECT_EQ(reg.reclaim_dead(), 0u) << "a live owner's idle slot was reclaimed";
  s.owner.store(0);
  h.slots_in_use.fetch_sub(1);
}

TEST(RemoteReaderTest, StoppedReaderIsWaitedForAndNamed) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  kill(r.pid(), SIGSTOP);
  int status = 0;
  ASSERT_EQ(waitpid(r.pid(), &status, WUNTRACED), r.pid());
  ASSERT_TRUE(WIFSTOPPED(status));
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(wait_until([&] { return reg.stats().blocking_pid == r.pid(); }, kReturn))
        << "stats() does not name the stopped reader";
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(sync.done()) << "returned while a stopped reader was inside";
    ReaderRegistryStats st = reg.stats();
    EXPECT_EQ(st.blocking_pid, r.pid());
    EXPECT_GE(st.blocking_ms, 100u);
    EXPECT_EQ(st.reclaimed_dead, 0u) << "a stopped reader's slot was reclaimed";
    kill(r.pid(), SIGCONT);
    r.send("unlock");
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(r.line(), "unlock");
  EXPECT_EQ(reg.stats().blocking_pid, 0);
  EXPECT_EQ(reg.stats().blocking_ms, 0u);
}

TEST(RemoteReaderTest, ForkOutsideSectionChildRegistersAnew) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("unlock"), "unlock");
  std::string l = r.ask("fork");  // the child takes a slot and stays inside
  ASSERT_EQ(l.rfind("fork ", 0), 0u) << l;
  auto child = static_cast<pid_t>(field(l));
  EXPECT_TRUE(wait_until([&] { return reg.stats().slots_in_use == 2; }, kReturn));
  {
    Async sync(reg, [&] { reg.synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "the fork child's section was not waited for";
    kill(child, SIGUSR1);
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(r.ask("reap"), "reap 0") << "the child used the parent's slot, or had none";
  EXPECT_EQ(reg.stats().slots_in_use, 1u) << "the child's exit released its slot";
  EXPECT_EQ(r.ask("lock"), "lock 0") << "the parent keeps its slot";
  EXPECT_EQ(r.ask("unlock"), "unlock");
}

TEST(RemoteReaderTest, ForkInsideSectionChildCarriesTheSection) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("lock"), "lock 0");
  std::string l = r.ask("fork");
  ASSERT_EQ(l.rfind("fork ", 0), 0u) << l;
  auto child = static_cast<pid_t>(field(l));
  // The parent leaves; the child is still inside the section it inherited.
  EXPECT_EQ(r.ask("unlock"), "unlock");
  EXPECT_EQ(r.ask("unlock"), "unlock");
  EXPECT_EQ(reg.stats().slots_in_use, 2u);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "the fork child's inherited section was not waited for";
    EXPECT_EQ(reg.stats().reclaimed_dead, 0u);
    kill(child, SIGUSR1);
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(r.ask("reap"), "reap 0") << "the child was not inside, or had no slot of its own";
  EXPECT_EQ(reg.stats().slots_in_use, 1u);
  EXPECT_EQ(reg.stats().reclaimed_dead, 0u);
}

TEST(RemoteReaderTest, ThreadExitReleasesItsSlot) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("unlock"), "unlock");
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(r.ask("thread"), "thread 1") << "a new thread takes the slot the last one left";
    EXPECT_EQ(reg.stats().slots_in_use, 1u) << "an exited thread kept its slot";
  }
  EXPECT_EQ(reg.stats().slots_peak, 2u);
  EXPECT_EQ(reg.stats().reclaimed_dead, 0u);
}

TEST(RemoteReaderTest, ExecDoesNotLeakTheSlot) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  // Inside a section, the new image does not attach: the wait finds the
  // registry unmapped in /proc/PID/maps.
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("exec noattach"), "ready " + std::to_string(r.pid()) + " -");
  EXPECT_EQ(reg.stats().slots_in_use, 1u);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn)) << "waited for the section of an image that exec'd";
  }
  EXPECT_EQ(reg.stats().reclaimed_dead, 1u);
  EXPECT_EQ(reg.stats().slots_in_use, 0u);

  // Outside a section: nothing waits for it, a sweep finds it.
  EXPECT_EQ(r.ask("attach"), "attach 0");
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("unlock"), "unlock");
  EXPECT_EQ(r.ask("exec noattach"), "ready " + std::to_string(r.pid()) + " -");
  EXPECT_EQ(reg.stats().slots_in_use, 1u);
  EXPECT_EQ(reg.reclaim_dead(), 1u);
  EXPECT_EQ(reg.stats().slots_in_use, 0u);

  // The new image attaches: it takes back what its earlier image left.
  EXPECT_EQ(r.ask("attach"), "attach 0");
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("exec attach"), "ready " + std::to_string(r.pid()) + " 0");
  EXPECT_EQ(reg.stats().slots_in_use, 0u) << "attach() after exec kept the old image's slot";
  EXPECT_EQ(reg.stats().reclaimed_dead, 3u);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn));
  }
  EXPECT_EQ(r.ask("in"), "in 0");
}

TEST(RemoteReaderTest, SignalHandlerReadsInsideAnotherSection) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("sig"), "sig 1 1") << "the handler's section did not nest";
  {
    Async sync(reg, [&] { reg.synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "the handler's unlock ended the outer section";
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_TRUE(sync.wait(kReturn));
  }
  // Signals landing anywhere in lock/unlock, while grace periods run.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) reg.synchronize();
  });
  std::string l = r.ask("storm 20000");
  stop = true;
  writer.join();
  ASSERT_EQ(l.rfind("storm ", 0), 0u) << l;
  EXPECT_EQ(field(l, 1), 0) << "nesting seen wrong: " << l;
  EXPECT_GE(field(l, 2), 50) << "too few signals were handled: " << l;
  EXPECT_EQ(field(l, 3), 0) << "the slot word and the thread's count differ: " << l;
  Async sync(reg, [&] { reg.synchronize(); });
  EXPECT_TRUE(sync.wait(kReturn)) << "the storm left the slot inside a section";
}

// The process registry, as the daemon has it: rcu's grace periods cover it.
TEST(RemoteReaderTest, RcuSynchronizeAndCallWaitForRemoteReader) {
  ReaderRegistry& reg = process_registry();
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock").rfind("lock ", 0), 0u);

  struct Callback {
    rcu::Head head;
    std::atomic<bool>* ran;
  };
  std::atomic<bool> ran{false};
  rcu::call(&(new Callback{{}, &ran})->head, [](rcu::Head* h) {
    rcu::callback_begins(h);
    auto* cb = reinterpret_cast<Callback*>(h);  // head is the first member
    cb->ran->store(true);
    delete cb;
  });
  {
    Async sync(reg, [] { rcu::synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done()) << "rcu::synchronize() returned while a remote reader was inside";
    EXPECT_FALSE(ran.load()) << "an rcu::call() callback ran while a remote reader was inside";
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_TRUE(sync.wait(kReturn));
  }
  rcu::barrier();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(r.exit(), 0);
}

TEST(RemoteReaderTest, NoRegistryNoCost) {
  // A fresh process: nothing in it created the process registry.
  NOREFS_EXPECT_IN_CHILD({
    EXPECT_EQ(process_registry_if_created(), nullptr);
    rcu::synchronize();
    rcu::ReadGuard g;  // liburcu readers alone
    EXPECT_EQ(process_registry_if_created(), nullptr) << "rcu created a registry";
  });
}

TEST(RemoteReaderTest, NoSlotInUseNoMembarrier) {
  ReaderRegistry reg(16);
  reg.synchronize();
  EXPECT_EQ(reg.stats().grace_periods, 1u);
  EXPECT_EQ(reg.stats().membarriers, 0u) << "a grace period with no slot in use made a syscall";
  // One idle slot: the full path, liburcu's two membarriers.
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  EXPECT_EQ(r.ask("unlock"), "unlock");
  reg.synchronize();
  EXPECT_EQ(reg.stats().grace_periods, 2u);
  EXPECT_EQ(reg.stats().membarriers, 2u);
  EXPECT_EQ(r.exit(), 0);
  reg.synchronize();
  EXPECT_EQ(reg.stats().membarriers, 2u) << "the slot given back still costs membarriers";

  // rcu::synchronize() consults the process registry the same way.
  ReaderRegistry& proc = process_registry();
  ReaderRegistryStats before = proc.stats();
  ASSERT_EQ(before.slots_in_use, 0u);
  rcu::synchronize();
  EXPECT_EQ(proc.stats().grace_periods, before.grace_periods + 1);
  EXPECT_EQ(proc.stats().membarriers, before.membarriers);
}

#ifdef NOREFS_SYNC_POINTS
TEST(RemoteReaderTest, DebugIgnoreReadersReturnsAtOnce) {
  ReaderRegistry reg(16);
  RemoteReader r(reg);
  ASSERT_TRUE(r.attached_ok()) << r.ready();
  EXPECT_EQ(r.ask("lock"), "lock 0");
  reg.debug_ignore_readers(true);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    EXPECT_TRUE(sync.wait(kReturn)) << "the control still waits for readers";
  }
  reg.debug_ignore_readers(false);
  {
    Async sync(reg, [&] { reg.synchronize(); });
    std::this_thread::sleep_for(kHold);
    EXPECT_FALSE(sync.done());
    EXPECT_EQ(r.ask("unlock"), "unlock");
    EXPECT_TRUE(sync.wait(kReturn));
  }
}
#endif

}  // namespace registry_test
}  // namespace norefs::alloc::test
