// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_remote_reader — a reader in another process for the benchmarks
// (tools/bench/remote_readers.h starts it; not for running by hand).  It
// maps what its parent hands it (the page cache's shared region, the
// reader registry: alloc/shared_region.h, alloc/reader_registry.h) and
// holds nothing else of the parent: no PageCache, no liburcu, no page
// arena, as a client of the daemon would.
//
//   norefs_remote_reader read REGION_FD REGISTRY_FD FILE SIZE BATCH CPU
//       FILE: the SharedFile's address (hex).  One thread reads SIZE bytes
//       at offset 0 in a loop through the one fast path (cache/fast_path.h)
//       under remote_rcu::ReadGuard, counting reads in its own memory and
//       in its own CacheStats slot (counted per process).
//   norefs_remote_reader idle REGISTRY_FD CPU
//       Takes a registry slot (one empty section) and waits for commands.
//
// CPU >= 0 pins the process (every thread) to that CPU.  Protocol, one line
// each way, commands on stdin, replies on stdout:
//   (start)   -> "ready PID SLOT HASH"   read: once the first read is done;
//                                       HASH: fnv1a-64 of the bytes it copied
//                                       (idle: 0), for the parent to check
//   s  (read) -> "snap READS CPU_NS CACHE_READS FAST_READS SHORT STOP0..STOPn"
//                READS: this process's loop count; CPU_NS: the reading
//                thread's CPU clock; then its CacheStats slot's counters
//                (reads, fast_reads), the reads that returned short, and
//                the fast-path stops by reason (cache::Stop order).
//   e  (idle) -> "in"                 enters a read-side section, stays in it
//   l  (idle) -> "out"                leaves it
//   q  or EOF -> "bye READS HASH"     stops (HASH: of the last read's bytes),
//                                       then exits 0
// Exit 2: usage; 3: the region or registry could not be mapped.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>

#include "alloc/reader_registry.h"
#include "alloc/shared_region.h"
#include "cache/cache_stats.h"
#include "cache/fast_path.h"

namespace {

namespace remote_rcu = norefs::alloc::remote_rcu;
using norefs::cache::CacheSlot;
using norefs::cache::Ctr;
using norefs::cache::SharedFile;

// A read as the daemon's PageCache::read() does it on its noref path
// (read_loop.cc): count the call, one section around the fast path,
// count what it served.  Out of line like PageCache::read(), so that the
// loop around it has the in-process threads' shape (a call per read).
// What differs: the section is the registry's (remote_rcu), and a stop
// has no reference path to continue on here: it is counted, and the read
// returns short ("continue elsewhere", which this benchmark has none of).
[[gnu::noinline]] ssize_t remote_read(const SharedFile& f, std::uint64_t pos, std::size_t len,
                                      std::byte* buf, unsigned batch, CacheSlot& st) {
  bump(st, Ctr::reads);
  norefs::cache::BufferSink sink{buf};
  norefs::cache::FastResult r;
  {
    remote_rcu::ReadGuard g;
    r = norefs::cache::fast_read(f, pos, len, sink, batch, nullptr, st);
  }
  if (!r.complete) {
    bump(st, norefs::cache::stop_counter(r.stop));
    return static_cast<ssize_t>(r.n);
  }
  bump(st, Ctr::fast_reads);
  bump(st, Ctr::bytes, r.n);
  return static_cast<ssize_t>(r.n);
}

// Its own 128-byte lines (pread_scaling.cc's kLine), so that the control
// thread's reads of them share no line with the reader's other stores.
struct alignas(128) LoopCounter {
  std::atomic<std::uint64_t> n{0};  // single writer: the reading thread (relaxed load + store)
};

// FNV-1a, 64 bits: remote_readers.h's fnv1a_64(), which the parent checks against.
std::uint64_t fnv1a(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; i++)
    h = (h ^ std::to_integer<std::uint64_t>(p[i])) * 0x100000001b3ULL;
  return h;
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);  // best effort, as pread_scaling's threads
}

// One command line from stdin: its first character, or 'q' at EOF.
char next_command() {
  char line[64];
  if (!std::fgets(line, sizeof line, stdin)) return 'q';
  return line[0];
}

