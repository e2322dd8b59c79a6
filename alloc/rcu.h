// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/rcu.h — the one place that owns RCU.  No other file includes <urcu/...>.
//
// Flavour: urcu-memb.  Its read side is a thread-local counter store and a
// compiler barrier (1.2 ns measured, rcu-and-jemalloc.md §1.2); the writer
// pays with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED).  Unlike QSBR it puts
// no quiescent-state duty on readers, so a FUSE worker blocked in
// read(/dev/fuse) can never stall a grace period; unlike mb its read side has
// no fence; unlike signal it has no EINTR hazards (and survives 0.15).
//
// Grace periods cover readers in other processes too: synchronize() and
// call() also wait for the process's ReaderRegistry, if one was created
// (alloc/reader_registry.h: the daemon's; none costs one load).
//
// Rules (liburcu README, "Interaction with mutexes"):
//  - a read-side section holds no lock that is held across synchronize(),
//    never blocks and never calls synchronize() (memb self-deadlocks);
//  - threads register before their first read-side section.  libfuse creates
//    and destroys its workers with no per-thread hook, so registration is lazy:
//    read_lock() registers the calling thread on first use, and a thread_local
//    guard unregisters it when the thread exits.
#pragma once

#ifndef _LGPL_SOURCE
#define _LGPL_SOURCE  // inline the read side; this project is LGPL-2.1-or-later
#endif
#include <urcu/urcu-memb.h>

#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#define NOREFS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NOREFS_TSAN 1
#endif
#endif

#ifdef NOREFS_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace norefs::alloc::rcu {

namespace detail {
// constinit: no dynamic initialization, so no TLS wrapper call on the fast path.
extern constinit thread_local bool registered;
void register_slow();
#ifdef NOREFS_TSAN
// TSan cannot see liburcu's membarrier-based ordering.  Every outermost
// read_unlock() releases this address and every completed grace period
// acquires it, which is the RCU guarantee stated as happens-before: all of a
// reader's accesses happen before the end of any grace period that waited for
// it.  (It over-approximates for sections that began after the grace period
// started; that can hide a race, never invent one.)
extern char tsan_gp_sync;
#endif
}  // namespace detail

// Registers the calling thread with liburcu if it is not yet.  Idempotent.
inline void register_thread() {
  if (!detail::registered) detail::register_slow();
}

inline void read_lock() {
  register_thread();
  urcu_memb_read_lock();
}

inline void read_unlock() {
#ifdef NOREFS_TSAN
  __tsan_release(&detail::tsan_gp_sync);
#endif
  urcu_memb_read_unlock();
}

inline bool in_read_section() { return urcu_memb_read_ongoing(); }

// A read-side section for the scope.  Nests.
class ReadGuard {
 public:
  ReadGuard() { read_lock(); }
  ~ReadGuard() { read_unlock(); }
  ReadGuard(const ReadGuard&) = delete;
  ReadGuard& operator=(const ReadGuard&) = delete;
};

// Waits for every read-side section that began before the call to end: this
// process's (liburcu), then other processes' (the registry, if created).
// Context: not inside a read-side section; holding no lock a reader takes.
// Concurrent callers share grace periods (liburcu's leader/follower batching,
// the registry's cookies).
void synchronize();

// call_rcu: `func(head)` runs on liburcu's call_rcu worker after a grace
// period of liburcu and one of the registry (a registry cookie taken here;
// one registry grace period serves every callback queued before it began).
// The calling thread is registered first.  Used by the page index to retire
// its nodes (cache/page_index.h); pages never go this way (page_pool.h).
// A Head is embedded in the object; the callback gets the same address.
struct Head {
  rcu_head urcu;  // first: liburcu's callback gets &urcu, which is the Head
  void (*func)(Head*) = nullptr;
  std::uint64_t registry_cookie = 0;  // 0: no registry when call() ran
};
void call(Head* head, void (*func)(Head*));
// Waits until every callback queued by call() before this point has run.
// Context: not inside a read-side section, not from a callback.
void barrier();

// First thing in a call() callback: tells TSan what liburcu guaranteed —
// the grace period ended, and whatever the caller of call() did before it
// happened before the callback (liburcu hands the head over through its own
// atomics, which TSan cannot see).  No-op otherwise.
inline void callback_begins([[maybe_unused]] Head* head) {
#ifdef NOREFS_TSAN
  __tsan_acquire(head);
  __tsan_acquire(&detail::tsan_gp_sync);
#endif
}

}  // namespace norefs::alloc::rcu
