// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/check/soak_load.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "alloc/page.h"
#include "tools/check/evict_race.h"
#include "tools/check/sys_error.h"

namespace norefs::tools {
namespace {

using alloc::kPageSize;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kKeptFailures = 8;

class File {
 public:
  File(const std::string& path, int flags, mode_t mode = 0644)
      : fd_(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd_ < 0) throw_errno(errno, path);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads [off, off+n) fully: returns bytes read (less only at EOF), or -errno.
ssize_t pread_full(int fd, void* buf, std::size_t n, std::uint64_t off) {
  std::size_t done = 0;
  while (done < n) {
    ssize_t r =
        ::pread(fd, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

ssize_t pwrite_full(int fd, const void* buf, std::size_t n, std::uint64_t off) {
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd, static_cast<const char*>(buf) + done, n - done,
                         static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return -EIO;  // a regular file never writes nothing
    done += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

// What the first wrong 8-byte word of a read holds: another pattern's word
// (which file, which offset), zeros, or unrecognized bytes.
std::string describe_mismatch(const std::byte* got, const std::byte* want, std::size_t n,
                              std::uint64_t off) {
  std::size_t i = 0;
  while (i < n && got[i] == want[i]) i++;
  std::uint64_t at = off + i;
  std::uint64_t word_off = at & ~std::uint64_t{7};
  std::string s = "first wrong byte at offset " + std::to_string(at);
  if (word_off >= off && word_off + 8 <= off + n) {
    std::uint64_t w;
    std::memcpy(&w, got + (word_off - off), 8);
    unsigned f;
    std::uint64_t idx;
    if (w == 0) {
      s += ": zeros";
    } else if (evict_race_decode(w, &f, &idx)) {
      s += ": pattern " + std::to_string(f) + " of offset " + std::to_string(idx * 8);
    } else {
      s += ": unrecognized bytes";
    }
  }
  return s;
}

void keep(std::vector<SoakFailure>& v, std::string what) {
  if (v.size() < kKeptFailures) v.push_back({std::move(what)});
}

}  // namespace

void pattern_bytes(unsigned id, std::uint64_t off, void* dst, std::size_t n) {
  auto* d = static_cast<std::byte*>(dst);
  while (n > 0) {
    std::uint64_t word = evict_race_word(id, off >> 3);
    std::size_t k = off & 7;
    std::size_t take = std::min<std::size_t>(8 - k, n);
    std::memcpy(d, reinterpret_cast<const std::byte*>(&word) + k, take);
    d += take;
    off += take;
    n -= take;
  }
}

void write_pattern_file(const std::string& path, unsigned id, std::uint64_t size) {
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  std::vector<std::byte> buf(1 << 20);
  for (std::uint64_t off = 0; off < size; off += buf.size()) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off));
    pattern_bytes(id, off, buf.data(), n);
    ssize_t r = pwrite_full(f.fd(), buf.data(), n, off);
    if (r < 0) throw_errno(static_cast<int>(-r), path + ": write");
  }
  if (::fsync(f.fd()) != 0) throw_errno(errno, path + ": fsync");
}

// ── read-check ──

ReadCheckResult run_read_check(const ReadCheckParams& p) {
  if (p.files.empty()) throw std::invalid_argument("read-check: no files");
  if (p.threads == 0 || p.max_read == 0) {
    throw std::invalid_argument("read-check: threads and max_read must be positive");
  }
  std::vector<std::uint64_t> sizes;
  for (const std::string& path : p.files) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw_errno(errno, path);
    if (st.st_size <= 0) throw std::invalid_argument(path + ": empty; write it with `pattern`");
    sizes.push_back(static_cast<std::uint64_t>(st.st_size));
  }
  std::vector<ReadCheckResult> per(p.threads);
  // Every handle is opened before any thread starts: an open that fails
  // fails the run, not one thread.
  std::vector<std::vector<std::unique_ptr<File>>> fds(p.threads);
  for (auto& v : fds) {
    for (const std::string& path : p.files) v.push_back(std::make_unique<File>(path, O_RDONLY));
  }
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.seconds));
  auto reader = [&](unsigned t) {
    ReadCheckResult& r = per[t];
    std::mt19937_64 rng(p.seed * 1000003 + t);
    std::vector<std::byte> got(p.max_read), want(p.max_read);
    do {
      std::size_t k = rng() % p.files.size();
      std::uint64_t size = sizes[k];
      std::uint64_t pos = rng() % size;
      std::size_t len;
      switch (rng() % 10) {
        case 0:
        case 1:
        case 2:
        case 3:  // small: stackcopy's range, one page or two
          len = 1 + rng() % std::min<std::size_t>(1024, p.max_read);
          r.small_reads++;
          break;
        case 4:
        case 5:
        case 6:  // a page, aligned half the time
          len = std::min<std::size_t>(kPageSize, p.max_read);
          if (rng() & 1) pos &= ~std::uint64_t{kPageSize - 1};
          break;
        default:  // long: many pages, past a batch
          len = 1 + rng() % p.max_read;
      }
      std::size_t expect = static_cast<std::size_t>(std::min<std::uint64_t>(len, size - pos));
      ssize_t n = pread_full(fds[t][k]->fd(), got.data(), len, pos);
      r.reads++;
      if (n < 0) {
        r.io_errors++;
        keep(r.failures, p.files[k] + ": pread at " + std::to_string(pos) + ": " +
                             std::generic_category().message(static_cast<int>(-n)));
        continue;
      }
      r.bytes += static_cast<std::uint64_t>(n);
      if (static_cast<std::size_t>(n) != expect) {
        r.bad_reads++;
        keep(r.failures, p.files[k] + ": pread of " + std::to_string(len) + " at " +
                             std::to_string(pos) + " returned " + std::to_string(n) +
                             ", expected " + std::to_string(expect));
        continue;
      }
      pattern_bytes(static_cast<unsigned>(k + 1), pos, want.data(), expect);
      if (std::memcmp(got.data(), want.data(), expect) != 0) {
        r.bad_reads++;
        keep(r.failures, p.files[k] + ": pread of " + std::to_string(len) + " at " +
                             std::to_string(pos) + ": " +
                             describe_mismatch(got.data(), want.data(), expect, pos));
      }
    } while (Clock::now() < end);
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < p.threads; t++) threads.emplace_back(reader, t);
  for (auto& th : threads) th.join();
  ReadCheckResult sum;
  for (ReadCheckResult& r : per) {
    sum.reads += r.reads;
    sum.small_reads += r.small_reads;
    sum.bytes += r.bytes;
    sum.bad_reads += r.bad_reads;
    sum.io_errors += r.io_errors;
    for (SoakFailure& f : r.failures) keep(sum.failures, std::move(f.what));
  }
  sum.seconds = since(t0);
  return sum;
}

