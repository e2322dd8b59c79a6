// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/page_list.h — the two small pieces the deferred free engine
// (page_pool.cc) builds its slots from: a spin lock for critical sections of
// a few list operations, and an intrusive list of pages.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <utility>

#include "alloc/page.h"

namespace norefs::alloc {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A lock for critical sections of a few list operations (a push, a cut, a
// counter update).  Spins briefly, then yields: with more threads than cores
// the holder may be preempted, and spinning against it would only delay it.
//
// Invariant: `locked_` is true exactly while one thread is between a lock()
// whose exchange returned false and its unlock().
// Ordering: lock()'s successful exchange is an acquire and unlock()'s store a
// release, so everything the previous holder wrote inside its critical
// section happens before everything the next holder does inside its own.
// The inner wait loads are relaxed: they only decide when to try the
// exchange again, and the exchange itself is what acquires.
// Not recursive, not fair; never held across a grace period or a syscall.
class SpinLock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          cpu_relax();
        } else {
          sched_yield();
        }
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// A LIFO of pages linked through Page::free_next, with its tail so that
// append() is O(1) (it runs under slot locks).
//
// Invariants: n counts the pages reachable from head; n == 0 <=> head ==
// nullptr <=> tail == nullptr; tail->free_next == nullptr, so a walk from
// head ends by itself.
// Not thread-safe: every list lives under a slot lock or belongs to one
// thread, and a page is on at most one list.
struct PageList {
  Page* head = nullptr;
  Page* tail = nullptr;
  std::size_t n = 0;

  bool empty() const { return n == 0; }
  void push(Page* p) {
    p->free_next = head;
    head = p;
    if (!tail) tail = p;
    n++;
  }
  // Empties this list and returns what it held.
  PageList take() { return std::exchange(*this, PageList{}); }
};

// Moves `b` onto the front of `a`.
inline void append(PageList& a, PageList b) {
  if (b.empty()) return;
  b.tail->free_next = a.head;
  if (a.empty()) a.tail = b.tail;
  a.head = b.head;
  a.n += b.n;
}

}  // namespace norefs::alloc
