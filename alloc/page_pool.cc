// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The design block is in page_pool.h; the slot registry's thread-exit
// protocol in thread_slots.h; SpinLock and PageList in page_list.h.
//
// Invariants, each with every place that must keep it.  A slot's lists and
// counters change only under its lock (Slot::lock), except in ~Impl after
// the pool's threads have stopped.
//   (I1) pending non-empty  =>  inflight non-empty.
//        Only free() and sweep() empty inflight (taking a ready batch), and
//        both cut pending into it in the same critical section
//        (cut_locked()); expedite_main() takes all of pending.  So a slot
//        needs no outside help to drain: its in-flight batch always has a
//        grace period coming, and that grace period's sweep cuts the rest.
//        It is why a thread can exit and leave its lists behind.
//   (I2) A list waits for a grace period that began after its last page
//        was queued.  cut_locked() takes the batch's cookie (an RMW on
//        gp_started, grace_period.h) under the slot lock that ordered the
//        pushes; expedite_main() runs its own synchronize() after taking
//        the list under that lock; ~Impl its own after the threads stopped.
//   (I3) Every waited page reaches the arena through free_waited(), and
//        only once (I2)'s grace period has completed: from free() and
//        sweep() (a batch when batch_ready_locked(), i.e. gp.poll(); a done
//        list, already past its expedite grace period), from complete()
//        after expedite_main()'s synchronize(), from ~Impl after its own.
//        (debug_skip_grace_period, a test control, skips the wait.)
//   (I4) ctr->pending == pending.n (free(), cut_locked(), expedite_main(),
//        ~Impl change both together); ctr->inflight == inflight.n + done.n
//        + pages taken off the lists and not yet freed: only free_waited()
//        lowers it, after the pages reached the arena.  So waiting() == 0
//        means every deferred page is back (drain()).
//   (I5) Owner first: a completed list whose owner is active
//        (owner_active_locked(): freed in this or the previous sweep epoch,
//        and still holds the slot) is left to the owner, who frees it on its
//        next free() with its warm tcache: sweep() skips the slot,
//        complete() puts the list on `done`.  Only where the free happens
//        depends on this, never safety; drain() and ~Impl ignore it.
#include "alloc/page_pool.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "alloc/die.h"
#include "alloc/grace_period.h"
#include "alloc/page_list.h"
#include "alloc/reader_registry.h"
#include "alloc/thread_slots.h"

