// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/page.h — the page descriptor, the userspace struct page.
//
// alloc/ owns the descriptor the way mm/ owns struct page: it allocates it,
// frees it, and reads one bit of its state word (kRcuFree).  The owner of a
// page (cache/) uses the remaining bits of `state` and the owner fields.  The
// page's data lives in the page arena (alloc/page_arena.h); the descriptor
// lives in the same arena, one cache line each.
//
// The state word, 64 bits, is drawn once, with every bit, at the top of
// cache/page.h: bit 63 is rcu_free (alloc/'s), bits 62..0 are the owner's.
//
// rcu_free: set by the owner at the point the page leaves every index a
// lockless reader can search, before the owner drops its reference.  The one
// free function (PagePool::free) tests it: set -> the page waits for an RCU
// grace period; clear -> straight back to the arena.
//
// Why a relaxed fetch_or is enough to set it: the refcount lives in the same
// word, and the page is freed only after the last reference is dropped by an
// RMW on this word.  RMWs on one location are totally ordered and each reads
// the latest value, so the final put — whoever does it — comes after the
// fetch_or in the word's modification order, and the free function's load
// (sequenced after that put on the same thread) sees the bit.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace norefs::alloc {

// The page size of the cache: every page, every offset computation.
inline constexpr std::size_t kPageShift = 12;
inline constexpr std::size_t kPageSize = std::size_t{1} << kPageShift;

struct alignas(64) Page {
  static constexpr std::uint64_t kRcuFree = std::uint64_t{1} << 63;
  static constexpr std::uint64_t kOwnerMask = kRcuFree - 1;

  std::atomic<std::uint64_t> state{0};
  std::byte* data = nullptr;  // kPageSize bytes in the page arena; never changes

  // Owner's fields (cache/): meaning and locking are the owner's.
  std::uint64_t index = 0;
  void* owner = nullptr;
  Page* lru_prev = nullptr;
  Page* lru_next = nullptr;

  // alloc's fields: valid only after the last reference is gone.
  Page* free_next = nullptr;    // pending/in-flight list link, guarded by the slot lock
  std::uint64_t queued_gp = 0;  // check mode: grace periods started when queued

  // See the block comment above for why relaxed is enough.
  void set_rcu_free() { state.fetch_or(kRcuFree, std::memory_order_relaxed); }
  // Relaxed: called after the final put on this thread; same-location coherence
  // makes the bit visible (block comment above).
  bool rcu_free() const { return state.load(std::memory_order_relaxed) & kRcuFree; }
};
static_assert(sizeof(Page) == 64, "one descriptor per cache line");

}  // namespace norefs::alloc
