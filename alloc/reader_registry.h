// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/reader_registry.h — read-side sections in OTHER processes that the
// daemon's grace periods wait for (client-design.md §3).
//
// liburcu keeps its reader registry in process memory, so its grace periods
// cannot see a reader in another process.  This is liburcu memb's algorithm
// (src/urcu.c, urcu/static/urcu-memb.h, v0.13) over a registry in a memfd
// that the daemon creates and reader processes map at any address: only
// offsets and indices inside it, never pointers.
//
// Layout (one memfd, sealed against shrinking and growing so that no client
// can make the daemon's mapping SIGBUS):
//   Header  {magic, version, capacity, slot_offset | gp_ctr | slot counters}
//   Slot[capacity], one cache line each, one per registered reader thread.
//
// gp_ctr is liburcu's urcu_gp.ctr: bit 32 the phase (URCU_GP_CTR_PHASE), and
// a nest unit of 1 (URCU_GP_COUNT) so that a reader's first lock copies it
// whole.  Written only by the writer, under its mutex; read by every reader.
//
// Slot.ctr: the reader's copy.  nest(ctr) = ctr & kNestMask; 0 = outside any
// section.  Written only by the owning thread (and by whoever reclaims the
// slot of a dead owner, which cannot write any more).  A reader is
//   inactive        nest == 0
//   active current  nest != 0, phase(ctr) == phase(gp_ctr)
//   active old      nest != 0, phase(ctr) != phase(gp_ctr)
//
// Slot.owner, one word: 0 = free; else [63:33] a sequence number (unique per
// transition, from Header.next_seq), [32] busy, [31:0] the pid of whoever
// holds the word.  Busy: the holder is filling or emptying the slot's other
// fields (tid, start times, image, flags); they change only while busy.  So
// a checker reads owner (acquire), the fields, then owner again: the same
// value means the fields belong to that owner (each transition changes the
// sequence number, so there is no ABA in practice: 2^31 transitions of one
// slot between two loads of one check).  Transitions:
//   take:     0 -> busy(seq, pid) [CAS] ; fill ; -> (seq, pid) [release]
//   release:  ctr = 0 ; -> 0 [release]                     (the owner itself)
//   reclaim:  o -> busy(seq', reclaimer) [CAS from the value checked dead] ;
//             ctr = 0 ; -> 0 [release]                     (owner is dead)
// slots_in_use is raised before the take CAS and lowered after a store of 0,
// so a process dying between the two can only leave it too high (grace
// periods then pay the full path; never too low, which would skip a reader).
//
// Reader (remote_rcu::read_lock/unlock), the fast path: one relaxed load of
// gp_ctr (outermost lock only), one relaxed store to the thread's own slot,
// a compiler barrier.  No fence, no other shared write: the writer pays with
// membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED), which makes every running
// thread of every process that registered for it (attach() does) execute a
// full barrier, and a thread that is not running gets one from its context
// switch.  That turns the reader's compiler barriers into full fences at the
// moment the writer needs them, exactly as liburcu memb's smp_mb_slave() /
// smp_mb_master() pair (there with MEMBARRIER_CMD_PRIVATE_EXPEDITED).
//
// The nest count is kept in a thread_local (tls_ctr) and the slot word is
// stored from it, as liburcu keeps it in its TLS reader.  A signal handler
// that reads runs a balanced lock/unlock on the same thread: whatever
// instruction it interrupts, it leaves the nest count of tls_ctr and of the
// slot as it found them, and the outer code's next store writes the value
// it computed, so nesting stays right.  (One harmless difference: a handler
// that runs between the outermost unlock's store of tls_ctr and its store
// of the slot leaves tls_ctr with the phase it read; both words are
// inactive, and the next outermost lock reads gp_ctr afresh.)
//
// Writer (ReaderRegistry::synchronize, liburcu's synchronize_rcu):
//   seq_cst fence; slots_in_use == 0 -> done (see the .cc for the Dekker
//   pairing with the reader's registration); membarrier; wait until no
//   reader is active old, collecting the active current ones; flip the
//   phase; wait until none of those is active old; membarrier.  Two phases
//   because a reader's load of gp_ctr and store of its ctr are not one
//   atomic step: a reader delayed between them stores a stale phase.
//
// Liveness: a slot that holds a grace period back for kCheckAfter is checked
// (reclaim_dead(), also run at most once a second from synchronize() and by a
// registering reader that finds no free slot): owner process gone, its start
// time (/proc/PID/stat field 22) differs (pid reused), state Z or X, thread
// gone or its start time differs, or /proc/PID/maps no longer maps the
// registry's inode (the process exec'd) -> the slot is reclaimed.  A dead
// process cannot touch memory, so that is safe.  A stopped process (SIGSTOP)
// is alive: it is waited for and stats() names it.  When /proc/PID/maps is
// unreadable (another uid without ptrace rights) the owner counts as alive.
// exec: the new image does not know the old one's slots.  If it attaches
// again, attach() reclaims every slot naming this pid and start time whose
// image token (random, per attach) is not its own; if it does not, the maps
// check finds the registry unmapped.  So an exec'd slot never leaks forever.
//
// fork: the child's thread is a copy of the forking thread, slot pointer
// included; the atfork child handler drops it, and the child registers anew
// on first use.  fork() inside a section: the prepare handler reserves a
// slot in the parent (ctr = the parent's, so it is waited for from before
// the child exists), the parent handler finds the child's pid
// (/proc/self/task/TID/children, before and after) and hands the slot to it,
// or frees it if no child exists (fork failed, or the child was already
// reaped); the child handler claims it too (whichever comes first), and
// carries the nesting.  A child that finds its reserved slot taken back dies
// loudly before running any code of the program.  Without the children file
// (CONFIG_PROC_CHILDREN) the reserved slot names the forking thread until
// the child claims it.
//
// Context of the reader side: attach() before the first read_lock(); the
// first read_lock() of a thread (registration: it may allocate, for the
// thread-exit destructor) not in a signal handler — a handler may read on a
// thread that has registered, or call register_thread() first.  Signals are
// blocked during registration, so a handler never sees it half done.
//
// TSan: it instruments one process.  It sees neither another process's
// accesses to the shared mapping nor membarrier's ordering, so the
// happens-before from a remote reader's section to the daemon's free is
// invisible to it and no cross-process race can be reported; in the daemon
// it sees only its own (atomic) accesses to the slots.  For a reader in the
// same process (tests), read_unlock() releases and a finished synchronize()
// acquires one address, as alloc/rcu.h does for liburcu.  Cross-process
// correctness is what the checkers (with debug_ignore_readers() as their
// control) and the tests in tests/alloc/reader_registry_test.cc are for.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "alloc/stats_block.h"

