// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/alloc/test_util.h — helpers shared by the alloc/ tests.
//
// Timing rule of this suite: a correct engine passes whatever the scheduler
// does.  Sleeps only give a broken engine time to misbehave (or bound how
// long a control waits for a broken engine to show itself); they never decide
// a pass on their own.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "alloc/page.h"
#include "alloc/page_pool.h"
#include "alloc/rcu.h"
#include "alloc/stats_block.h"

#include "sanitizers.h"

namespace norefs::alloc::test {

using namespace std::chrono_literals;

inline std::string describe(const Counters& c) {
  std::ostringstream os;
  os << "{pending=" << c.pending << " inflight=" << c.inflight << " waiting=" << c.waiting
     << " peak_waiting=" << c.peak_waiting << " allocated=" << c.allocated
     << " deferred=" << c.deferred << " immediate=" << c.immediate
     << " not_deferred=" << c.not_deferred << " freed_after_gp=" << c.freed_after_gp
     << " live=" << c.live() << " grace_periods=" << c.grace_periods << " expedites=" << c.expedites
     << " expedited_pages=" << c.expedited_pages << " gp_started=" << c.gp_started
     << " gp_completed=" << c.gp_completed << " check_violations=" << c.check_violations
     << " make_way_yields=" << c.make_way_yields << " threads=" << c.threads << " slots=" << c.slots
     << " config=" << c.config << "}";
  return os.str();
}

// A unique path for a stats file; nothing exists there yet.
inline std::string unique_stats_path(const std::string& tag) {
  static std::atomic<int> n{0};
  std::string path = "/tmp/norefs-alloc-test-" + std::to_string(getpid()) + "-" +
                     std::to_string(n.fetch_add(1)) + "-" + tag;
  unlink(path.c_str());
  return path;
}

inline Page* must_alloc(PagePool& pool) {
  Page* p = pool.alloc();
  EXPECT_NE(p, nullptr) << "PagePool::alloc() returned nullptr";
  return p;
}

// What cache/ does when a page leaves the last index: mark it, then free it.
inline void free_rcu(PagePool& pool, Page* p) {
  p->set_rcu_free();
  pool.free(p);
}

// A thread that sits inside one rcu read-side section until release() (or
// destruction).  While it is inside, no grace period that begins after its
// constructor returned can end.
class ReaderThread {
 public:
  ReaderThread()
      : thread_([this] {
          rcu::read_lock();
          inside_.store(true, std::memory_order_release);
          while (!release_.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
          rcu::read_unlock();
        }) {
    while (!inside_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  ~ReaderThread() { release(); }
  ReaderThread(const ReaderThread&) = delete;
  ReaderThread& operator=(const ReaderThread&) = delete;

  void release() {
    release_.store(true, std::memory_order_release);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> inside_{false};
  std::atomic<bool> release_{false};
  std::thread thread_;
};

// Runs f(i) on n threads at once and joins them.
inline void run_threads(int n, const std::function<void(int)>& f) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; i++) threads.emplace_back(f, i);
  for (auto& t : threads) t.join();
}

// Polls `pred` until it holds or `limit` passes.  Only for controls and for
// "eventually" properties whose bound is orders of magnitude above need.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// True if plain malloc() is jemalloc's (the normal build).  Under ASan/TSan the
// sanitizer's allocator interposes malloc, and jemalloc 5.3's arenas.lookup
// dereferences a missing radix-tree leaf for memory it never mapped
// (jemalloc#2425), so PagePool::owns() may only be asked about jemalloc memory.
inline bool malloc_is_jemalloc() {
  void* sym = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info info{};
  if (sym == nullptr || dladdr(sym, &info) == 0 || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "jemalloc") != nullptr;
}

// The body of NOREFS_EXPECT_IN_CHILD, in the child: gtest forwards no events
// from a death-test child, so failures are intercepted and copied to stderr,
// which the parent reports; the exit status says whether there were any.
template <class F>
[[noreturn]] void run_as_child(F&& body) {
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &failures);
    body();
  }
  for (int i = 0; i < failures.size(); i++) {
    const ::testing::TestPartResult& r = failures.GetTestPartResult(i);
    std::fprintf(stderr, "%s:%d: Failure\n%s\n", r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }
  std::fflush(nullptr);
  std::_Exit(failures.size() == 0 ? 0 : 1);
}

// Runs `body` in a child process (gtest's death-test machinery, "threadsafe"
// style) and expects it to finish without a failure.  For properties whose
// failure mode is an abort inside the pool, so that the abort fails this test
// only and not the rest of the binary.
#define NOREFS_EXPECT_IN_CHILD(body)                                                              \
  do {                                                                                            \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                               \
    EXPECT_EXIT(::norefs::alloc::test::run_as_child([&] { body; }), ::testing::ExitedWithCode(0), \
                "");                                                                              \
  } while (0)

inline const char* tcache_name(TcacheMode t) {
  return t == TcacheMode::none ? "tcache_none" : "tcache_private";
}

}  // namespace norefs::alloc::test
