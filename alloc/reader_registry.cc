// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/reader_registry.cc — the cross-process grace period: the writer
// (ReaderRegistry), the owner checks on /proc, and the reader side
// (remote_rcu).  The design, the layout and the state of each word are in
// the header; this file justifies each ordering where it is used.
#include "alloc/reader_registry.h"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "alloc/die.h"

namespace norefs::alloc {

using reader_registry_layout::Header;
using reader_registry_layout::kGpCount;
using reader_registry_layout::kGpPhase;
using reader_registry_layout::kNestMask;
using reader_registry_layout::make_owner;
using reader_registry_layout::owner_busy;
using reader_registry_layout::owner_pid;
using reader_registry_layout::Slot;

namespace {

// A wait this long makes the writer check the owners that hold it back,
// and again every kRecheckNs while they do.
constexpr std::uint64_t kCheckAfterNs = 2'000'000;
constexpr std::uint64_t kRecheckNs = 10'000'000;
// A wait this long names its blocker in stats().
constexpr std::uint64_t kBlockingAfterNs = 1'000'000;
// Idle slots of dead owners hold no grace period back but keep the full
// path in use: synchronize() sweeps for them at most this often.
constexpr std::uint64_t kSweepEveryNs = 1'000'000'000;
// The wait polls: this many busy polls (liburcu's RCU_QS_ACTIVE_ATTEMPTS),
// then sleeps from kSleepMinNs doubling to kSleepMaxNs.
constexpr unsigned kActivePolls = 100;
constexpr long kSleepMinNs = 10'000;
constexpr long kSleepMaxNs = 1'000'000;

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

long sys_membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

// ---- /proc, with open/read only: the fork handlers use these too, where
// only async-signal-safe calls are allowed in the child.

// Appends the decimal digits of v to p; returns the new end.
char* put_uint(char* p, std::uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = tmp[--n];
  return p;
}
char* put_str(char* p, const char* s) {
  while (*s != '\0') *p++ = *s++;
  return p;
}

// "/proc/PID/tail" or "/proc/PID/task/TID/tail" into buf (64 bytes).
void proc_path(char* buf, pid_t pid, pid_t tid, const char* tail) {
  char* p = put_str(buf, "/proc/");
  p = put_uint(p, static_cast<std::uint64_t>(pid));
  if (tid != 0) {
    p = put_str(p, "/task/");
    p = put_uint(p, static_cast<std::uint64_t>(tid));
  }
  *p++ = '/';
  p = put_str(p, tail);
  *p = '\0';
}

// Reads up to cap - 1 bytes of a small file; 0 or an errno.
int read_small(const char* path, char* buf, std::size_t cap, std::size_t* len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  std::size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return e;
    }
    if (r == 0) break;
    n += static_cast<std::size_t>(r);
  }
  close(fd);
  buf[n] = '\0';
  *len = n;
  return 0;
}

struct ProcStat {
  char state = '?';
  std::uint64_t start = 0;  // field 22, clock ticks since boot
};

bool gone(int err) { return err == ENOENT || err == ESRCH; }
bool dead_state(char s) { return s == 'Z' || s == 'X' || s == 'x'; }

// Parses a stat line: "pid (comm) state ppid ..." (comm may hold spaces and
// parentheses: the last ')' ends it).
bool parse_stat(const char* buf, std::size_t len, ProcStat* out) {
  const char* end = buf + len;
  const char* p = end;
  while (p > buf && p[-1] != ')') p--;
  if (p == buf) return false;
  // Fields after ')': 3 (state) is the first, 22 (starttime) the 20th.
  int field = 2;
  while (p < end) {
    while (p < end && *p == ' ') p++;
    if (p == end) break;
    field++;
    if (field == 3) out->state = *p;
    if (field == 22) {
      std::uint64_t v = 0;
      while (p < end && *p >= '0' && *p <= '9') v = v * 10 + static_cast<std::uint64_t>(*p++ - '0');
      out->start = v;
      return true;
    }
    while (p < end && *p != ' ') p++;
  }
  return false;
}

// 0, or an errno (ENOENT/ESRCH: no such process or thread).
int read_stat_path(const char* path, ProcStat* out) {
  char buf[1024];
  std::size_t len = 0;
  if (int e = read_small(path, buf, sizeof buf, &len); e != 0) return e;
  return parse_stat(buf, len, out) ? 0 : EINVAL;
}
int proc_stat(pid_t pid, pid_t tid, ProcStat* out) {
  char path[64];
  proc_path(path, pid, tid, "stat");
  return read_stat_path(path, out);
}

