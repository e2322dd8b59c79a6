// SPDX-License-Identifier: LGPL-2.1-or-later
#include "cache/page_index.h"

#include <new>

#include "alloc/die.h"

namespace norefs::cache {

std::atomic<std::int64_t> PageIndex::nodes_live_{0};

PageIndex::~PageIndex() { free_tree(root_.load(std::memory_order_relaxed)); }

PageIndex::Node* PageIndex::new_node(unsigned shift) {
  void* mem = heap_.alloc(sizeof(Node), alignof(Node));
  if (!mem) return nullptr;
  nodes_live_.fetch_add(1, std::memory_order_relaxed);  // see live_nodes()
  return new (mem) Node(shift, heap_);
}

void PageIndex::delete_node(Node* n) {
  alloc::SharedAlloc heap = n->heap;
  n->~Node();
  heap.free(n, sizeof(Node), alignof(Node));
  nodes_live_.fetch_sub(1, std::memory_order_relaxed);
}

void PageIndex::free_tree(Node* n) {
  if (!n) return;
  if (n->shift > 0) {
    for (auto& s : n->slots) free_tree(static_cast<Node*>(s.load(std::memory_order_relaxed)));
  }
  delete_node(n);
}

bool PageIndex::insert(std::uint64_t index, Page* page) {
  Node* n = root_.load(std::memory_order_relaxed);  // we are the only writer
  if (!n) {
    unsigned shift = 0;  // start at the height the index needs
    while (index > max_index(shift)) shift += kBits;
    n = new_node(shift);
    if (!n) return false;
    root_.store(n, std::memory_order_release);
  }
  while (index > max_index(n->shift)) {
    Node* up = new_node(n->shift + kBits);
    if (!up) return false;
    up->slots[0].store(n, std::memory_order_relaxed);  // published by the root store
    up->count = 1;
    root_.store(up, std::memory_order_release);
    n = up;
  }
  while (n->shift > 0) {
    auto& slot = n->slots[slot_of(index, n->shift)];
    auto* child = static_cast<Node*>(slot.load(std::memory_order_relaxed));
    if (!child) {
      child = new_node(n->shift - kBits);
      if (!child) return false;  // empty interior nodes are harmless; erase retires them
      slot.store(child, std::memory_order_release);
      n->count++;
    }
    n = child;
  }
  auto& slot = n->slots[slot_of(index, 0)];
  NOREFS_CHECK(slot.load(std::memory_order_relaxed) == nullptr,
               "PageIndex::insert into an occupied slot");
  // Release: the page's descriptor and state are initialized before readers see it.
  slot.store(page, std::memory_order_release);
  n->count++;
  pages_++;
  return true;
}

void PageIndex::replace(std::uint64_t index, Page* old, Page* page) {
  Node* n = root_.load(std::memory_order_relaxed);
  NOREFS_CHECK(n && index <= max_index(n->shift), "PageIndex::replace of a missing page");
  while (n->shift > 0) {
    n = static_cast<Node*>(n->slots[slot_of(index, n->shift)].load(std::memory_order_relaxed));
    NOREFS_CHECK(n, "PageIndex::replace of a missing page");
  }
  auto& slot = n->slots[slot_of(index, 0)];
  NOREFS_CHECK(slot.load(std::memory_order_relaxed) == old, "PageIndex::replace of another page");
  slot.store(page, std::memory_order_release);  // as in insert()
}

Page* PageIndex::erase(std::uint64_t index) {
  Node* path[12];
  unsigned depth = 0;
  Node* n = root_.load(std::memory_order_relaxed);
  if (!n || index > max_index(n->shift)) return nullptr;
  for (;;) {
    path[depth++] = n;
    if (n->shift == 0) break;
    n = static_cast<Node*>(n->slots[slot_of(index, n->shift)].load(std::memory_order_relaxed));
    if (!n) return nullptr;
  }
  auto& leaf_slot = n->slots[slot_of(index, 0)];
  auto* page = static_cast<Page*>(leaf_slot.load(std::memory_order_relaxed));
  if (!page) return nullptr;
  // Release: see the block comment; readers that still hold `page` are
  // covered by the grace period its free waits for.
  leaf_slot.store(nullptr, std::memory_order_release);
  pages_--;
  // Retire nodes that became empty, bottom up.
  for (unsigned d = depth; d-- > 0;) {
    Node* cur = path[d];
    if (--cur->count > 0) break;
    if (d == 0) {
      root_.store(nullptr, std::memory_order_release);
    } else {
      path[d - 1]->slots[slot_of(index, path[d - 1]->shift)].store(nullptr,
                                                                   std::memory_order_release);
    }
    retire(cur);
    if (d == 0) break;
  }
  return page;
}

void PageIndex::retire(Node* n) {
  // A reader may be walking `n`: free it after a grace period.  Node removal
  // is rare (a whole 64-page range emptied), so call_rcu's 10 ms batching is
  // fine here; PagePool is for pages.
  rcu::call(&n->rcu, [](rcu::Head* h) {
    rcu::callback_begins(h);
    delete_node(reinterpret_cast<Node*>(h));  // rcu is Node's first member
  });
}

void PageIndex::for_each(std::uint64_t first, std::uint64_t last,
                         const std::function<void(std::uint64_t, Page*)>& fn) const {
  const Node* n = root_.load(std::memory_order_relaxed);
  if (!n || first > last) return;
  for_each_node(n, 0, first, last, fn);
}

void PageIndex::for_each_node(const Node* n, std::uint64_t base, std::uint64_t first,
                              std::uint64_t last,
                              const std::function<void(std::uint64_t, Page*)>& fn) const {
  std::uint64_t span = std::uint64_t{1} << n->shift;  // indices per slot
  for (unsigned i = 0; i < kSlots; i++) {
    std::uint64_t lo = base + i * span;
    if (i && lo == 0) break;  // wrapped past the top of the index space
    std::uint64_t hi = lo + (span - 1);
    if (hi < first) continue;
    if (lo > last) break;
    void* e = n->slots[i].load(std::memory_order_relaxed);
    if (!e) continue;
    if (n->shift == 0) {
      fn(lo, static_cast<Page*>(e));
    } else {
      for_each_node(static_cast<const Node*>(e), lo, first, last, fn);
    }
  }
}

}  // namespace norefs::cache
