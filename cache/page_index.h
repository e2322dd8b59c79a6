// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/page_index.h — one file's pages by page index: a 64-way radix tree
// in the style of the kernel's xarray, with lockless lookup.
//
// Measured for this use (rcu-and-jemalloc.md §4): a per-inode 64-way radix
// costs the same as a flat array when hot (4.9 ns lookup + 16 B copy) and
// handles holes and growth; a global rculfhash costs 4.5x when hot.
//
// Shape.  A node has 64 slots and a shift: slots of a node with shift 0 hold
// pages; slots of a node with shift s > 0 hold nodes of shift s - 6.  The root
// covers indices [0, 64 << root.shift).  Holes are null slots.
//
// Concurrency.
//  - Writers (insert, erase, clear) hold the owner's lock (CachedFile::mu):
//    one writer at a time.
//  - Readers (lookup) hold rcu::read_lock() and no lock.  A node's `shift` is
//    immutable from its construction; slots and the root are atomics.
//  - Publication: a node or page is fully initialized before the release
//    store that links it (root, or a parent slot); readers load links with
//    acquire, so they see it initialized.  (Consume would do; acquire is free
//    on x86 and what C++ compilers implement consume as anyway.)
//  - Unlinking: erase stores null (release: orders our earlier writes for
//    later readers, though a null is never dereferenced).  A reader that
//    loaded the old pointer before the store may still use it until its
//    read_unlock(): a removed page is freed through PagePool (rcu_free) and a
//    removed node through rcu::call(), both only after a grace period.
//  - Memory: nodes live in the shared region (alloc/shared_region.h,
//    through SharedAlloc), so that a reader in another process that maps
//    the region follows the same links; an index holds no pointer out of
//    the region (its allocator is an arena index).
//  - Growth publishes a new root whose slot 0 is the old root.  A reader that
//    loaded the old root walks the old (still valid) subtree: the pages it
//    finds there are the same pages.  The tree never shrinks in height while
//    non-empty; when it becomes empty its nodes are retired.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "alloc/page_arena.h"
#include "alloc/rcu.h"
#include "cache/page.h"

namespace norefs::cache {

namespace rcu = alloc::rcu;

class PageIndex {
 public:
  static constexpr unsigned kBits = 6;
  static constexpr unsigned kSlots = 1u << kBits;

  // Nodes come from `heap` (the page pool's shared_alloc()).
  explicit PageIndex(alloc::SharedAlloc heap) : heap_(heap) {}
  // Frees every node at once.  Context: no reader can reach this index any
  // more (its file has no handle) and every page has been taken out.
  ~PageIndex();
  PageIndex(const PageIndex&) = delete;
  PageIndex& operator=(const PageIndex&) = delete;

  // Lockless.  Context: rcu::read_lock() held (or the owner's lock).
  // Inline: every read looks up every page it copies.
  Page* lookup(std::uint64_t index) const;

  // Context: owner's lock held.  Stores `page` at `index`, which must be
  // empty.  Returns false on allocation failure (nothing changed).
  bool insert(std::uint64_t index, Page* page);
  // Context: owner's lock held.  Replaces the page at `index` (which must be
  // `old`) with `page` in one store: a reader sees one or the other.
  void replace(std::uint64_t index, Page* old, Page* page);
  // Context: owner's lock held.  Unlinks and returns the page at `index`
  // (nullptr if none).  Empty nodes are retired after a grace period.
  Page* erase(std::uint64_t index);

  // Context: owner's lock held.  Calls fn(index, page) for every page with
  // first <= index <= last, in index order.  fn must not modify the index.
  void for_each(std::uint64_t first, std::uint64_t last,
                const std::function<void(std::uint64_t, Page*)>& fn) const;

  // Context: owner's lock held.
  std::uint64_t size() const { return pages_; }

  // Nodes allocated and not yet freed, by every index of the process: what
  // tests check for leaks (the nodes are in a jemalloc arena, which the
  // sanitizers' allocators do not see).  Relaxed: a count, read after
  // rcu::barrier() by whoever checks it.
  static std::int64_t live_nodes() { return nodes_live_.load(std::memory_order_relaxed); }

 private:
  struct Node {
    Node(unsigned s, alloc::SharedAlloc h) : shift(s), heap(h) {}
    rcu::Head rcu{};  // first: retire() hands the node to rcu::call()
    const unsigned shift;
    unsigned count = 0;             // non-null slots; guarded by the owner's lock
    const alloc::SharedAlloc heap;  // where the node goes back (retire()'s callback)
    std::atomic<void*> slots[kSlots] = {};
  };
  Node* new_node(unsigned shift);
  static void delete_node(Node* n);
  static unsigned slot_of(std::uint64_t index, unsigned shift) {
    return static_cast<unsigned>(index >> shift) & (kSlots - 1);
  }
  // Largest index a tree with this root shift covers.
  static std::uint64_t max_index(unsigned shift) {
    unsigned bits = shift + kBits;
    return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  }
  Node* root() const { return root_.load(std::memory_order_acquire); }
  static void free_tree(Node* n);
  void retire(Node* n);
  void for_each_node(const Node* n, std::uint64_t base, std::uint64_t first, std::uint64_t last,
                     const std::function<void(std::uint64_t, Page*)>& fn) const;

  const alloc::SharedAlloc heap_;
  std::atomic<Node*> root_{nullptr};
  std::uint64_t pages_ = 0;  // guarded by the owner's lock
  static std::atomic<std::int64_t> nodes_live_;
};

inline Page* PageIndex::lookup(std::uint64_t index) const {
  const Node* n = root();
  if (!n || index > max_index(n->shift)) return nullptr;
  for (;;) {
    // Acquire pairs with the release store that linked the child or page.
    void* e = n->slots[slot_of(index, n->shift)].load(std::memory_order_acquire);
    if (n->shift == 0 || !e) return static_cast<Page*>(e);
    n = static_cast<const Node*>(e);
  }
}

}  // namespace norefs::cache