// ── punch ──

namespace {

// Pattern ids of the punch loader: above the pattern files' (which count
// from 1), one per write of a region, so that a stale page of an earlier
// generation is told from the current one.
constexpr unsigned kPunchIdBase = 0x8000;

struct PunchThread {
  const PunchParams& p;
  int fd;
  unsigned t;
  PunchResult r;
  std::vector<std::uint64_t> gen;  // per owned region

  std::uint64_t base(unsigned k) const {
    // Regions of all threads interleave: k-th of thread t is region
    // k * threads + t, so a region's neighbours belong to other threads and,
    // when region_bytes is not a page multiple, share its edge pages.
    return (static_cast<std::uint64_t>(k) * p.threads + t) * p.region_bytes;
  }
  unsigned id(unsigned k) const { return kPunchIdBase + static_cast<unsigned>(gen[k] & 0x7fff); }

  // Reads the region in chunks of `chunk` bytes and compares with the
  // pattern of generation gen[k], zeros in [hole_from, hole_to).
  void check(unsigned k, std::size_t chunk, std::uint64_t hole_from, std::uint64_t hole_to,
             std::vector<std::byte>& got, std::vector<std::byte>& want, const char* when) {
    const std::uint64_t b = base(k);
    pattern_bytes(id(k), b, want.data(), p.region_bytes);
    if (hole_to > hole_from) std::memset(want.data() + hole_from, 0, hole_to - hole_from);
    for (std::size_t off = 0; off < p.region_bytes; off += chunk) {
      std::size_t n = std::min(chunk, p.region_bytes - off);
      ssize_t got_n = pread_full(fd, got.data() + off, n, b + off);
      if (got_n < 0) {
        r.io_errors++;
        keep(r.failures, std::string("pread ") + when + ": " +
                             std::generic_category().message(static_cast<int>(-got_n)));
        return;
      }
      if (static_cast<std::size_t>(got_n) != n) {
        r.bad_reads++;
        keep(r.failures, std::string("short read ") + when + " at " + std::to_string(b + off) +
                             ": " + std::to_string(got_n) + " of " + std::to_string(n));
        return;
      }
    }
    r.bytes_checked += p.region_bytes;
    if (std::memcmp(got.data(), want.data(), p.region_bytes) != 0) {
      r.bad_reads++;
      keep(r.failures, std::string("region at ") + std::to_string(b) + " " + when + " (hole [" +
                           std::to_string(b + hole_from) + ", " + std::to_string(b + hole_to) +
                           ")): " + describe_mismatch(got.data(), want.data(), p.region_bytes, b));
    }
  }

