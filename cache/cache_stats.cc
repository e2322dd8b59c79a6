// SPDX-License-Identifier: LGPL-2.1-or-later
#include "cache/cache_stats.h"

#include <unistd.h>

#include <mutex>
#include <new>
#include <stdexcept>
#include <vector>

#include "alloc/die.h"
#include "alloc/shared_mapping.h"

namespace norefs::cache {
namespace {

constexpr std::size_t kSlotsOffset = sizeof(CacheStatsHeader);
static_assert(kSlotsOffset % alignof(CacheSlot) == 0);

constexpr std::string_view kStopNames[kStops] = {
    "missing",  "not_uptodate", "readahead", "drop_behind", "past_eof",
    "accessed", "interrupted",  "batch",     "changed",
};
constexpr std::string_view kCounterNames[static_cast<std::size_t>(Ctr::stop0)] = {
    "reads",          "bytes",           "fast_pages",     "fast_reads",      "slow_hits",
    "misses",         "waits",           "sync_readahead", "async_readahead", "readahead_pages",
    "uncached_reads", "zero_copy_reads", "evicted",        "evict_skipped",   "limit_drains",
    "io_errors",      "written_pages",   "removed_pages",  "write_alloc",     "write_fill",
    "write_skipped",
};

std::atomic<std::uint64_t> next_id{1};

}  // namespace

std::string_view stop_name(Stop s) { return kStopNames[static_cast<std::size_t>(s)]; }

std::string_view counter_name(std::size_t i) {
  static const std::vector<std::string> stop_counters = [] {
    std::vector<std::string> v;
    for (auto n : kStopNames) v.push_back("stop_" + std::string(n));
    return v;
  }();
  auto first_stop = static_cast<std::size_t>(Ctr::stop0);
  return i < first_stop ? kCounterNames[i] : std::string_view(stop_counters[i - first_stop]);
}

// Which slots are free.  Shared with the threads that hold a slot, so that a
// thread exiting after its cache is gone still has something to hand back to.
struct CacheStats::Registry {
  std::mutex mu;
  std::vector<std::size_t> free;  // guarded by mu
  std::size_t next = 0;           // guarded by mu
  std::size_t max_slots;
  bool alive = true;  // guarded by mu
  explicit Registry(std::size_t m) : max_slots(m) {}
};

namespace {

// One entry per cache this thread has used.  Dead caches' entries are
// pruned when a new one is added; the rest hand their slot back at exit.
struct ThreadSlots {
  struct Entry {
    std::uint64_t id;
    std::shared_ptr<CacheStats::Registry> registry;
    std::size_t index;
    CacheSlot* slot;
  };
  std::vector<Entry> entries;