namespace norefs::alloc {
namespace {

std::uint64_t monotonic_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000 +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1000;
}
std::uint64_t monotonic_ms() { return monotonic_us() / 1000; }

void sleep_until_us(std::uint64_t us) {
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace

struct alignas(64) Slot {
  SpinLock lock;
  PageList pending;   // guarded by lock
  PageList inflight;  // guarded by lock
  // Guarded by lock.  Expedite lists whose grace period has completed,
  // handed back for the owner to free on its next free() (I5).  Counted in
  // ctr->inflight until freed; sweep() frees them if the owner stops
  // freeing.
  PageList done;
  std::uint64_t inflight_cookie = 0;  // guarded by lock: the cookie the batch waits for
  // Set by the owner under the lock when it queues expedite work, cleared by
  // the worker under the lock when it takes the list.  make_way() reads it
  // without the lock (relaxed): it is a hint to yield, nothing more.
  std::atomic<bool> expedite_queued{false};
  int tcache = PageArena::kNoTcache;  // used only by the slot's owner thread
  // The sweep epoch of the owner's last deferred free (guarded by lock).  A
  // sweep leaves the completed batch of an owner that freed in this or the
  // previous epoch to the owner, who frees it on its next free() with its
  // own warm tcache and without contending with us on the arena.
  std::uint64_t active_epoch = 0;
  SlotCounters* ctr = nullptr;
};

// The pool this thread used last and its slot there: my_slot()'s fast path.
// Trivial and constinit: reading it is a plain thread-local load.  Pool ids
// (SlotRegistry::id()) start at 1, so {0, nullptr} matches no pool.  Cleared
// at thread exit before the slot goes back (SlotRegistry::Hooks::forget).
struct LastSlot {
  std::uint64_t pool_id = 0;
  Slot* slot = nullptr;
};
constinit thread_local LastSlot tls_last;

// The padding the analyzer reports is deliberate: gp_requested gets a cache
// line of its own (alignas(64) below), apart from the registry.
// NOLINTNEXTLINE(clang-analyzer-optin.performance.Padding)
struct PagePool::Impl {
  explicit Impl(const PagePoolConfig& c);
  ~Impl();

  Page* alloc();
  void free(Page* p);
  void free_not_deferred(Page* p);
  void make_way();
  void drain();
  bool drain_for(unsigned ms);

  Slot* my_slot() {
    if (tls_last.pool_id == id) return tls_last.slot;
    return my_slot_slow();
  }
  Slot* my_slot_slow() {
    Slot* s = &slots[registry.acquire()];
    tls_last = {id, s};
    return s;
  }
  // This thread's slot if it has one in this pool, without taking one.
  Slot* find_my_slot() const {
    if (tls_last.pool_id == id) return tls_last.slot;
    std::optional<std::size_t> i = registry.find();
    return i ? &slots[*i] : nullptr;
  }
  // The tcache a thread that only frees what others queued (the driver,
  // the expedite worker, drain()) should use: its slot's, or none.  Never
  // takes a slot: every slot may be held by live, idle threads.
  int calling_tcache() const {
    const Slot* s = find_my_slot();
    return s ? s->tcache : PageArena::kNoTcache;
  }
  // SlotRegistry hooks, under its mutex: a thread takes slot i / the
  // thread holding it exits (its lists stay: (I1) drains them).
  void on_take(std::size_t i);
  void on_release(std::size_t i);

  // Moves pending to inflight and stamps it.  Returns the cookie to request.
  // Context: slot lock held, inflight empty.
  std::uint64_t cut_locked(Slot* s);
  // (I3): the in-flight batch's grace period has completed.
  bool batch_ready_locked(const Slot* s) const {
    return !s->inflight.empty() && (config.debug_skip_grace_period || gp.poll(s->inflight_cookie));
  }
  // (I5).  Context: slot lock held.
  bool owner_active_locked(const Slot* s) const {
    return s->active_epoch + 1 >= sweep_epoch.load(std::memory_order_relaxed) &&
           registry.held(static_cast<std::size_t>(s - slots.get()));
  }
  // An expedite list whose grace period has completed: hand it to an active
  // owner (Slot::done, (I5)), else free it here with `tcache`.
  void complete(Slot* s, PageList list, int tcache);
  // The one way a waited page reaches the arena (I3): frees pages taken
  // from `owner`'s lists after their grace period and settles owner's
  // counters (I4).  `tcache` is the calling thread's (its slot's, or none).
  void free_waited(Slot* owner, PageList list, int tcache);
  void release_to_arena(Page* p, int tcache);

  void request_gp(std::uint64_t cookie);
  void driver_main();
  // Frees completed batches and done lists, and cuts the lists behind them
  // (I1).  Leaves those of active owners to them (I5), unless `all`.
  void sweep(bool all);
  void update_peak();
  void refresh_arena_stats();
  // Makes this pool's stats block the process registry's sink if the
  // registry exists and has none (alloc/reader_registry.h).  Driver only.
  void claim_registry_sink();

  void queue_expedite(Slot* s);
  void expedite_main();

  std::uint64_t waiting() const { return sum_waiting(stats.header(), stats.slots()); }

  const PagePoolConfig config;
  PageArena arena;
  mutable StatsBlock stats;
  GracePeriods gp;
  std::unique_ptr<Slot[]> slots;  // config.max_threads, all constructed in Impl()
  // Which thread holds which slot; [0, registry.used()) were ever taken.
  SlotRegistry registry;
  const std::uint64_t id;  // registry.id(), copied for my_slot()

  // Driver.  `gp_requested` is the highest cookie any batch waits for.
  alignas(64) std::atomic<std::uint64_t> gp_requested{0};
  // Set by drain_for(): the driver runs the next grace period without
  // pacing.  Relaxed: a hint; the request itself is gp_requested's.
  std::atomic<bool> gp_urgent{false};
  std::atomic<bool> driver_sleeping{false};
  std::mutex wake_mu;
  std::condition_variable wake_cv;
  bool wake = false;  // guarded by wake_mu
  std::atomic<bool> stop{false};
  std::thread driver;
  std::uint64_t arena_stats_due_ms = 0;  // driver thread only
  std::uint64_t decay_due_ms = 0;        // driver thread only
  void tick_decay();
  // Advanced by the driver every kSweepEpochMs.  Owners read it relaxed: a
  // stale epoch only makes the driver leave a batch to its owner a little
  // longer, or take it a little sooner.
  static constexpr std::uint64_t kSweepEpochMs = 5;
  std::atomic<std::uint64_t> sweep_epoch{1};
  std::uint64_t sweep_epoch_due_ms = 0;  // driver thread only
  std::uint64_t next_gp_us = 0;          // driver thread only: gp_interval_us pacing

  // Expedite worker.
  std::mutex expedite_mu;
  std::condition_variable expedite_cv;
  std::deque<Slot*> expedite_queue;  // guarded by expedite_mu
  bool expedite_stop = false;        // guarded by expedite_mu
  std::thread expediter;
};

PagePool::Impl::Impl(const PagePoolConfig& c)
    : config(c),
      arena(c.region_bytes ? c.region_bytes : kDefaultRegionBytes),
      stats(c.stats_path, c.max_threads),
      gp(stats.header()),
      slots(std::make_unique<Slot[]>(c.max_threads)),
      registry(c.max_threads,
               "more than " + std::to_string(c.max_threads) +
                   " threads use one PagePool at once (PagePoolConfig::max_threads)",
               {.on_take = [this](std::size_t i) { on_take(i); },
                .on_release = [this](std::size_t i) { on_release(i); },
                .forget = [] { tls_last = {}; }},
               &stats.nslots()),
      id(registry.id()) {
  if (config.max_threads == 0) NOREFS_DIE("PagePool: max_threads must be at least 1");
  if (config.expedite && config.expedite_pages == 0)
    NOREFS_DIE("PagePool: expedite_pages must be at least 1");
  for (std::size_t i = 0; i < config.max_threads; i++) {
    slots[i].ctr = &stats.slot(i);
  }
  auto bit = [](bool on, ConfigBits b) { return on ? std::uint64_t{b} : std::uint64_t{0}; };
  std::uint64_t bits = bit(config.defer, kCfgDefer) | bit(config.expedite, kCfgExpedite) |
                       bit(config.tcache == TcacheMode::none, kCfgTcacheNone) |
                       bit(config.check, kCfgCheck);
  stats.header().config.store(bits, std::memory_order_relaxed);
  if (config.dirty_decay_ms >= -1) arena.set_dirty_decay_ms(config.dirty_decay_ms);
  driver = std::thread([this] { driver_main(); });
  if (config.expedite) expediter = std::thread([this] { expedite_main(); });
}

PagePool::Impl::~Impl() {
  registry.close();  // from here on, exiting threads leave their slots alone
  if (expediter.joinable()) {
    {
      std::lock_guard<std::mutex> g(expedite_mu);
      expedite_stop = true;
    }
    expedite_cv.notify_one();
    expediter.join();
  }
  stop.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> g(wake_mu);
    wake = true;
  }
  wake_cv.notify_one();
  driver.join();
  // No grace period writes our block once this returns.
  if (ReaderRegistry* r = process_registry_if_created();
      r && r->stats_sink() == &stats.header().remote) {
    r->set_stats_sink(nullptr);
  }

  std::size_t n = registry.used();
  // Everything still listed was queued before this grace period began.
  gp.synchronize();
  for (std::size_t i = 0; i < n; i++) {
    Slot* s = &slots[i];
    s->lock.lock();
    PageList list = s->inflight.take();
    append(list, s->done.take());
    PageList pending = s->pending.take();
    counter_sub(s->ctr->pending, pending.n);
    counter_add(s->ctr->inflight, pending.n);
    s->lock.unlock();
    // No slot for this thread: it may be a user thread, and every user
    // slot may be held by threads that are idle but alive.
    free_waited(s, list, PageArena::kNoTcache);
    free_waited(s, pending, PageArena::kNoTcache);
  }
  for (std::size_t i = 0; i < n; i++) {
    if (slots[i].tcache != PageArena::kNoTcache) arena.tcache_destroy(slots[i].tcache);
  }
  Counters c = stats.sum();
  if (c.live() != 0 || c.waiting != 0) {
    NOREFS_DIE("PagePool destroyed with " + std::to_string(c.live()) +
               " pages still allocated and " + std::to_string(c.waiting) +
               " waiting: every page must be freed before the pool");
  }
}

void PagePool::Impl::on_take(std::size_t i) {
  Slot& s = slots[i];
  // An adopted slot keeps its tcache; only the owner thread uses it.
  if (config.tcache == TcacheMode::private_ && s.tcache == PageArena::kNoTcache) {
    s.tcache = arena.tcache_create();
  }
  s.ctr->in_use.store(1, std::memory_order_relaxed);  // single writer: the registry's mutex
}

// The thread is exiting.  By (I1) its lists need nothing from it: the slot
// keeps them and the driver drains them.  Its tcache goes back to the arena
// so that no page sits in a cache nobody uses.
void PagePool::Impl::on_release(std::size_t i) {
  Slot& s = slots[i];
  if (s.tcache != PageArena::kNoTcache) arena.tcache_flush(s.tcache);
  s.ctr->in_use.store(0, std::memory_order_relaxed);  // single writer: the registry's mutex
}

Page* PagePool::Impl::alloc() {
  Slot* s = my_slot();
  std::byte* data = arena.alloc_data(s->tcache);
  if (!data) return nullptr;
  Page* p = arena.alloc_descriptor(s->tcache);
  if (!p) {
    arena.free_data(data, s->tcache);
    return nullptr;
  }
  p->data = data;
  counter_add(s->ctr->allocated, 1);
  return p;
}

void PagePool::Impl::release_to_arena(Page* p, int tcache) {
  if (config.poison_on_free) std::memset(p->data, kPoisonByte, kPageSize);
  arena.free_data(p->data, tcache);
  arena.free_descriptor(p, tcache);
}

void PagePool::Impl::free_not_deferred(Page* p) {
  Slot* s = my_slot();
  release_to_arena(p, s->tcache);
  counter_add(s->ctr->not_deferred, 1);
}

std::uint64_t PagePool::Impl::cut_locked(Slot* s) {
  PageList batch = s->pending.take();
  counter_sub(s->ctr->pending, batch.n);
  counter_add(s->ctr->inflight, batch.n);
  s->inflight = batch;
  s->inflight_cookie = gp.cookie();
  return s->inflight_cookie;
}

void PagePool::Impl::free(Page* p) {
  Slot* s = my_slot();
  if (!config.defer || !p->rcu_free()) {
    release_to_arena(p, s->tcache);
    counter_add(s->ctr->immediate, 1);
    return;
  }
  if (config.check) p->queued_gp = gp.cookie();
  PageList ready;
  std::uint64_t cookie = 0;
  bool expedite = false;
  s->lock.lock();
  s->pending.push(p);
  s->active_epoch = sweep_epoch.load(std::memory_order_relaxed);
  counter_add(s->ctr->pending, 1);
  counter_add(s->ctr->deferred, 1);
  // Free our own completed batch here, on a warm tcache, rather than leave
  // it to the driver.
  if (batch_ready_locked(s)) ready = s->inflight.take();
  if (!s->done.empty()) append(ready, s->done.take());
  if (s->inflight.empty()) cookie = cut_locked(s);  // (I1)
  if (config.expedite && s->pending.n >= config.expedite_pages &&
      !s->expedite_queued.load(std::memory_order_relaxed)) {
    s->expedite_queued.store(true, std::memory_order_relaxed);  // under the lock
    expedite = true;
  }
  s->lock.unlock();

  if (cookie) request_gp(cookie);
  if (expedite) queue_expedite(s);
  free_waited(s, ready, s->tcache);
}

void PagePool::Impl::complete(Slot* s, PageList list, int tcache) {
  if (list.empty()) return;
  s->lock.lock();
  bool handed = owner_active_locked(s);
  if (handed) append(s->done, list);
  s->lock.unlock();
  if (!handed) free_waited(s, list, tcache);
}

void PagePool::Impl::free_waited(Slot* owner, PageList list, int tcache) {
  if (list.empty()) return;
  std::size_t n = list.n;
  for (Page* p = list.head; p;) {
    Page* next = p->free_next;
    if (config.check && !gp.poll(p->queued_gp)) {
      // Several freeing threads: an RMW, taken only on a violation.
      stats.header().check_violations.fetch_add(1, std::memory_order_relaxed);
    }
    release_to_arena(p, tcache);
    p = next;
  }
  owner->lock.lock();
  counter_sub(owner->ctr->inflight, n);
  counter_add(owner->ctr->freed_after_gp, n);
  owner->lock.unlock();
}

void PagePool::Impl::request_gp(std::uint64_t cookie) {
  // seq_cst on the CAS and on the load of driver_sleeping, against the
  // driver's seq_cst store of driver_sleeping and load of gp_requested:
  // either we see it asleep and wake it, or it sees our request (Dekker).
  std::uint64_t cur = gp_requested.load(std::memory_order_relaxed);
  while (cur < cookie && !gp_requested.compare_exchange_weak(cur, cookie, std::memory_order_seq_cst,
                                                             std::memory_order_relaxed)) {
  }
  if (driver_sleeping.load(std::memory_order_seq_cst)) {
    {
      std::lock_guard<std::mutex> g(wake_mu);
      wake = true;
    }
    wake_cv.notify_one();
  }
}

void PagePool::Impl::sweep(bool all) {
  std::uint64_t want = 0;
  std::size_t n = registry.used();
  for (std::size_t i = 0; i < n; i++) {
    Slot* s = &slots[i];
    PageList ready;
    s->lock.lock();
    // registry.held() is read racily: a heuristic only (thread_slots.h).
    bool leave_to_owner = !all && owner_active_locked(s);
    if (!leave_to_owner) {
      if (batch_ready_locked(s)) {
        ready = s->inflight.take();
        if (!s->pending.empty()) want = std::max(want, cut_locked(s));  // (I1)
      }
      append(ready, s->done.take());
    }
    s->lock.unlock();
    free_waited(s, ready, calling_tcache());
  }
  if (want) request_gp(want);
}

void PagePool::Impl::update_peak() {
  // Single writer (the driver thread): relaxed load+store, like every
  // single-writer counter (stats_block.h).
  std::uint64_t w = waiting();
  Counter& peak = stats.header().peak_waiting;
  if (w > peak.load(std::memory_order_relaxed)) peak.store(w, std::memory_order_relaxed);
}

void PagePool::Impl::refresh_arena_stats() {
  std::uint64_t now = monotonic_ms();
  if (now < arena_stats_due_ms) return;
  arena_stats_due_ms = now + config.arena_stats_interval_ms;
  ArenaStats a = arena.stats();
  StatsHeader& h = stats.header();
  h.arena_active_bytes.store(a.active_bytes, std::memory_order_relaxed);
  h.arena_resident_bytes.store(a.resident_bytes, std::memory_order_relaxed);
  h.arena_stats_age_ms.store(now, std::memory_order_relaxed);
}

void PagePool::Impl::tick_decay() {
  if (config.dirty_decay_ms < 0 || config.decay_tick_ms == 0) return;
  std::uint64_t now = monotonic_ms();
  if (now < decay_due_ms) return;
  decay_due_ms = now + config.decay_tick_ms;
  arena.decay();
}

void PagePool::Impl::claim_registry_sink() {
  ReaderRegistry* r = process_registry_if_created();
  if (r && !r->stats_sink()) r->set_stats_sink(&stats.header().remote);
}

void PagePool::Impl::driver_main() {
  const auto idle_tick = std::chrono::milliseconds(10);
  while (!stop.load(std::memory_order_relaxed)) {
    claim_registry_sink();
    std::uint64_t now = monotonic_ms();
    if (now >= sweep_epoch_due_ms) {
      sweep_epoch_due_ms = now + kSweepEpochMs;
      sweep_epoch.fetch_add(1, std::memory_order_relaxed);  // see its declaration
    }
    if (gp_requested.load(std::memory_order_acquire) > gp.completed()) {
      // Pace: frees meanwhile join the pending lists, and the batches
      // cut behind this grace period grow (PagePoolConfig::gp_interval_us).
      if (!gp_urgent.exchange(false, std::memory_order_relaxed) && monotonic_us() < next_gp_us) {
        sleep_until_us(next_gp_us);
      }
      next_gp_us = monotonic_us() + config.gp_interval_us;
      update_peak();  // before the GP: no owner can have freed its batch yet
      gp.synchronize();
    }
    // Frees what is ready, whoever ran its grace period (the expedite
    // worker's count too), and cuts the lists behind it (I1).
    sweep(false);
    if (gp_requested.load(std::memory_order_acquire) > gp.completed()) {
      refresh_arena_stats();
      tick_decay();
      continue;
    }
    update_peak();
    refresh_arena_stats();
    tick_decay();
    // Dekker with request_gp(): see there.
    driver_sleeping.store(true, std::memory_order_seq_cst);
    if (gp_requested.load(std::memory_order_seq_cst) <= gp.completed()) {
      std::unique_lock<std::mutex> g(wake_mu);
      wake_cv.wait_for(g, idle_tick, [this] { return wake; });
      wake = false;
    }
    driver_sleeping.store(false, std::memory_order_relaxed);
  }
}

void PagePool::Impl::queue_expedite(Slot* s) {
  {
    std::lock_guard<std::mutex> g(expedite_mu);
    expedite_queue.push_back(s);
  }
  expedite_cv.notify_one();
}

void PagePool::Impl::expedite_main() {
  StatsHeader& h = stats.header();
  for (;;) {
    Slot* s;
    {
      std::unique_lock<std::mutex> g(expedite_mu);
      expedite_cv.wait(g, [this] { return expedite_stop || !expedite_queue.empty(); });
      if (expedite_stop) return;  // queued lists stay on their slots: ~Impl frees them
      s = expedite_queue.front();
      expedite_queue.pop_front();
    }
    s->lock.lock();
    PageList list = s->pending.take();  // (I1) holds: pending is now empty
    counter_sub(s->ctr->pending, list.n);
    counter_add(s->ctr->inflight, list.n);
    s->expedite_queued.store(false, std::memory_order_relaxed);  // under the lock
    s->lock.unlock();
    if (list.empty()) continue;
    // Every page on `list` was queued before this grace period begins (the
    // slot lock orders the queueing before our cookie RMW inside).
    if (!config.debug_skip_grace_period) gp.synchronize();
    // Counted before the pages reach the arena, so that whoever sees them
    // there (drain()) also sees the work counted.  Single writer (this
    // worker): relaxed load+store.
    counter_add(h.expedites, 1);
    counter_add(h.expedited_pages, list.n);
    complete(s, list, calling_tcache());
    // Our grace period may have completed other slots' batches too.
    sweep(false);
  }
}

void PagePool::Impl::make_way() {
  Slot* s = find_my_slot();
  if (!s) return;  // this thread never used the pool: nothing of ours to yield to
  // Relaxed: a hint.  A stale value costs one needless or one missed yield.
  if (s->expedite_queued.load(std::memory_order_relaxed)) {
    sched_yield();
    // Rare (only while expedite work waits): a shared RMW is fine here.
    stats.header().make_way_yields.fetch_add(1, std::memory_order_relaxed);
  }
}

void PagePool::Impl::drain() {
  while (waiting() != 0) {
    gp.synchronize();
    sweep(true);
    // Pages taken by the expedite worker or a freeing thread are counted
    // until they are freed; give them the CPU.
    if (waiting() != 0) std::this_thread::yield();
  }
}

bool PagePool::Impl::drain_for(unsigned ms) {
  // No reader of another process registered: nothing can hold a grace
  // period back (this process's readers never block inside a section), so
  // the caller runs them itself, as drain() does: handing them to the
  // driver cost the bound mode of punch-wait about a third of its
  // throughput (docs/benchmarks.md, "Before and after the shared region").
  // A reader that registers after this check and stops inside its section
  // at once can still hold this call until it continues: a window of the
  // check's length, documented there.
  if (ReaderRegistry* r = process_registry_if_created(); !r || r->stats().slots_in_use == 0) {
    drain();
    return true;
  }
  const std::uint64_t deadline = monotonic_us() + std::uint64_t{ms} * 1000;
  while (waiting() != 0) {
    const std::uint64_t cookie = gp.cookie();
    gp_urgent.store(true, std::memory_order_relaxed);
    request_gp(cookie);
    while (!gp.poll(cookie)) {
      if (monotonic_us() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    sweep(true);
    // Grace periods complete: the caller re-checks what it needs (frees of
    // other threads may keep `waiting` above 0 however long we wait).
    if (waiting() == 0 || monotonic_us() >= deadline) break;
    std::this_thread::yield();
  }
  return true;
}

PagePool::PagePool(const PagePoolConfig& config) : impl_(std::make_unique<Impl>(config)) {}
PagePool::~PagePool() = default;
Page* PagePool::alloc() { return impl_->alloc(); }
void PagePool::free(Page* page) { impl_->free(page); }
void PagePool::free_not_deferred(Page* page) { impl_->free_not_deferred(page); }
void PagePool::make_way() { impl_->make_way(); }
void PagePool::drain() { impl_->drain(); }
bool PagePool::drain_for(unsigned ms) { return impl_->drain_for(ms); }
Counters PagePool::counters() const { return impl_->stats.sum(); }
const PagePoolConfig& PagePool::config() const { return impl_->config; }
ArenaStats PagePool::arena_stats() const { return impl_->arena.stats(); }
bool PagePool::owns(const void* p) const { return impl_->arena.owns(p); }
const SharedRegion& PagePool::region() const { return impl_->arena.region(); }
SharedAlloc PagePool::shared_alloc() const { return impl_->arena.shared_alloc(); }
const std::string& PagePool::stats_path() const { return impl_->stats.path(); }

}  // namespace norefs::alloc