  void run(Clock::time_point end) {
    std::mt19937_64 rng(p.seed * 7919 + t);
    std::vector<std::byte> buf(p.region_bytes), got(p.region_bytes), want(p.region_bytes);
    const std::size_t chunks[] = {512, kPageSize, p.region_bytes};
    gen.assign(p.regions_per_thread, t);
    do {
      unsigned k = static_cast<unsigned>(rng() % p.regions_per_thread);
      const std::uint64_t b = base(k);
      gen[k] += p.threads;  // distinct across threads too
      pattern_bytes(id(k), b, buf.data(), p.region_bytes);
      if (ssize_t w = pwrite_full(fd, buf.data(), p.region_bytes, b); w < 0) {
        r.io_errors++;
        keep(r.failures,
             std::string("pwrite: ") + std::generic_category().message(static_cast<int>(-w)));
        continue;
      }
      check(k, chunks[rng() % 3], 0, 0, got, want, "after the write");
      // The hole: the whole region a quarter of the time, else a random
      // sub-range, its ends unaligned most of the time.
      std::uint64_t from = 0, to = p.region_bytes;
      if (rng() % 4 != 0) {
        from = rng() % p.region_bytes;
        to = from + 1 + rng() % (p.region_bytes - from);
      }
      if ((b + from) % kPageSize != 0 || (b + to) % kPageSize != 0) r.unaligned_punches++;
      if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(b + from),
                      static_cast<off_t>(to - from)) != 0) {
        r.io_errors++;
        keep(r.failures, std::string("fallocate(PUNCH_HOLE|KEEP_SIZE): ") +
                             std::generic_category().message(errno));
        continue;
      }
      check(k, chunks[rng() % 3], from, to, got, want, "after the punch");
      r.cycles++;
    } while (Clock::now() < end);
  }
};

}  // namespace

PunchResult run_punch(const PunchParams& p) {
  if (p.threads == 0 || p.regions_per_thread == 0) {
    throw std::invalid_argument("punch: threads and regions must be positive");
  }
  if (p.region_bytes < kPageSize) {
    throw std::invalid_argument("punch: a region must be at least a page");
  }
  File f(p.file, O_RDWR | O_CREAT);
  const std::uint64_t size =
      static_cast<std::uint64_t>(p.threads) * p.regions_per_thread * p.region_bytes;
  if (::ftruncate(f.fd(), static_cast<off_t>(size)) != 0)
    throw_errno(errno, p.file + ": ftruncate");
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(p.seconds));
  std::vector<std::unique_ptr<PunchThread>> per;
  for (unsigned t = 0; t < p.threads; t++) {
    per.push_back(std::make_unique<PunchThread>(PunchThread{p, f.fd(), t, {}, {}}));
  }
  std::vector<std::thread> threads;
  threads.reserve(per.size());
  for (auto& pt : per) threads.emplace_back([&pt, end] { pt->run(end); });
  for (auto& th : threads) th.join();
  PunchResult sum;
  for (auto& pt : per) {
    PunchResult& r = pt->r;
    sum.cycles += r.cycles;
    sum.unaligned_punches += r.unaligned_punches;
    sum.bytes_checked += r.bytes_checked;
    sum.bad_reads += r.bad_reads;
    sum.io_errors += r.io_errors;
    for (SoakFailure& x : r.failures) keep(sum.failures, std::move(x.what));
  }
  sum.seconds = since(t0);
  return sum;
}

// ── JSON ──

namespace {

nlohmann::ordered_json failures_json(const std::vector<SoakFailure>& v) {
  auto a = nlohmann::ordered_json::array();
  for (const SoakFailure& f : v) a.push_back(f.what);
  return a;
}

}  // namespace

std::string read_check_json(const ReadCheckParams& p, const ReadCheckResult& r) {
  nlohmann::ordered_json j;
  j["params"] = {{"files", p.files},
                 {"threads", p.threads},
                 {"seconds", p.seconds},
                 {"max_read", p.max_read},
                 {"seed", p.seed}};
  j["result"] = {{"reads", r.reads},
                 {"small_reads", r.small_reads},
                 {"bytes", r.bytes},
                 {"bad_reads", r.bad_reads},
                 {"io_errors", r.io_errors},
                 {"seconds", r.seconds},
                 {"ok", r.ok()},
                 {"failures", failures_json(r.failures)}};
  return j.dump(2);
}

std::string punch_json(const PunchParams& p, const PunchResult& r) {
  nlohmann::ordered_json j;
  j["params"] = {{"file", p.file},
                 {"threads", p.threads},
                 {"regions_per_thread", p.regions_per_thread},
                 {"region_bytes", p.region_bytes},
                 {"seconds", p.seconds},
                 {"seed", p.seed}};
  j["result"] = {{"cycles", r.cycles},
                 {"unaligned_punches", r.unaligned_punches},
                 {"bytes_checked", r.bytes_checked},
                 {"bad_reads", r.bad_reads},
                 {"io_errors", r.io_errors},
                 {"seconds", r.seconds},
                 {"ok", r.ok()},
                 {"failures", failures_json(r.failures)}};
  return j.dump(2);
}

}  // namespace norefs::tools