  ~ThreadSlots() {
    detail::last_slot = {};  // the slots go back below
    for (auto& e : entries) {
      std::lock_guard lk(e.registry->mu);
      if (e.registry->alive) e.registry->free.push_back(e.index);
    }
  }
};
thread_local ThreadSlots tls_slots;

}  // namespace

constinit thread_local detail::LastSlot detail::last_slot;

CacheStats::CacheStats(const std::string& path, std::size_t max_slots)
    : registry_(std::make_shared<Registry>(max_slots)), id_(next_id.fetch_add(1)) {
  auto map = std::make_unique<alloc::SharedMapping>(alloc::SharedMapping::create(
      path, kSlotsOffset + max_slots * sizeof(CacheSlot), "cache stats block"));
  path_ = path;
  bytes_ = map->size();
  void* mem = map->data();
  map_ = std::move(map);
  header_ = new (mem) CacheStatsHeader;
  slots_ = reinterpret_cast<CacheSlot*>(static_cast<char*>(mem) + kSlotsOffset);
  for (std::size_t i = 0; i < max_slots; i++) new (&slots_[i]) CacheSlot;
  auto& h = *header_;
  h.version.store(kCacheStatsVersion, std::memory_order_relaxed);
  h.ncounters.store(kCounters, std::memory_order_relaxed);
  h.max_slots.store(max_slots, std::memory_order_relaxed);
  h.slots_offset.store(kSlotsOffset, std::memory_order_relaxed);
  h.pid.store(static_cast<std::uint64_t>(getpid()), std::memory_order_relaxed);
  // Release: a reader that sees the magic (acquire) sees the layout fields.
  h.magic.store(kCacheStatsMagic, std::memory_order_release);
}

CacheStats::~CacheStats() {
  std::lock_guard lk(registry_->mu);
  registry_->alive = false;
}

CacheSlot& CacheStats::slot_slow() {
  ThreadSlots& t = tls_slots;
  for (auto& e : t.entries) {
    if (e.id == id_) {
      detail::last_slot = {id_, e.slot};
      return *e.slot;
    }
  }
  std::size_t index;
  {
    std::lock_guard lk(registry_->mu);
    if (!registry_->free.empty()) {
      index = registry_->free.back();
      registry_->free.pop_back();
    } else {
      if (registry_->next == registry_->max_slots) {
        NOREFS_DIE("cache stats: more than " + std::to_string(registry_->max_slots) +
                   " threads read at once (raise PageCacheConfig::max_threads)");
      }
      index = registry_->next++;
      // Release not needed: readers only read counters, each a whole value.
      header_->nslots.store(registry_->next, std::memory_order_relaxed);
    }
  }
  std::erase_if(t.entries, [](const ThreadSlots::Entry& e) {
    std::lock_guard lk(e.registry->mu);
    return !e.registry->alive;
  });
  t.entries.push_back({id_, registry_, index, &slots_[index]});
  detail::last_slot = {id_, &slots_[index]};
  return slots_[index];
}

CacheCounters CacheStats::sum() const { return sum_cache_counters(*header_); }

// All loads relaxed: see the block comment in the header.
CacheCounters sum_cache_counters(const CacheStatsHeader& h) {
  auto rd = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
  CacheCounters c;
  c.slots = rd(h.nslots);
  const auto* slots =
      reinterpret_cast<const CacheSlot*>(reinterpret_cast<const char*>(&h) + rd(h.slots_offset));
  for (std::uint64_t i = 0; i < c.slots; i++) {
    for (std::size_t k = 0; k < kCounters; k++) c.v[k] += rd(slots[i].v[k]);
  }
  c.pages_cached = rd(h.pages_cached);
  c.active_pages = rd(h.active_pages);
  c.limit_pages = rd(h.limit_pages);
  c.batch = rd(h.batch);
  c.read_path = rd(h.read_path);
  return c;
}

CacheStatsReader::CacheStatsReader(const std::string& path)
    : map_(std::make_unique<alloc::SharedMapping>(alloc::SharedMapping::open_readonly(
          path, sizeof(CacheStatsHeader), "cache stats block"))) {
  header_ = static_cast<const CacheStatsHeader*>(map_->data());
  const auto& h = *header_;
  // Acquire pairs with the release store of the magic in CacheStats().
  if (h.magic.load(std::memory_order_acquire) != kCacheStatsMagic ||
      h.version.load(std::memory_order_relaxed) != kCacheStatsVersion ||
      h.ncounters.load(std::memory_order_relaxed) != kCounters ||
      h.slots_offset.load(std::memory_order_relaxed) +
              h.max_slots.load(std::memory_order_relaxed) * sizeof(CacheSlot) >
          map_->size()) {
    throw std::runtime_error(path + ": not a norefs cache stats block of version " +
                             std::to_string(kCacheStatsVersion) + " with " +
                             std::to_string(kCounters) + " counters");
  }
}

CacheStatsReader::~CacheStatsReader() = default;

CacheCounters CacheStatsReader::sum() const { return sum_cache_counters(*header_); }

}  // namespace norefs::cache