#if defined(__SANITIZE_THREAD__)
#define NOREFS_REGISTRY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NOREFS_REGISTRY_TSAN 1
#endif
#endif

#ifdef NOREFS_REGISTRY_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace norefs::alloc {

// The shared layout.  Every field is a lock-free, address-free std::atomic:
// the processes that map it share nothing else.
namespace reader_registry_layout {

inline constexpr std::uint64_t kMagic = 0x6e6f726566737267;  // "norefsrg"
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint64_t kGpCount = 1;                       // URCU_GP_COUNT
inline constexpr std::uint64_t kGpPhase = std::uint64_t{1} << 32;  // URCU_GP_CTR_PHASE
inline constexpr std::uint64_t kNestMask = kGpPhase - 1;           // URCU_GP_CTR_NEST_MASK

inline constexpr std::uint64_t kOwnerBusy = std::uint64_t{1} << 32;
inline constexpr std::uint32_t kSlotForking = 1;  // Slot.flags: reserved for a fork child

constexpr std::uint64_t make_owner(std::uint64_t seq, bool busy, pid_t pid) {
  return (seq << 33) | (busy ? kOwnerBusy : 0) | static_cast<std::uint32_t>(pid);
}
constexpr pid_t owner_pid(std::uint64_t owner) {
  return static_cast<pid_t>(static_cast<std::uint32_t>(owner));
}
constexpr bool owner_busy(std::uint64_t owner) { return (owner & kOwnerBusy) != 0; }

// The padding is the point: gp_ctr and the slot counters on lines of their own.
// NOLINTNEXTLINE(clang-analyzer-optin.performance.Padding)
struct alignas(64) Header {
  // Written by the creator before the fd is handed out, never again.
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint32_t> version;
  std::atomic<std::uint32_t> capacity;
  std::atomic<std::uint64_t> slot_offset;  // bytes from the start of the mapping to slot 0
  // Read by every reader's outermost lock: a line of its own, written once
  // per grace period.
  alignas(64) std::atomic<std::uint64_t> gp_ctr;
  // Written at registration, release and reclaim only.
  alignas(64) std::atomic<std::uint64_t> slots_in_use;
  std::atomic<std::uint64_t> slots_peak;
  std::atomic<std::uint64_t> slots_hwm;  // slots [0, hwm) have been taken at least once
  std::atomic<std::uint64_t> next_seq;   // owner-word sequence numbers
  std::atomic<std::uint64_t> reclaimed_dead;
};

struct alignas(64) Slot {
  std::atomic<std::uint64_t> ctr;    // the reader's copy of gp_ctr, nest count in the low bits
  std::atomic<std::uint64_t> owner;  // see the layout comment above
  std::atomic<std::int32_t> tid;
  std::atomic<std::uint32_t> flags;         // kSlotForking
  std::atomic<std::uint64_t> proc_start;    // /proc/PID/stat field 22 of the owner process
  std::atomic<std::uint64_t> thread_start;  // the same for its thread
  std::atomic<std::uint64_t> image;         // the owner image's token (exec detection)
};

static_assert(sizeof(Slot) == 64, "one cache line per slot");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "address-free across processes");

}  // namespace reader_registry_layout

