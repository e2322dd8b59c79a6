// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_cache_remote_fast_reader — a reader in another process: maps the
// shared region of a PageCache in its parent and the parent's reader
// registry, and reads the parent's files through the one fast path
// (cache/fast_path.h) inside remote_rcu read-side sections, checking every
// byte against tests/cache/pattern.h.  For tests/cache/remote_read_test.cc.
//
//   norefs_cache_remote_fast_reader REGION_FD REGISTRY_FD BATCH SECONDS \
//       DELAY_EVERY DELAY_US FILE...        FILE = ID:ADDRESS:SIZE (hex address)
//
// Every DELAY_EVERY-th read spins DELAY_US inside its section before each
// copy, so that a grace period that does not wait for it has time to end
// and the page time to be reused.  Prints one line:
//   reads R fast_reads F bytes B bad X stops S [first_bad FILE OFF GOT WANT]
// Exit 0; 2 usage; 3 the region or registry could not be attached.
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "alloc/reader_registry.h"
#include "alloc/shared_region.h"
#include "cache/cache_stats.h"
#include "cache/fast_path.h"
#include "pattern.h"

namespace {

using norefs::cache::SharedFile;

struct File {
  std::uint32_t id;
  const SharedFile* shared;
  std::uint64_t size;
};

// The fast path's sink, with an optional stall before each copy.
struct StallingSink {
  std::byte* dst;
  std::chrono::microseconds stall{0};
  void put(const std::byte* src, std::size_t n) {
    if (stall.count()) {
      auto until = std::chrono::steady_clock::now() + stall;
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    norefs::cache::copy_bytes(dst, src, n);
    dst += n;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr,
                 "usage: %s REGION_FD REGISTRY_FD BATCH SECONDS DELAY_EVERY DELAY_US "
                 "ID:ADDRESS:SIZE...\n",
                 argv[0]);
    return 2;
  }
  const int region_fd = std::atoi(argv[1]), registry_fd = std::atoi(argv[2]);
  const unsigned batch = static_cast<unsigned>(std::atoi(argv[3]));
  const double seconds = std::atof(argv[4]);
  const unsigned delay_every = static_cast<unsigned>(std::atoi(argv[5]));
  const std::chrono::microseconds delay(std::atoi(argv[6]));
  std::vector<File> files;
  for (int i = 7; i < argc; i++) {
    unsigned id = 0;
    unsigned long long addr = 0, size = 0;
    if (std::sscanf(argv[i], "%u:%llx:%llu", &id, &addr, &size) != 3) {
      std::fprintf(stderr, "bad FILE %s\n", argv[i]);
      return 2;
    }
    files.push_back(
        {id, reinterpret_cast<const SharedFile*>(static_cast<std::uintptr_t>(addr)), size});
  }
  std::byte* base = norefs::alloc::SharedRegion::map_view(region_fd);
  if (!base) {
    std::printf("error region %d\n", errno);
    return 3;
  }
  if (int e = norefs::alloc::remote_rcu::attach(registry_fd); e != 0) {
    std::printf("error registry %d\n", -e);
    return 3;
  }
  norefs::cache::CacheStats stats("", 4);
  norefs::cache::CacheSlot& st = stats.slot();
  std::mt19937_64 rng(static_cast<std::uint64_t>(getpid()));
  std::vector<std::byte> buf(4 * norefs::alloc::kPageSize);
  std::uint64_t reads = 0, fast_reads = 0, bytes = 0, bad = 0, stops = 0;
  std::string first_bad;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const File& f = files[rng() % files.size()];
    const std::uint64_t pos = rng() % f.size;
    const std::size_t len = 1 + rng() % buf.size();
    StallingSink sink{buf.data()};
    if (delay_every && reads % delay_every == 0) sink.stall = delay;
    norefs::cache::FastResult r;
    {
      norefs::alloc::remote_rcu::ReadGuard g;
      r = norefs::cache::fast_read(*f.shared, pos, len, sink, batch, nullptr, st);
    }
    reads++;
    if (r.complete) fast_reads++;
    if (r.stop != norefs::cache::Stop::kCount) stops++;
    bytes += r.n;
    for (std::size_t i = 0; i < r.n; i++) {
      std::byte want = norefs::cache::test::pattern_byte(f.id, pos + i, 0);
      if (buf[i] == want) continue;
      if (bad++ == 0) {
        char line[160];
        std::snprintf(line, sizeof line, " first_bad %u %" PRIu64 " 0x%02x 0x%02x", f.id, pos + i,
                      std::to_integer<unsigned>(buf[i]), std::to_integer<unsigned>(want));
        first_bad = line;
      }
    }
  }
  std::printf("reads %" PRIu64 " fast_reads %" PRIu64 " bytes %" PRIu64 " bad %" PRIu64
              " stops %" PRIu64 "%s\n",
              reads, fast_reads, bytes, bad, stops, first_bad.c_str());
  return 0;
}