void reply(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int usage(const char* self) {
  std::fprintf(stderr,
               "usage: %s read REGION_FD REGISTRY_FD FILE_HEX SIZE BATCH CPU\n"
               "       %s idle REGISTRY_FD CPU\n"
               "(started by norefs_pread_scaling and norefs_punch_wait: tools/bench/"
               "remote_readers.h)\n",
               self, self);
  return 2;
}

int attach_registry(int fd) {
  if (int e = remote_rcu::attach(fd); e != 0) {
    std::fprintf(stderr, "norefs_remote_reader: attach the registry (fd %d): %s\n", fd,
                 std::error_code(-e, std::generic_category()).message().c_str());
    return 3;
  }
  close(fd);
  return 0;
}

int run_read(int region_fd, int registry_fd, const SharedFile* file, std::size_t size,
             unsigned batch, int cpu) {
  if (!norefs::alloc::SharedRegion::map_view(region_fd)) {
    std::fprintf(stderr, "norefs_remote_reader: map the region (fd %d): %s\n", region_fd,
                 std::error_code(errno, std::generic_category()).message().c_str());
    return 3;
  }
  close(region_fd);
  if (int rc = attach_registry(registry_fd)) return rc;
  pin(cpu);
  norefs::cache::CacheStats stats("", 4);
  LoopCounter reads, short_reads;
  std::atomic<bool> stop{false};
  std::atomic<long> slot{-1};
  // The bytes of the first and the last read.  first_hash: release, so
  // that the control thread that sees it sees `slot` too.
  std::atomic<std::uint64_t> first_hash{0};
  std::uint64_t last_hash = 0;  // written by the reader, read after join()
  std::thread reader([&] {
    remote_rcu::register_thread();
    slot.store(remote_rcu::debug_slot_index(), std::memory_order_relaxed);
    CacheSlot& st = stats.slot();
    // 128-byte aligned, as pread_scaling's buffers.
    auto* dst = static_cast<std::byte*>(std::aligned_alloc(128, (size + 127) / 128 * 128));
    if (!dst) std::abort();
    const ssize_t want = static_cast<ssize_t>(size);
    if (remote_read(*file, 0, size, dst, batch, st) != want) {
      short_reads.n.store(1, std::memory_order_relaxed);
    }
    reads.n.store(1, std::memory_order_relaxed);
    first_hash.store(fnv1a(dst, size), std::memory_order_release);
    // Relaxed: a flag polled per read; it publishes nothing.
    while (!stop.load(std::memory_order_relaxed)) {
      if (remote_read(*file, 0, size, dst, batch, st) != want) {
        short_reads.n.store(short_reads.n.load(std::memory_order_relaxed) + 1,
                            std::memory_order_relaxed);
      }
      reads.n.store(reads.n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    last_hash = fnv1a(dst, size);
    std::free(dst);
  });
  clockid_t clock{};
  const bool have_clock = pthread_getcpuclockid(reader.native_handle(), &clock) == 0;
  // Ready once the loop runs: the parent starts counting only then.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       first_hash.load(std::memory_order_acquire) == 0 &&
       std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  reply("ready " + std::to_string(getpid()) + " " + std::to_string(slot.load()) + " " +
        std::to_string(first_hash.load(std::memory_order_acquire)));
  for (;;) {
    char c = next_command();
    if (c == 's') {
      // The loop count first, then the clock, then the slot: as the
      // in-process harness reads its counters and clocks, each a relaxed
      // load of a single writer's value.
      std::uint64_t n = reads.n.load(std::memory_order_relaxed);
      timespec ts{};
      long long cpu_ns = have_clock && clock_gettime(clock, &ts) == 0
                             ? static_cast<long long>(ts.tv_sec) * 1000000000 + ts.tv_nsec
                             : -1;
      norefs::cache::CacheCounters k = stats.sum();
      std::string s = "snap " + std::to_string(n) + " " + std::to_string(cpu_ns) + " " +
                      std::to_string(k[Ctr::reads]) + " " + std::to_string(k[Ctr::fast_reads]) +
                      " " + std::to_string(short_reads.n.load(std::memory_order_relaxed));
      for (std::size_t i = 0; i < norefs::cache::kStops; i++) {
        s += " " + std::to_string(k.stops(static_cast<norefs::cache::Stop>(i)));
      }
      reply(s);
    } else if (c == 'q') {
      stop.store(true, std::memory_order_relaxed);
      reader.join();
      reply("bye " + std::to_string(reads.n.load(std::memory_order_relaxed)) + " " +
            std::to_string(last_hash));
      return 0;
    } else {
      reply("error unknown command");
    }
  }
}

int run_idle(int registry_fd, int cpu) {
  if (int rc = attach_registry(registry_fd)) return rc;
  pin(cpu);
  // One empty section takes this thread's slot: from now on every grace
  // period of the parent pays the registry's membarrier and scan.
  { remote_rcu::ReadGuard g; }
  reply("ready " + std::to_string(getpid()) + " " + std::to_string(remote_rcu::debug_slot_index()) +
        " 0");
  for (;;) {
    char c = next_command();
    if (c == 'e') {
      remote_rcu::read_lock();
      reply("in");
    } else if (c == 'l') {
      if (remote_rcu::in_read_section()) remote_rcu::read_unlock();
      reply("out");
    } else if (c == 'q') {
      if (remote_rcu::in_read_section()) remote_rcu::read_unlock();
      reply("bye 0 0");
      // Normal exit: the thread-exit destructor hands the slot back.
      return 0;
    } else {
      reply("error unknown command");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A parent that went away: replies fail with EPIPE instead of killing us
  // before the loop ends.
  signal(SIGPIPE, SIG_IGN);
  std::string mode = argc > 1 ? argv[1] : "";
  char* end = nullptr;
  auto num = [&](const char* s) {
    errno = 0;
    long long v = std::strtoll(s, &end, 0);
    return (errno || *end) ? -2 : v;
  };
  if (mode == "read" && argc == 8) {
    long long region = num(argv[2]), registry = num(argv[3]), size = num(argv[5]),
              batch = num(argv[6]), cpu = num(argv[7]);
    unsigned long long addr = std::strtoull(argv[4], &end, 16);
    if (region < 0 || registry < 0 || size <= 0 || batch <= 0 || cpu < -1 || *end || !addr)
      return usage(argv[0]);
    // The parent's address of the SharedFile: the region is mapped at the
    // same address here (SharedRegion::map_view()), so it names the same bytes.
    return run_read(static_cast<int>(region), static_cast<int>(registry),
                    // NOLINTNEXTLINE(performance-no-int-to-ptr): an address passed as text
                    reinterpret_cast<const SharedFile*>(static_cast<std::uintptr_t>(addr)),
                    static_cast<std::size_t>(size), static_cast<unsigned>(batch),
                    static_cast<int>(cpu));
  }
  if (mode == "idle" && argc == 4) {
    long long registry = num(argv[2]), cpu = num(argv[3]);
    if (registry < 0 || cpu < -1) return usage(argv[0]);
    return run_idle(static_cast<int>(registry), static_cast<int>(cpu));
  }
  return usage(argv[0]);
}