struct ReaderRegistryStats {
  std::uint64_t slots_in_use = 0;    // registered reader threads, all processes (an upper bound)
  std::uint64_t slots_peak = 0;      // the most at once
  std::uint64_t grace_periods = 0;   // synchronize() calls that ran a grace period
  std::uint64_t waited = 0;          // grace periods that found a reader inside a section
  std::uint64_t reclaimed_dead = 0;  // slots taken back from dead threads, processes, images
  std::int64_t blocking_pid = 0;     // pid holding the running grace period back >= 1 ms, else 0
  std::uint64_t blocking_ms = 0;     // for how long
  std::uint64_t membarriers = 0;     // membarrier(GLOBAL_EXPEDITED) calls made by synchronize()
};

// Writer side: lives in the process whose grace periods must cover other
// processes' readers (the daemon).  Thread-safe.
class ReaderRegistry {
 public:
  static constexpr std::size_t kDefaultSlots = 1024;

  // memfd_create + ftruncate + mmap(MAP_SHARED), sealed.  Throws
  // std::system_error (ENOSYS if the kernel has no
  // MEMBARRIER_CMD_GLOBAL_EXPEDITED).
  explicit ReaderRegistry(std::size_t slots = kDefaultSlots);
  // Context: no synchronize() running.  Readers keep their own mappings.
  ~ReaderRegistry();
  ReaderRegistry(const ReaderRegistry&) = delete;
  ReaderRegistry& operator=(const ReaderRegistry&) = delete;

  // The memfd (O_CLOEXEC): what a reader process maps with
  // remote_rcu::attach() (passed by fork inheritance, by exec with its
  // FD_CLOEXEC cleared on a dup, or with SCM_RIGHTS).
  int fd() const { return fd_; }
  std::size_t capacity() const { return capacity_; }

  // Waits for every read-side section, in any process, that began before
  // the call.  Concurrent callers share grace periods.  Near-free when no
  // slot is in use: a fence and a load, no system call.
  // Context: not inside a remote_rcu section of this process.
  void synchronize();

  // As GracePeriods (grace_period.h): poll(cookie()) is true once a grace
  // period that began after cookie() returned has ended.
  std::uint64_t cookie() { return gp_started_.fetch_add(0, std::memory_order_release) + 1; }
  bool poll(std::uint64_t cookie) const {
    // Acquire pairs with the release store in synchronize(): the grace
    // period happens before whatever the caller frees next.
    return gp_completed_.load(std::memory_order_acquire) >= cookie;
  }
  // Returns at once if poll(cookie), else synchronize().  One grace period
  // serves every cookie taken before it began (rcu::call's batches).
  void synchronize_for(std::uint64_t cookie) {
    if (!poll(cookie)) synchronize();
  }

  // Checks the owner of every taken slot and reclaims those of dead
  // threads, processes and images (see the header comment).  Returns how
  // many.  synchronize() runs it at most once a second while slots are in
  // use; a daemon may also call it when a client goes away.
  std::size_t reclaim_dead();

  ReaderRegistryStats stats() const;

  // Where stats() is published as grace periods run, live while one waits
  // (a PagePool's stats block: norefsctl reads it from another process).
  // nullptr: nowhere.  Takes gp_mu_, so it waits for a running grace
  // period: after it returns, the old sink is never written again.
  // Context: not from a grace period.
  void set_stats_sink(RemoteReaderCounters* sink);
  RemoteReaderCounters* stats_sink() const { return sink_.load(std::memory_order_acquire); }

#ifdef NOREFS_SYNC_POINTS
  // Test control only: synchronize() returns without waiting for readers,
  // so that a cross-process checker can prove it finds the bad reads.
  void debug_ignore_readers(bool ignore) { ignore_readers_.store(ignore); }
#endif

 private:
  void run_grace_period();
  void membarrier_global();
  // Waits until no slot is active old; checks the owners that hold it back.
  void wait_for_readers(std::uint64_t gp_start_ns, bool* saw_reader);
  void check_blockers(std::uint64_t now);