// 1 if /proc/PID/maps maps the file (dev, ino), 0 if not, -errno if it
// cannot be read.  Lines: "start-end perms offset major:minor inode path".
int maps_has(pid_t pid, dev_t dev, ino_t ino) {
  char path[64];
  proc_path(path, pid, 0, "maps");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  char buf[8192];
  std::size_t have = 0;
  bool found = false, eof = false;
  while (!found && !eof) {
    ssize_t r = read(fd, buf + have, sizeof buf - have);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    if (r == 0) eof = true;
    have += static_cast<std::size_t>(r);
    std::size_t start = 0;
    for (std::size_t i = 0; i < have && !found; i++) {
      if (buf[i] != '\n' && !(eof && i + 1 == have)) continue;
      // One line: [start, i].  Skip 3 fields, then "major:minor inode".
      const char* p = buf + start;
      const char* e = buf + i + 1;
      for (int f = 0; f < 3 && p < e; f++) {
        while (p < e && *p != ' ') p++;
        while (p < e && *p == ' ') p++;
      }
      auto hex = [&](unsigned long* v) {
        *v = 0;
        for (; p < e && std::isxdigit(static_cast<unsigned char>(*p)); p++) {
          *v = *v * 16 + static_cast<unsigned long>(std::isdigit(static_cast<unsigned char>(*p))
                                                        ? *p - '0'
                                                        : (*p | 0x20) - 'a' + 10);
        }
      };
      unsigned long maj = 0, min = 0;
      hex(&maj);
      if (p < e && *p == ':') p++;
      hex(&min);
      while (p < e && *p == ' ') p++;
      std::uint64_t inode = 0;
      for (; p < e && *p >= '0' && *p <= '9'; p++) inode = inode * 10 + (*p - '0');
      if (inode == ino && maj == major(dev) && min == minor(dev)) found = true;
      start = i + 1;
    }
    // Keep the unfinished line; a line longer than the buffer (a path of
    // 8 KiB) cannot be ours, drop it.
    if (start == 0 && have == sizeof buf) start = have;
    std::memmove(buf, buf + start, have - start);
    have -= start;
  }
  close(fd);
  return found ? 1 : 0;
}

// ---- Owner checks and slot transitions, shared by the writer and by a
// registering reader that finds no free slot.

enum class Verdict { alive, dead, changed };

bool process_dead(pid_t pid) {
  ProcStat st;
  int e = proc_stat(pid, 0, &st);
  return gone(e) || (e == 0 && dead_state(st.state));
}

// The last process found mapping the registry, in one sweep: a client's
// threads sit in neighbouring slots, and its maps are the costly read.
struct MappedCache {
  pid_t pid = 0;
  std::uint64_t start = 0;
};

// Whether the owner `o` of `s` (loaded with acquire) is dead.  Unknown
// counts as alive: reclaiming a live reader's slot would be unsafe, keeping
// a dead one's only costs waiting.
Verdict check_owner(const Slot& s, std::uint64_t o, dev_t dev, ino_t ino,
                    MappedCache* cache = nullptr) {
  pid_t pid = owner_pid(o);
  // Busy: the other fields are being written; only the holder's pid is
  // known, and a holder that died mid-transition must not hold forever.
  if (owner_busy(o)) return process_dead(pid) ? Verdict::dead : Verdict::alive;
  // Relaxed, then an acquire fence and the owner again: the seqlock read.
  // The owner word's release store published these fields; the fence keeps
  // the second load after them, so an equal value means they were not
  // changed meanwhile (they change only under a different, busy, value).
  pid_t tid = s.tid.load(std::memory_order_relaxed);
  std::uint64_t proc_start = s.proc_start.load(std::memory_order_relaxed);
  std::uint64_t thread_start = s.thread_start.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.owner.load(std::memory_order_relaxed) != o) return Verdict::changed;

  ProcStat st;
  int e = proc_stat(pid, 0, &st);
  if (gone(e)) return Verdict::dead;
  if (e != 0) return Verdict::alive;
  if (dead_state(st.state) || st.start != proc_start) return Verdict::dead;  // dead, or pid reused
  e = proc_stat(pid, tid, &st);
  if (gone(e)) return Verdict::dead;  // the thread exited without its destructor
  if (e == 0 && (dead_state(st.state) || st.start != thread_start)) return Verdict::dead;
  // Same process, same thread: still the image that registered?  After
  // exec the registry is no longer mapped (-errno: not ours to read; alive).
  if (cache != nullptr && cache->pid == pid && cache->start == proc_start) return Verdict::alive;
  int mapped = maps_has(pid, dev, ino);
  if (mapped == 0) return Verdict::dead;
  if (mapped == 1 && cache != nullptr) *cache = {pid, proc_start};
  return Verdict::alive;
}

