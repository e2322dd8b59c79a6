// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/ctl.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "fs/control.h"

namespace norefs::tools::ctl {
namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

[[noreturn]] void fail_ioctl(const Fd& fd, const char* what, int err) {
  std::string why;
  switch (err) {
    case EPERM:
      why = "only root or the mounting user may use the norefs control interface";
      break;
    case ENOTTY:
    case ENOSYS:
      why = "not a norefs mount";
      break;
    default:
      why = std::strerror(err);
  }
  throw CtlError(fd.path() + ": " + what + ": " + why, err);
}

// EVICT and PREFETCH act on a regular file's cache; the daemon answers
// ENOTTY for anything else, which would read as "not a norefs mount".
void require_regular(const Fd& fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw CtlError(fd.path() + ": " + std::strerror(errno), errno);
  if (!S_ISREG(st.st_mode)) throw CtlError(fd.path() + ": not a regular file", EINVAL);
}

template <typename T>
void do_ioctl(const Fd& fd, unsigned long cmd, const char* what, T* arg) {
  if (::ioctl(fd.get(), cmd, arg) != 0) fail_ioctl(fd, what, errno);
}

}  // namespace

Fd::Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), path_(path) {
  if (fd_ < 0) throw CtlError(path + ": " + std::strerror(errno), errno);
}

Fd::~Fd() { ::close(fd_); }

MountInfo info(const Fd& fd) {
  norefs_info in{};
  do_ioctl(fd, NOREFS_IOC_INFO, "NOREFS_IOC_INFO", &in);
  // The daemon NUL-terminates; do not trust it to.
  in.alloc_stats[sizeof(in.alloc_stats) - 1] = '\0';
  in.cache_stats[sizeof(in.cache_stats) - 1] = '\0';
  return {in.pid, in.alloc_stats, in.cache_stats};
}

std::uint64_t evict(const Fd& fd) {
  require_regular(fd);
  norefs_evict ev{};
  do_ioctl(fd, NOREFS_IOC_EVICT, "NOREFS_IOC_EVICT", &ev);
  return ev.pages;
}

Prefetch prefetch(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                  const cache::CacheStatsReader* cache) {
  require_regular(fd);
  norefs_prefetch pf{};
  pf.offset = offset;
  pf.length = length;
  std::uint64_t before = cache ? cache->sum()[cache::Ctr::readahead_pages] : 0;
  std::uint64_t t0 = now_ns();
  do_ioctl(fd, NOREFS_IOC_PREFETCH, "NOREFS_IOC_PREFETCH", &pf);
  Prefetch r;
  r.wall_ns = now_ns() - t0;
  r.pages_read = pf.pages_read;
  r.daemon_ns = pf.nanoseconds;
  if (cache) r.counter_pages = cache->sum()[cache::Ctr::readahead_pages] - before;
  return r;
}

RangeRead read_range(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                     const cache::CacheStatsReader& cache) {
  // A kernel_cache mount would answer from the kernel's page cache.
  ::posix_fadvise(fd.get(), static_cast<off_t>(offset), static_cast<off_t>(length),
                  POSIX_FADV_DONTNEED);
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<char> buf(kChunk);
  const cache::CacheCounters before = cache.sum();
  RangeRead r;
  std::uint64_t t0 = now_ns();
  while (r.bytes < length) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, length - r.bytes));
    ssize_t n = ::pread(fd.get(), buf.data(), want, static_cast<off_t>(offset + r.bytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CtlError(fd.path() + ": pread: " + std::strerror(errno), errno);
    }
    if (n == 0) break;  // EOF came early: the file shrank
    r.bytes += static_cast<std::uint64_t>(n);
  }
  r.wall_ns = now_ns() - t0;
  const cache::CacheCounters after = cache.sum();
  r.pages_read = after[cache::Ctr::readahead_pages] - before[cache::Ctr::readahead_pages];
  r.misses = after[cache::Ctr::misses] - before[cache::Ctr::misses];
  r.hits = after.hits() - before.hits();
  return r;
}

PrefetchMeasure measure_prefetch(const Fd& fd, std::uint64_t offset, std::uint64_t length,
                                 const cache::CacheStatsReader& cache) {
  require_regular(fd);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw CtlError(fd.path() + ": " + std::strerror(errno), errno);
  auto size = static_cast<std::uint64_t>(st.st_size);
  PrefetchMeasure m;
  m.offset = offset;
  m.length = offset >= size ? 0 : (length == 0 ? size - offset : std::min(length, size - offset));

  m.evicted_without = evict(fd);
  m.read_without = read_range(fd, m.offset, m.length, cache);

  m.evicted_with = evict(fd);
  m.advice = prefetch(fd, m.offset, m.length, &cache);
  m.read_with = read_range(fd, m.offset, m.length, cache);
  return m;
}

}  // namespace norefs::tools::ctl