  int fd_ = -1;
  void* mem_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
  reader_registry_layout::Header* h_ = nullptr;
  reader_registry_layout::Slot* slots_ = nullptr;
  dev_t dev_ = 0;
  ino_t ino_ = 0;

  // Serializes grace periods; guards pending_ and last_sweep_ns_.  A leaf:
  // nothing else is taken under it.
  std::mutex gp_mu_;
  std::vector<std::uint32_t> pending_;  // the slots the running wait is held back by
  std::uint64_t last_sweep_ns_ = 0;

  std::atomic<std::uint64_t> gp_started_{0}, gp_completed_{0};
  // Statistics, relaxed: counters read by stats() with no ordering to them.
  std::atomic<std::uint64_t> grace_periods_{0}, waited_{0}, membarriers_{0};
  std::atomic<std::int64_t> blocking_pid_{0};
  std::atomic<std::uint64_t> blocking_ms_{0};
  std::atomic<bool> ignore_readers_{false};  // debug_ignore_readers()
  // set_stats_sink(); written under gp_mu_, read by the grace period that
  // holds it (relaxed would do there) and by stats_sink() (acquire).
  std::atomic<RemoteReaderCounters*> sink_{nullptr};
  void publish();  // Context: gp_mu_ held.
};

// The process's registry (the daemon's): created on first call, never
// destroyed.  Throws as the constructor does.
ReaderRegistry& process_registry();
// What rcu::synchronize() and rcu::call() consult: nullptr = no remote
// reader possible, and nothing else to pay.  See alloc/rcu.cc for the
// ordering with a registry created concurrently.
ReaderRegistry* process_registry_if_created();

// Reader side, in a process that maps a registry (normally one it did not
// create; the creator may attach too, for tests).
namespace remote_rcu {

// Maps the registry behind `registry_fd` read-write (the fd may be closed
// afterwards) and registers the process with
// MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED.  Returns 0 or -errno (-EINVAL:
// not a registry of this version; -EBUSY: attached to another registry).
// Once per process image: again with the same registry returns 0.
int attach(int registry_fd);
bool attached();

namespace detail {
// constinit: no dynamic initialization, so no TLS wrapper on the fast path.
extern constinit thread_local reader_registry_layout::Slot* tls_slot;
extern constinit thread_local std::uint64_t tls_ctr;
// Set by attach() before it publishes the mapping; read only by threads
// that registered after (the acquire in register_slow()).
extern constinit const std::atomic<std::uint64_t>* gp_ctr;
reader_registry_layout::Slot* register_slow();
#ifdef NOREFS_REGISTRY_TSAN
extern char tsan_registry_sync;  // as rcu.h's tsan_gp_sync, for same-process readers
#endif
}  // namespace detail

// Takes this thread's slot if it has none.  Dies if not attached or if the
// registry is full of live readers.
inline void register_thread() {
  if (detail::tls_slot == nullptr) detail::register_slow();
}

inline void read_lock() {
  reader_registry_layout::Slot* slot = detail::tls_slot;
  if (slot == nullptr) [[unlikely]]
    slot = detail::register_slow();
  std::uint64_t tmp = detail::tls_ctr;
  // Relaxed load and store: the writer's membarrier orders them (see the
  // header comment); the signal fence keeps the compiler from moving the
  // section's accesses above the store.
  std::uint64_t v = (tmp & reader_registry_layout::kNestMask) == 0
                        ? detail::gp_ctr->load(std::memory_order_relaxed)
                        : tmp + reader_registry_layout::kGpCount;
  detail::tls_ctr = v;
  slot->ctr.store(v, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

inline void read_unlock() {
#ifdef NOREFS_REGISTRY_TSAN
  __tsan_release(&detail::tsan_registry_sync);
#endif
  // The compiler barrier keeps the section's accesses above the store; the
  // writer's second membarrier completes them before it returns.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::uint64_t v = detail::tls_ctr - reader_registry_layout::kGpCount;
  detail::tls_ctr = v;
  detail::tls_slot->ctr.store(v, std::memory_order_relaxed);
}

inline bool in_read_section() { return (detail::tls_ctr & reader_registry_layout::kNestMask) != 0; }

// A read-side section for the scope.  Nests.
class ReadGuard {
 public:
  ReadGuard() { read_lock(); }
  ~ReadGuard() { read_unlock(); }
  ReadGuard(const ReadGuard&) = delete;
  ReadGuard& operator=(const ReadGuard&) = delete;
};

// For tests: this thread's slot index, or -1 if it has none.
long debug_slot_index();

}  // namespace remote_rcu

}  // namespace norefs::alloc
