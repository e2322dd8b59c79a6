// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/thread_slots.h"

#include <mutex>
#include <utility>
#include <vector>

#include "alloc/die.h"

namespace norefs::alloc {

// What outlives the registry: see "The thread-exit protocol" in the header.
struct SlotRegistry::Shared {
  Shared(std::size_t c, std::string t, Hooks h, std::atomic<std::uint64_t>* published)
      : capacity(c),
        too_many(std::move(t)),
        hooks(std::move(h)),
        published_count(published),
        held(std::make_unique<std::atomic<bool>[]>(c)) {}

  const std::size_t capacity;
  const std::string too_many;
  const Hooks hooks;  // called only while alive, under mu
  std::atomic<std::uint64_t>* const published_count;

  std::mutex mu;
  bool alive = true;              // guarded by mu
  std::vector<std::size_t> free;  // guarded by mu: indices handed back
  std::size_t next = 0;           // guarded by mu: indices [0, next) handed out once
  // Written under mu; held() reads it without mu (relaxed, a heuristic).
  std::unique_ptr<std::atomic<bool>[]> held;

  // Context: mu held, alive.
  void release_locked(std::size_t index) {
    if (hooks.on_release) hooks.on_release(index);
    held[index].store(false, std::memory_order_relaxed);
    free.push_back(index);
  }
};

namespace {

std::atomic<std::uint64_t> next_registry_id{1};

// This thread's slots, one entry per registry it took one from.  Entries of
// destroyed registries are pruned when an entry is added.
struct ThreadSlotList {
  struct Entry {
    std::shared_ptr<SlotRegistry::Shared> shared;
    std::size_t index;
  };
  std::vector<Entry> entries;

  ~ThreadSlotList() {
    // First every owner's hot-path cache, so that nothing reaches a slot
    // after it went back; then the slots.
    for (const Entry& e : entries) {
      if (e.shared->hooks.forget) e.shared->hooks.forget();
    }
    for (const Entry& e : entries) {
      std::lock_guard<std::mutex> g(e.shared->mu);
      if (e.shared->alive) e.shared->release_locked(e.index);
    }
  }
};
thread_local ThreadSlotList tls_held;

}  // namespace

SlotRegistry::SlotRegistry(std::size_t capacity, std::string too_many, Hooks hooks,
                           std::atomic<std::uint64_t>* published_count)
    : shared_(std::make_shared<Shared>(capacity, std::move(too_many), std::move(hooks),
                                       published_count)),
      // Relaxed: only uniqueness matters, which the RMW gives.
      id_(next_registry_id.fetch_add(1, std::memory_order_relaxed)) {}

void SlotRegistry::close() {
  std::lock_guard<std::mutex> g(shared_->mu);
  shared_->alive = false;
}

std::optional<std::size_t> SlotRegistry::find() const {
  for (const auto& e : tls_held.entries) {
    if (e.shared == shared_) return e.index;
  }
  return std::nullopt;
}

bool SlotRegistry::held(std::size_t index) const {
  return shared_->held[index].load(std::memory_order_relaxed);
}

std::size_t SlotRegistry::acquire() {
  if (auto mine = find()) return *mine;
  Shared& s = *shared_;
  std::size_t index;
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.alive) NOREFS_DIE("SlotRegistry: acquire() after close()");
    if (!s.free.empty()) {
      index = s.free.back();
      s.free.pop_back();
    } else {
      if (s.next == s.capacity) NOREFS_DIE(s.too_many);
      index = s.next++;
    }
    s.held[index].store(true, std::memory_order_relaxed);
    if (s.hooks.on_take) s.hooks.on_take(index);
    if (index + 1 > used_.load(std::memory_order_relaxed)) {
      // Release pairs with the acquire in used(): on_take's work on the slot
      // is visible to whoever iterates up to it.
      used_.store(index + 1, std::memory_order_release);
      // Relaxed: another process reads it only to know how many slots to
      // sum, and each slot's counters are whole values on their own.
      if (s.published_count) s.published_count->store(index + 1, std::memory_order_relaxed);
    }
  }
  // Forget the slots of registries that are gone, then remember this one.
  std::erase_if(tls_held.entries, [](const ThreadSlotList::Entry& e) {
    std::lock_guard<std::mutex> g(e.shared->mu);
    return !e.shared->alive;
  });
  tls_held.entries.push_back({shared_, index});
  return index;
}

}  // namespace norefs::alloc
