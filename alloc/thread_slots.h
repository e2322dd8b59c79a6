// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/thread_slots.h — per-thread slots, taken on first use and handed
// back at thread exit.  Used by the page pool (alloc/page_pool.cc: a slot is
// a pending list, a batch, a tcache and counters) and by the cache's
// counters (cache/cache_stats.h: a slot is a row of counters).
//
// A SlotRegistry hands out indices in [0, capacity): one per thread that
// asks, held until the thread exits.  The owner keeps whatever it wants per
// index (its slots); what a thread left in its slot stays there and the
// next thread to take the index adopts it.  So nothing is lost when a thread
// exits, and slots are bounded by the peak number of live threads (libfuse
// creates and destroys its workers as it likes).
//
// The thread-exit protocol (the one copy in the project):
//  - Each thread has one list of the slots it holds, {Shared, index} per
//    registry (thread_slots.cc: `tls_held`).  Only that thread touches it.
//  - A registry's Shared part (its mutex, `alive`, the free indices) is
//    owned jointly by the registry and by every thread list that names it
//    (shared_ptr), so a thread that exits after the registry was destroyed
//    still has something to look at.
//  - At thread exit the list's destructor first calls every owner's
//    `forget` (clears its hot-path thread_local, so that nothing on this
//    thread reaches a slot again), then for each entry locks Shared::mu
//    and, only if `alive`, calls `on_release(index)` and puts the index
//    back.  The mutex orders the exiting thread's slot writes before the
//    next thread's acquire() of that index.
//  - close() (and ~SlotRegistry) locks Shared::mu and clears `alive`.  So
//    on_release() runs entirely before close() returns or never: the hooks
//    may use the owner, which closes its registry before it tears down
//    anything they touch.
//
// Lock order: Shared::mu is taken with no other lock of the owner held, and
// the hooks run under it (the pool's hooks take only jemalloc's locks).
// docs/design.md#lock-order.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace norefs::alloc {

class SlotRegistry {
 public:
  struct Hooks {
    // Called under the registry's mutex when a thread takes `index`.
    std::function<void(std::size_t index)> on_take;
    // Called under the registry's mutex when the thread holding `index`
    // exits, while the registry is alive.
    std::function<void(std::size_t index)> on_release;
    // Called at thread exit before any slot goes back, alive or not: clears
    // the owner's per-thread cache of its slot.  A plain function: it
    // touches only thread_locals.
    void (*forget)() = nullptr;
  };

  // Indices [0, capacity), held at once by at most `capacity` threads: one
  // more dies with `too_many` as the message.  `published_count`, if given,
  // receives the number of indices handed out so far (a stats block's
  // nslots).
  SlotRegistry(std::size_t capacity, std::string too_many, Hooks hooks,
               std::atomic<std::uint64_t>* published_count = nullptr);
  ~SlotRegistry() { close(); }
  // From here on, exiting threads leave their slots alone and no hook runs.
  // Context: no thread calls acquire() any more.
  void close();
  SlotRegistry(const SlotRegistry&) = delete;
  SlotRegistry& operator=(const SlotRegistry&) = delete;

  // Unique in the process, never 0: the key an owner's hot-path cache
  // compares against, so that a cache left by a destroyed registry at the
  // same address never matches.
  std::uint64_t id() const { return id_; }

  // This thread's index: the one it holds, else a free one (one handed back
  // by an exited thread, else the next never used).
  // Context: not from a hook (the mutex is not recursive).
  std::size_t acquire();
  // This thread's index if it holds one; never takes one.
  std::optional<std::size_t> find() const;

  // Indices [0, used()) have been handed out at least once.  Acquire pairs
  // with the release in acquire(): whatever on_take did to a slot before its
  // index was first counted is visible to a caller iterating [0, used()).
  std::size_t used() const { return used_.load(std::memory_order_acquire); }
  // Whether a live thread holds `index`.  Relaxed, and read without the
  // mutex: a heuristic for the caller (the pool's sweep), which never relies
  // on it for safety.
  bool held(std::size_t index) const;

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
  std::uint64_t id_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace norefs::alloc