// Frees `s` held by `o`, whose holder is dead (or, for `count_dead`
// false, is the caller itself handing back a reservation).  False if the
// owner changed since it was checked.
bool reclaim(Header& h, Slot& s, std::uint64_t o, bool count_dead) {
  std::uint64_t mine =
      make_owner(h.next_seq.fetch_add(1, std::memory_order_relaxed), true, getpid());
  // Acquire: the dead owner's last stores to the slot come before ours.
  // Relaxed on failure: we only give up.
  if (!s.owner.compare_exchange_strong(o, mine, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
    return false;
  }
  s.ctr.store(0, std::memory_order_relaxed);
  s.flags.store(0, std::memory_order_relaxed);
  // Release pairs with the acquire CAS of the next taker: it sees ctr == 0.
  s.owner.store(0, std::memory_order_release);
  // After the store of 0, so that dying here leaves the count too high.
  h.slots_in_use.fetch_sub(1, std::memory_order_seq_cst);
  if (count_dead) h.reclaimed_dead.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::size_t reclaim_dead_slots(Header& h, Slot* slots, std::size_t capacity, dev_t dev, ino_t ino) {
  std::size_t n = 0;
  MappedCache cache;
  std::size_t hwm = std::min<std::uint64_t>(h.slots_hwm.load(std::memory_order_relaxed), capacity);
  for (std::size_t i = 0; i < hwm; i++) {
    // Acquire pairs with the release store that published the fields.
    std::uint64_t o = slots[i].owner.load(std::memory_order_acquire);
    if (o == 0) continue;
    if (check_owner(slots[i], o, dev, ino, &cache) == Verdict::dead &&
        reclaim(h, slots[i], o, true)) {
      n++;
    }
  }
  return n;
}

void raise_max(std::atomic<std::uint64_t>& a, std::uint64_t v) {
  std::uint64_t cur = a.load(std::memory_order_relaxed);
  // Relaxed: a bound read on its own; the registration's seq_cst fence
  // orders hwm before the reader's first section (see take_slot()).
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

struct Owner {
  pid_t pid, tid;
  std::uint64_t proc_start, thread_start, image;
};

// Takes a free slot for `who` with the given ctr and flags; its index, or -1
// if none is free.  The registration of the Dekker pairing with the
// writer's fast path (ReaderRegistry::run_grace_period()).
long take_slot(Header& h, Slot* slots, std::size_t capacity, const Owner& who, std::uint64_t ctr,
               std::uint32_t flags) {
  // Raised before the slot is taken (overcount only, see the header).
  // seq_cst RMW: one half of the Dekker pairing, with the fence below.
  h.slots_in_use.fetch_add(1, std::memory_order_seq_cst);
  for (std::size_t i = 0; i < capacity; i++) {
    Slot& s = slots[i];
    if (s.owner.load(std::memory_order_relaxed) != 0) continue;
    std::uint64_t seq = h.next_seq.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t expected = 0;
    // Acquire pairs with the release store of 0 by whoever freed the slot.
    if (!s.owner.compare_exchange_strong(expected, make_owner(seq, true, who.pid),
                                         std::memory_order_acquire, std::memory_order_relaxed)) {
      continue;
    }
    s.tid.store(who.tid, std::memory_order_relaxed);
    s.flags.store(flags, std::memory_order_relaxed);
    s.proc_start.store(who.proc_start, std::memory_order_relaxed);
    s.thread_start.store(who.thread_start, std::memory_order_relaxed);
    s.image.store(who.image, std::memory_order_relaxed);
    s.ctr.store(ctr, std::memory_order_relaxed);
    raise_max(h.slots_hwm, i + 1);
    raise_max(h.slots_peak, h.slots_in_use.load(std::memory_order_relaxed));
    // Release pairs with check_owner()'s acquire: the fields are the owner's.
    s.owner.store(make_owner(seq, false, who.pid), std::memory_order_release);
    // The other half: the writer's seq_cst fence before it reads
    // slots_in_use.  Also orders the slot (hwm, ctr) before anything this
    // thread does next: a fork reservation before the parent's unlock
    // (the confirmation pass in wait_for_readers()).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return static_cast<long>(i);
  }
  h.slots_in_use.fetch_sub(1, std::memory_order_seq_cst);
  return -1;
}

// A slot's owner gives it back: ctr 0, then free.
void release_slot(Header& h, Slot& s) {
  s.ctr.store(0, std::memory_order_relaxed);
  s.flags.store(0, std::memory_order_relaxed);
  // Release pairs with the next taker's acquire CAS.
  s.owner.store(0, std::memory_order_release);
  // seq_cst (a release RMW): the writer's fast path reads slots_in_use with
  // acquire; reading this decrement, it sees every access of this thread's
  // sections as done.  After the store of 0: dying here overcounts.
  h.slots_in_use.fetch_sub(1, std::memory_order_seq_cst);
}

std::atomic<ReaderRegistry*> g_process_registry{nullptr};

}  // namespace

// ---- Writer

ReaderRegistry::ReaderRegistry(std::size_t slots) : capacity_(slots) {
  if (slots == 0 || slots > (std::size_t{1} << 20)) {
    throw std::system_error(EINVAL, std::generic_category(), "reader registry: slot count");
  }
  long q = sys_membarrier(MEMBARRIER_CMD_QUERY);
  if (q < 0 || (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) {
    throw std::system_error(q < 0 ? errno : ENOSYS, std::generic_category(),
                            "reader registry: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)");
  }
  fd_ = memfd_create("norefs-readers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "reader registry: memfd");
  auto fail = [this](const char* what) {
    int e = errno;
    if (mem_ != nullptr) munmap(mem_, bytes_);
    close(fd_);
    throw std::system_error(e, std::generic_category(), std::string("reader registry: ") + what);
  };
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t slot_offset = sizeof(Header);
  bytes_ = (slot_offset + slots * sizeof(Slot) + page - 1) / page * page;
  if (ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) fail("ftruncate");
  // No client can change the size: a shrink would SIGBUS the daemon.
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) fail("seal");
  void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) fail("mmap");
  mem_ = m;
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail("fstat");
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  h_ = std::construct_at(static_cast<Header*>(mem_));
  slots_ = reinterpret_cast<Slot*>(static_cast<char*>(mem_) + slot_offset);
  for (std::size_t i = 0; i < slots; i++) std::construct_at(slots_ + i);
  // Relaxed: the fd reaches a reader through a system call (fork, exec,
  // sendmsg) after these stores, which orders them.
  h_->version.store(reader_registry_layout::kVersion, std::memory_order_relaxed);
  h_->capacity.store(static_cast<std::uint32_t>(slots), std::memory_order_relaxed);
  h_->slot_offset.store(slot_offset, std::memory_order_relaxed);
  h_->gp_ctr.store(kGpCount, std::memory_order_relaxed);
  h_->magic.store(reader_registry_layout::kMagic, std::memory_order_relaxed);
  pending_.reserve(64);
}

ReaderRegistry::~ReaderRegistry() {
  munmap(mem_, bytes_);
  close(fd_);
}

void ReaderRegistry::membarrier_global() {
  // The fences make this thread's side explicit in the C++ model; the
  // system call is a full barrier for it anyway.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sys_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0) {
    NOREFS_DIE("membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED): " +
               std::generic_category().message(errno));
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  membarriers_.fetch_add(1, std::memory_order_relaxed);
}

void ReaderRegistry::synchronize() {
  std::uint64_t c = cookie();
  std::lock_guard<std::mutex> lock(gp_mu_);
  // A grace period that began after our call ended while we waited for the
  // mutex: it serves us too (liburcu's followers share the leader's).
  if (!poll(c)) {
    // acq_rel: acquire takes in every cookie() taken before (their release
    // sequences); release orders our own earlier stores for the same reason.
    std::uint64_t s = gp_started_.fetch_add(1, std::memory_order_acq_rel) + 1;
    run_grace_period();
    // Release pairs with the acquire in poll().  A plain store: grace
    // periods are serialized by gp_mu_, so s only grows.
    gp_completed_.store(s, std::memory_order_release);
  }
#ifdef NOREFS_REGISTRY_TSAN
  __tsan_acquire(&remote_rcu::detail::tsan_registry_sync);
#endif
}

void ReaderRegistry::run_grace_period() {
  grace_periods_.fetch_add(1, std::memory_order_relaxed);
  // The fast path, a Dekker pairing.  Writer: whatever the caller did
  // before (the unlink), this fence, the load of slots_in_use.  Reader
  // registering: its seq_cst RMW of slots_in_use, a seq_cst fence, then its
  // first section's loads.  The fences are ordered one way or the other:
  // either the load below sees the registration, or the reader's loads see
  // the unlink and it cannot find what is about to be freed.  A reader that
  // left (release_slot) and brought the count to 0 is seen done by the
  // acquire.  So 0 means no reader can hold a reference: return with no
  // system call.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h_->slots_in_use.load(std::memory_order_acquire) == 0) {
    publish();  // the last reader may just have left
    return;
  }
  if (ignore_readers_.load(std::memory_order_relaxed)) return;  // test control only
  std::uint64_t start = now_ns();
  if (start - last_sweep_ns_ >= kSweepEveryNs || last_sweep_ns_ == 0) {
    reclaim_dead();
    last_sweep_ns_ = start;
  }

  // Write the unlink before the readers' ctr are read (smp_mb_master()).
  membarrier_global();
  bool saw_reader = false;
  // Wait for readers of the old phase; those of the current one (which may
  // have begun before this grace period) are waited for after the flip.
  wait_for_readers(start, &saw_reader);
  // liburcu: cmm_smp_mb() around the flip, "not formally required" with
  // the waits' loads and the flip's store all on this thread; kept as it is.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Relaxed load and store: only this thread (under gp_mu_) writes gp_ctr,
  // and readers need no ordering with it beyond the membarriers'.
  h_->gp_ctr.store(h_->gp_ctr.load(std::memory_order_relaxed) ^ kGpPhase,
                   std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Every reader that began before the flip now shows the old phase.
  wait_for_readers(start, &saw_reader);
  // Finish the readers' accesses before the caller frees (smp_mb_master()).
  membarrier_global();
  if (saw_reader) waited_.fetch_add(1, std::memory_order_relaxed);
  blocking_pid_.store(0, std::memory_order_relaxed);
  blocking_ms_.store(0, std::memory_order_relaxed);
  publish();
}

// liburcu's wait_for_readers() with the whole registry as input each time
// (its cur_snap list is an optimization that assumes a slot's section
// begins when the slot shows it; a fork reservation breaks that, see
// below), polling instead of its futex: readers here never write anything
// but their own slot.
void ReaderRegistry::wait_for_readers(std::uint64_t gp_start_ns, bool* saw_reader) {
  unsigned polls = 0;
  long sleep_ns = kSleepMinNs;
  std::uint64_t next_check = gp_start_ns + kCheckAfterNs;
  bool one_clean_pass = false;
  for (;;) {
    pending_.clear();
    // Relaxed: gp_ctr is written by this thread only.  hwm: a slot taken
    // after the first membarrier and not yet counted belongs to a reader
    // whose section began after it (its seq_cst fence follows the hwm raise).
    std::uint64_t gp = h_->gp_ctr.load(std::memory_order_relaxed);
    std::size_t hwm =
        std::min<std::uint64_t>(h_->slots_hwm.load(std::memory_order_relaxed), capacity_);
    for (std::size_t i = 0; i < hwm; i++) {
      // Relaxed (liburcu's CMM_LOAD_SHARED): the membarriers order it.
      std::uint64_t v = slots_[i].ctr.load(std::memory_order_relaxed);
      if ((v & kNestMask) == 0) continue;
      *saw_reader = true;
      if (((v ^ gp) & kGpPhase) != 0) pending_.push_back(static_cast<std::uint32_t>(i));
    }
    if (pending_.empty()) {
      if (one_clean_pass) break;
      // One pass reads the slots one after the other.  A parent that forks
      // inside a section reserves the child's slot (seq_cst fence) and only
      // then can leave its own: a pass may read the child's slot before the
      // reservation and the parent's after the unlock.  If it read that
      // unlock, this acquire fence synchronizes with the parent's fence
      // (which precedes the unlock), so the next pass sees the reservation.
      std::atomic_thread_fence(std::memory_order_acquire);
      one_clean_pass = true;
      continue;
    }
    one_clean_pass = false;
    std::uint64_t now = now_ns();
    if (now - gp_start_ns >= kBlockingAfterNs) {
      blocking_pid_.store(owner_pid(slots_[pending_[0]].owner.load(std::memory_order_relaxed)),
                          std::memory_order_relaxed);
      blocking_ms_.store((now - gp_start_ns) / 1'000'000, std::memory_order_relaxed);
    }
    if (polls >= kActivePolls) publish();  // waiting: say who holds it, live
    if (now >= next_check) {
      check_blockers(now);
      next_check = now + kRecheckNs;
    }
    if (polls < kActivePolls) {
      polls++;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      timespec ts{0, sleep_ns};
      nanosleep(&ts, nullptr);
      sleep_ns = std::min(sleep_ns * 2, kSleepMaxNs);
    }
  }
}

void ReaderRegistry::check_blockers(std::uint64_t /*now*/) {
  for (std::uint32_t i : pending_) {
    // Acquire pairs with the release store that published the fields.
    std::uint64_t o = slots_[i].owner.load(std::memory_order_acquire);
    if (o != 0 && check_owner(slots_[i], o, dev_, ino_) == Verdict::dead) {
      reclaim(*h_, slots_[i], o, true);
    }
  }
}

std::size_t ReaderRegistry::reclaim_dead() {
  return reclaim_dead_slots(*h_, slots_, capacity_, dev_, ino_);
}

ReaderRegistryStats ReaderRegistry::stats() const {
  // Relaxed: counters, each read on its own.
  ReaderRegistryStats s;
  s.slots_in_use = h_->slots_in_use.load(std::memory_order_relaxed);
  s.slots_peak = h_->slots_peak.load(std::memory_order_relaxed);
  s.reclaimed_dead = h_->reclaimed_dead.load(std::memory_order_relaxed);
  s.grace_periods = grace_periods_.load(std::memory_order_relaxed);
  s.waited = waited_.load(std::memory_order_relaxed);
  s.blocking_pid = blocking_pid_.load(std::memory_order_relaxed);
  s.blocking_ms = blocking_ms_.load(std::memory_order_relaxed);
  s.membarriers = membarriers_.load(std::memory_order_relaxed);
  return s;
}

void ReaderRegistry::set_stats_sink(RemoteReaderCounters* sink) {
  std::lock_guard<std::mutex> lock(gp_mu_);
  sink_.store(sink, std::memory_order_release);
  publish();
}

void ReaderRegistry::publish() {
  RemoteReaderCounters* c = sink_.load(std::memory_order_relaxed);  // written under gp_mu_, held
  if (!c) return;
  const ReaderRegistryStats s = stats();
  // Single writer (gp_mu_): counter_block.h's relaxed stores.
  auto put = [](Counter& k, std::uint64_t v) { k.store(v, std::memory_order_relaxed); };
  put(c->slots_in_use, s.slots_in_use);
  put(c->slots_peak, s.slots_peak);
  put(c->grace_periods, s.grace_periods);
  put(c->waited, s.waited);
  put(c->reclaimed_dead, s.reclaimed_dead);
  put(c->blocking_pid, static_cast<std::uint64_t>(s.blocking_pid));
  put(c->blocking_ms, s.blocking_ms);
  put(c->membarriers, s.membarriers);
}

ReaderRegistry& process_registry() {
  // Never destroyed: rcu::synchronize() may run during static destruction.
  static ReaderRegistry* const registry = [] {
    auto* r = new ReaderRegistry();
    // seq_cst: pairs with the fence before the load in rcu::synchronize()
    // and rcu::call() (alloc/rcu.cc).
    g_process_registry.store(r, std::memory_order_seq_cst);
    return r;
  }();
  return *registry;
}

ReaderRegistry* process_registry_if_created() {
  // Acquire pairs with the store above: the registry is constructed.
  return g_process_registry.load(std::memory_order_acquire);
}

// ---- Reader

namespace remote_rcu {
namespace detail {

constinit thread_local Slot* tls_slot = nullptr;
constinit thread_local std::uint64_t tls_ctr = 0;
constinit const std::atomic<std::uint64_t>* gp_ctr = nullptr;
#ifdef NOREFS_REGISTRY_TSAN
char tsan_registry_sync;
#endif

}  // namespace detail

namespace {

// The mapping of this process image.  Written under attach_mu before
// `attached_flag` is set (release); read by threads that saw it set.
struct Attachment {
  Header* h = nullptr;
  Slot* slots = nullptr;
  std::size_t capacity = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t image = 0;  // random per attach: what exec changes
};
Attachment att;
std::mutex attach_mu;
std::atomic<bool> attached_flag{false};

// A fork inside a section, on the forking thread, from prepare to parent.
constexpr int kMaxChildren = 256;
constinit thread_local Slot* tls_fork_slot = nullptr;
constinit thread_local std::uint64_t tls_fork_owner = 0;
constinit thread_local pid_t tls_fork_parent = 0;
constinit thread_local int tls_children_before = -1;  // -1: unknown
constinit thread_local pid_t tls_children[kMaxChildren];

pid_t sys_gettid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

Owner self_owner() {
  Owner o{getpid(), sys_gettid(), 0, 0, att.image};
  ProcStat st;
  if (read_stat_path("/proc/self/stat", &st) == 0) o.proc_start = st.start;
  if (read_stat_path("/proc/thread-self/stat", &st) == 0) o.thread_start = st.start;
  return o;
}

// This thread's children (/proc/thread-self/children) into out; the count,
// or -1 if unknown (no CONFIG_PROC_CHILDREN, or more than fit).
int read_children(pid_t* out) {
  char buf[4096];
  std::size_t len = 0;
  if (read_small("/proc/thread-self/children", buf, sizeof buf, &len) != 0) return -1;
  if (len + 1 >= sizeof buf) return -1;
  int n = 0;
  for (std::size_t i = 0; i < len;) {
    while (i < len && buf[i] == ' ') i++;
    if (i == len || buf[i] == '\n') break;
    std::uint64_t v = 0;
    while (i < len && buf[i] >= '0' && buf[i] <= '9') v = v * 10 + (buf[i++] - '0');
    if (n == kMaxChildren) return -1;
    out[n++] = static_cast<pid_t>(v);
  }
  return n;
}

void release_this_thread() {
  Slot* s = detail::tls_slot;
  if (s == nullptr) return;
  detail::tls_slot = nullptr;
  detail::tls_ctr = 0;
  // The thread's last section (even one it exits inside) is done: the
  // seq_cst RMW in release_slot() publishes that to the writer's fast path,
  // and its membarriers cover the slow path.
  release_slot(*att.h, *s);
}

// Gives the slot back at thread exit.  Constructed on the registration slow
// path only, so the fast path tests a trivially destructible pointer.
struct ThreadExit {
  ThreadExit() = default;
  ThreadExit(const ThreadExit&) = delete;
  ThreadExit& operator=(const ThreadExit&) = delete;
  ~ThreadExit() { release_this_thread(); }
};

void fork_prepare() {
  Slot* s = detail::tls_slot;
  if (s == nullptr || (detail::tls_ctr & kNestMask) == 0) return;
  // Inside a section: the child inherits it.  Reserve its slot now, with the
  // parent's ctr, so that a grace period waits for it before the child
  // exists; the parent's own slot covers it until this fence (take_slot()).
  tls_children_before = read_children(tls_children);
  Owner me = self_owner();
  long i = take_slot(*att.h, att.slots, att.capacity, me, detail::tls_ctr,
                     reader_registry_layout::kSlotForking);
  if (i < 0) {
    reclaim_dead_slots(*att.h, att.slots, att.capacity, att.dev, att.ino);
    i = take_slot(*att.h, att.slots, att.capacity, me, detail::tls_ctr,
                  reader_registry_layout::kSlotForking);
  }
  if (i < 0) NOREFS_DIE("remote_rcu: fork() inside a read-side section, and the registry is full");
  tls_fork_slot = att.slots + i;
  // Relaxed: this thread's own last store to the word.
  tls_fork_owner = tls_fork_slot->owner.load(std::memory_order_relaxed);
  tls_fork_parent = me.pid;
}

void fork_parent() {
  Slot* s = tls_fork_slot;
  if (s == nullptr) return;
  tls_fork_slot = nullptr;
  if (tls_children_before < 0) return;  // the child claims it (see the header)
  pid_t after[kMaxChildren];
  int n = read_children(after);
  if (n < 0) return;
  pid_t child = 0;
  for (int i = 0; i < n && child == 0; i++) {
    if (std::find(tls_children, tls_children + tls_children_before, after[i]) ==
        tls_children + tls_children_before) {
      child = after[i];
    }
  }
  ProcStat st;
  if (child == 0 || proc_stat(child, 0, &st) != 0) {
    // No child: fork failed, or the child is already gone (reaped).
    reclaim(*att.h, *s, tls_fork_owner, false);
    return;
  }
  // Hand the slot to the child, unless it claimed it first.
  std::uint64_t seq = att.h->next_seq.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t o = tls_fork_owner;
  // Acquire/release as take_slot()'s CAS and store.
  if (!s->owner.compare_exchange_strong(o, make_owner(seq, true, tls_fork_parent),
                                        std::memory_order_acquire, std::memory_order_relaxed)) {
    return;
  }
  s->tid.store(child, std::memory_order_relaxed);
  s->proc_start.store(st.start, std::memory_order_relaxed);
  s->thread_start.store(st.start, std::memory_order_relaxed);  // its only thread
  s->flags.store(0, std::memory_order_relaxed);
  s->owner.store(make_owner(seq, false, child), std::memory_order_release);
}

void fork_child() {
  // The parent's slots are the parent's: this thread registers anew.
  detail::tls_slot = nullptr;
  Slot* s = tls_fork_slot;
  tls_fork_slot = nullptr;
  if (s == nullptr) return;
  // Inside an inherited section: claim the reserved slot (async-signal-safe
  // calls only: open, read, getpid, gettid, sched_yield).
  Owner me = self_owner();
  me.thread_start = me.proc_start;
  for (;;) {
    // Acquire: the fields the parent may have written are visible.
    std::uint64_t o = s->owner.load(std::memory_order_acquire);
    if (o == tls_fork_owner) {
      std::uint64_t seq = att.h->next_seq.fetch_add(1, std::memory_order_relaxed);
      if (!s->owner.compare_exchange_strong(o, make_owner(seq, true, me.pid),
                                            std::memory_order_acquire, std::memory_order_relaxed)) {
        continue;
      }
      s->tid.store(me.tid, std::memory_order_relaxed);
      s->proc_start.store(me.proc_start, std::memory_order_relaxed);
      s->thread_start.store(me.thread_start, std::memory_order_relaxed);
      s->flags.store(0, std::memory_order_relaxed);
      s->owner.store(make_owner(seq, false, me.pid), std::memory_order_release);
      break;
    }
    if (!owner_busy(o) && owner_pid(o) == me.pid) break;  // the parent handed it over
    if (owner_busy(o) && owner_pid(o) == tls_fork_parent) {
      sched_yield();  // the parent is handing it over
      continue;
    }
    NOREFS_DIE("remote_rcu: fork() inside a read-side section: the child's slot was taken back");
  }
  detail::tls_slot = s;  // tls_ctr carries the nesting
}

std::uint64_t random_token() {
  std::uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
    v = now_ns() ^ (static_cast<std::uint64_t>(getpid()) << 40);
  }
  return v == 0 ? 1 : v;
}

}  // namespace

int attach(int registry_fd) {
  std::lock_guard<std::mutex> lock(attach_mu);
  struct stat st {};
  if (fstat(registry_fd, &st) != 0) return -errno;
  if (attached_flag.load(std::memory_order_relaxed)) {
    return st.st_dev == att.dev && st.st_ino == att.ino ? 0 : -EBUSY;
  }
  if (static_cast<std::size_t>(st.st_size) < sizeof(Header)) return -EINVAL;
  if (sys_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0) return -errno;
  std::size_t bytes = static_cast<std::size_t>(st.st_size);
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, registry_fd, 0);
  if (m == MAP_FAILED) return -errno;
  auto* h = static_cast<Header*>(m);
  // Relaxed: written before the fd was handed out (see the constructor).
  std::uint64_t offset = h->slot_offset.load(std::memory_order_relaxed);
  std::uint64_t capacity = h->capacity.load(std::memory_order_relaxed);
  if (h->magic.load(std::memory_order_relaxed) != reader_registry_layout::kMagic ||
      h->version.load(std::memory_order_relaxed) != reader_registry_layout::kVersion ||
      offset % alignof(Slot) != 0 || offset < sizeof(Header) ||
      offset + capacity * sizeof(Slot) > bytes) {
    munmap(m, bytes);
    return -EINVAL;
  }
  att.h = h;
  att.slots = reinterpret_cast<Slot*>(static_cast<char*>(m) + offset);
  att.capacity = capacity;
  att.dev = st.st_dev;
  att.ino = st.st_ino;
  att.image = random_token();
  detail::gp_ctr = &h->gp_ctr;
  // Slots naming this pid belong to an earlier image of this process (exec)
  // or to a dead process with the same pid: this image has taken none yet.
  pid_t me = getpid();
  std::size_t hwm = std::min<std::uint64_t>(h->slots_hwm.load(std::memory_order_relaxed), capacity);
  for (std::size_t i = 0; i < hwm; i++) {
    std::uint64_t o = att.slots[i].owner.load(std::memory_order_acquire);
    if (o != 0 && owner_pid(o) == me) reclaim(*h, att.slots[i], o, true);
  }
  static bool atfork_registered = false;
  if (!atfork_registered) {
    if (int e = pthread_atfork(fork_prepare, fork_parent, fork_child); e != 0) {
      munmap(m, bytes);
      return -e;
    }
    atfork_registered = true;
  }
  // Release pairs with the acquire in register_slow(): att and gp_ctr.
  attached_flag.store(true, std::memory_order_release);
  return 0;
}

bool attached() { return attached_flag.load(std::memory_order_acquire); }

namespace detail {

Slot* register_slow() {
  // Acquire pairs with the release in attach().
  if (!attached_flag.load(std::memory_order_acquire)) {
    NOREFS_DIE("remote_rcu: read_lock() before attach()");
  }
  // No signal handler runs on this thread until the slot is set.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  if (tls_slot == nullptr) {
    thread_local ThreadExit thread_exit;  // registers its destructor (may allocate)
    (void)thread_exit;
    Owner me = self_owner();
    long i = take_slot(*att.h, att.slots, att.capacity, me, 0, 0);
    if (i < 0 && reclaim_dead_slots(*att.h, att.slots, att.capacity, att.dev, att.ino) > 0) {
      i = take_slot(*att.h, att.slots, att.capacity, me, 0, 0);
    }
    if (i < 0) {
      NOREFS_DIE("remote_rcu: the reader registry is full (" + std::to_string(att.capacity) +
                 " live reader threads)");
    }
    tls_slot = att.slots + i;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return tls_slot;
}

}  // namespace detail

long debug_slot_index() {
  if (detail::tls_slot == nullptr) return -1;
  return detail::tls_slot - att.slots;
}

}  // namespace remote_rcu

}  // namespace norefs::alloc
