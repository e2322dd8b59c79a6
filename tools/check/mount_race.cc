// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/check/mount_race.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "cache/cache_stats.h"
#include "fs/control.h"
#include "tools/check/splitmix.h"
#include "tools/check/sys_error.h"
#include "tools/ctl/ctl.h"

extern char** environ;

namespace norefs::tools {

namespace {

using splitmix64::mix;
using splitmix64::splitmix;
using splitmix64::unmix;

constexpr std::size_t kMountPage = 4096;
constexpr std::uint64_t kMountKeyMagic = 0xb7;  // top 8 bits of every key
constexpr unsigned kLog = 4096;                 // changes kept per file for the readers
constexpr std::int32_t kHole = -1;

std::uint8_t content_byte(unsigned file, unsigned version, std::uint64_t off) {
  std::uint64_t word = mount_race_word(file, version, off >> 3);
  return static_cast<std::uint8_t>(word >> (8 * (off & 7)));  // little-endian byte order
}

void fill(unsigned file, unsigned version, std::uint64_t off, std::uint8_t* dst, std::size_t n) {
  while (n > 0) {
    std::uint64_t word = mount_race_word(file, version, off >> 3);
    std::size_t k = off & 7, take = std::min<std::size_t>(8 - k, n);
    std::memcpy(dst, reinterpret_cast<const std::uint8_t*>(&word) + k, take);
    dst += take;
    off += take;
    n -= take;
  }
}

enum class ChangeKind : std::uint8_t { punch, truncate, rewrite };

// One change of a file, logged before its syscall starts.
struct Change {
  std::uint64_t seq = 0;  // 1-based; 0: empty slot
  ChangeKind kind = ChangeKind::rewrite;
  unsigned version = 0;            // rewrite: the new version
  std::uint64_t from = 0, to = 0;  // punch: [from, to); truncate: from = the new size
  std::uint64_t size_after = 0;    // the file size once done
};

// What the tool knows of a file: per page the version it holds (kHole:
// zeros), the size, and the log of changes.
struct FileModel {
  std::mutex change_mu;  // serializes the changes of this file
  std::mutex mu;         // guards everything below
  std::vector<std::int32_t> pages;
  std::uint64_t size = 0;
  std::uint64_t started = 0, completed = 0;
  std::vector<Change> log = std::vector<Change>(kLog);
  unsigned next_version = 2;  // 1: the initial content
  int wfd = -1;               // the changers' descriptor
};

void apply(FileModel& m, const Change& c) {
  switch (c.kind) {
    case ChangeKind::punch:
      for (std::uint64_t pg = c.from / kMountPage; pg * kMountPage < c.to; pg++)
        m.pages[pg] = kHole;
      break;
    case ChangeKind::truncate:
      for (std::uint64_t pg = c.from / kMountPage; pg < m.pages.size(); pg++) m.pages[pg] = kHole;
      break;
    case ChangeKind::rewrite:
      std::fill(m.pages.begin(), m.pages.end(), static_cast<std::int32_t>(c.version));
      break;
  }
  m.size = c.size_after;
}

// The value a change leaves at `off`, if it writes there.
std::optional<std::uint8_t> written_by(const Change& c, unsigned file, std::uint64_t off) {
  switch (c.kind) {
    case ChangeKind::punch:
      if (off >= c.from && off < c.to) return 0;
      return std::nullopt;
    case ChangeKind::truncate:
      // Bytes past the new size read as zero if the file grows back
      // before the rewrite reaches them.
      if (off >= c.from) return 0;
      return std::nullopt;
    case ChangeKind::rewrite:
      if (off < c.size_after) return content_byte(file, c.version, off);
      return std::nullopt;
  }
  return std::nullopt;
}

RaceVariant variant_of(const std::vector<Change>& window) {
  unsigned kinds = 0;
  for (const Change& c : window) kinds |= 1u << static_cast<unsigned>(c.kind);
  if (kinds == 0) return RaceVariant::stable;
  // A truncate is always followed by a rewrite: both in the window is "truncate".
  if (kinds & (1u << static_cast<unsigned>(ChangeKind::truncate))) {
    kinds &= ~(1u << static_cast<unsigned>(ChangeKind::rewrite));
    if (kinds == (1u << static_cast<unsigned>(ChangeKind::truncate))) return RaceVariant::truncate;
    return RaceVariant::several;
  }
  if (kinds == (1u << static_cast<unsigned>(ChangeKind::punch))) return RaceVariant::punch;
  if (kinds == (1u << static_cast<unsigned>(ChangeKind::rewrite))) return RaceVariant::rewrite;
  return RaceVariant::several;
}

std::uint64_t full_size(const MountRaceParams& p, unsigned i) {
  return p.file_pages * kMountPage - (static_cast<std::uint64_t>(i) * 517) % kMountPage;
}

// Writes all of buf at off; false with errno set on failure.
bool pwrite_all(int fd, const std::uint8_t* buf, std::size_t n, std::uint64_t off) {
  while (n > 0) {
    ssize_t w = pwrite(fd, buf, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (w == 0) {
      errno = EIO;
      return false;
    }
    buf += w;
    n -= static_cast<std::size_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
  return true;
}

struct alignas(128) MountReaderStats {
  std::array<MountRaceResult::PerVariant, kRaceVariants> v{};
  std::array<std::uint64_t, kMountBadKinds> kinds{};
  std::uint64_t unchecked = 0;
  std::vector<MountBadRead> kept;
};

std::pair<MountBadKind, std::string> classify(std::uint64_t word, unsigned file, std::uint64_t w) {
  if (word == 0) return {MountBadKind::zeros, "zeros"};
  unsigned f, v;
  std::uint64_t ww;
  if (!mount_race_decode(word, &f, &v, &ww)) return {MountBadKind::unknown, "unrecognized bytes"};
  std::string what = "file " + std::to_string(f) + " version " + std::to_string(v) + " offset " +
                     std::to_string(ww * 8);
  if (f != file) return {MountBadKind::other_file, what};
  if (ww != w) return {MountBadKind::other_offset, what};
  return {MountBadKind::stale_version, what};
}

}  // namespace

std::uint64_t mount_race_word(unsigned file, unsigned version, std::uint64_t w) {
  return mix((kMountKeyMagic << 56) | (static_cast<std::uint64_t>(file & 0xff) << 48) |
             (static_cast<std::uint64_t>(version & 0xffff) << 32) | (w & 0xffffffffULL));
}

bool mount_race_decode(std::uint64_t word, unsigned* file, unsigned* version, std::uint64_t* w) {
  std::uint64_t key = unmix(word);
  if ((key >> 56) != kMountKeyMagic) return false;
  *file = static_cast<unsigned>((key >> 48) & 0xff);
  *version = static_cast<unsigned>((key >> 32) & 0xffff);
  *w = key & 0xffffffffULL;
  return true;
}

std::string_view race_variant_name(RaceVariant v) {
  switch (v) {
    case RaceVariant::stable:
      return "stable";
    case RaceVariant::punch:
      return "punch";
    case RaceVariant::rewrite:
      return "rewrite";
    case RaceVariant::truncate:
      return "truncate";
    case RaceVariant::several:
      return "several";
    case RaceVariant::kCount:
      break;
  }
  return "?";
}

std::string_view mount_bad_kind_name(MountBadKind k) {
  switch (k) {
    case MountBadKind::error:
      return "error";
    case MountBadKind::length:
      return "length";
    case MountBadKind::stale_version:
      return "stale_version";
    case MountBadKind::other_offset:
      return "other_offset";
    case MountBadKind::other_file:
      return "other_file";
    case MountBadKind::zeros:
      return "zeros";
    case MountBadKind::unknown:
      return "unknown";
    case MountBadKind::kCount:
      break;
  }
  return "?";
}

MountRaceResult run_mount_race(const MountRaceParams& p) {
  if (p.dir.empty()) throw std::invalid_argument("mount_race: no directory");
  if (p.readers == 0 || p.files == 0 || p.file_pages == 0 || p.max_read == 0) {
    throw std::invalid_argument("mount_race: readers, files, file_pages and max_read must be > 0");
  }
  if (p.files > 255 || p.file_pages > (std::size_t{1} << 20)) {
    throw std::invalid_argument("mount_race: at most 255 files of at most 4 GiB");
  }
  char tmpl_buf[] = "norefs-race-XXXXXX";
  std::string dir = p.dir + "/" + tmpl_buf;
  if (!mkdtemp(dir.data())) throw_errno("mkdtemp " + dir);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};

  // The daemon's counters, if this is a norefs mount we may read them on.
  std::unique_ptr<cache::CacheStatsReader> stats;
  cache::CacheCounters before{};
  try {
    ctl::Fd d(dir);
    stats = std::make_unique<cache::CacheStatsReader>(ctl::info(d).cache_stats);
    before = stats->sum();
  } catch (const std::exception&) {
    stats.reset();  // not ours to read (or not norefs): the run goes on without
  }

  std::vector<std::unique_ptr<FileModel>> files;
  std::vector<std::string> paths;
  std::vector<std::uint8_t> content(p.file_pages * kMountPage);
  for (unsigned i = 0; i < p.files; i++) {
    auto m = std::make_unique<FileModel>();
    paths.push_back(dir + "/f" + std::to_string(i));
    m->wfd = open(paths.back().c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (m->wfd < 0) throw_errno("create " + paths.back());
    m->size = full_size(p, i);
    fill(i, 1, 0, content.data(), m->size);
    if (!pwrite_all(m->wfd, content.data(), m->size, 0)) throw_errno("write " + paths.back());
    m->pages.assign(p.file_pages, 1);
    files.push_back(std::move(m));
  }
  struct CloseAll {
    std::vector<std::unique_ptr<FileModel>>& f;
    ~CloseAll() {
      for (auto& m : f) close(m->wfd);
    }
  } close_all{files};

  // go: a start line.  Its acquire loads pair with the release store that
  // opens it (everything set up before is also ordered by thread creation).
  // stop: seq_cst stores, relaxed polls (see stopping()).
  std::atomic<bool> go{false}, stop{false};
  std::mutex err_mu;
  std::string tool_error;  // guarded by err_mu
  auto fail_run = [&](const std::string& what) {
    std::lock_guard lk(err_mu);
    if (tool_error.empty()) tool_error = what;
    stop.store(true);
  };
  // Relaxed: flags polled per operation; they publish nothing.
  auto stopping = [&] {
    return stop.load(std::memory_order_relaxed) ||
           (p.cancel && p.cancel->load(std::memory_order_relaxed));
  };
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  std::vector<MountReaderStats> rstats(p.readers);
  std::atomic<std::uint64_t> bad_total{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < p.readers; t++) {
    threads.emplace_back([&, t] {
      MountReaderStats& st = rstats[t];
      std::vector<int> fds;
      for (const auto& path : paths) {
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          fail_run("open " + path + ": " + std::generic_category().message(errno));
          break;
        }
        fds.push_back(fd);
      }
      std::vector<std::uint8_t> buf(p.max_read), expect(p.max_read);
      std::vector<std::int32_t> base;
      std::vector<Change> window;
      std::vector<std::size_t> bad_at;  // the first wrong bytes of a read
      std::uint64_t rng = p.seed * 0x100000001b3ULL + t + 1;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (fds.size() == paths.size() && !stopping()) {
        std::uint64_t r = splitmix(rng);
        unsigned fi = static_cast<unsigned>(r % p.files);
        FileModel& m = *files[fi];
        const std::uint64_t full = full_size(p, fi);
        std::uint64_t pos = (r >> 16) % full;
        std::size_t cap = std::min<std::size_t>(p.max_read, (r >> 60) < 8    ? 64
                                                            : (r >> 60) < 12 ? 512
                                                            : (r >> 60) < 14 ? 4096
                                                                             : p.max_read);
        std::size_t len = 1 + splitmix(rng) % cap;
        std::uint64_t base_size, c0;
        {
          std::lock_guard lk(m.mu);
          base = m.pages;
          base_size = m.size;
          c0 = m.completed;
        }
        ssize_t got = pread(fds[fi], buf.data(), len, static_cast<off_t>(pos));
        int err = errno;
        window.clear();
        bool overflow = false;
        {
          std::lock_guard lk(m.mu);
          if (m.started - c0 > kLog) {
            overflow = true;
          } else {
            for (std::uint64_t k = c0 + 1; k <= m.started; k++) window.push_back(m.log[k % kLog]);
          }
        }
        if (overflow) {
          st.unchecked++;
          continue;
        }
        RaceVariant var = variant_of(window);
        auto& vs = st.v[static_cast<std::size_t>(var)];
        vs.reads++;

        MountBadRead bad;
        bad.kind = MountBadKind::unknown;
        bool is_bad = false;
        std::uint64_t smin = base_size, smax = base_size;
        for (const Change& c : window) {
          std::uint64_t s = c.kind == ChangeKind::truncate ? c.from : c.size_after;
          smin = std::min(smin, s);
          smax = std::max(smax, s);
        }
        auto allowed_len = [&](std::uint64_t s) {
          return static_cast<std::uint64_t>(std::min<std::uint64_t>(len, s > pos ? s - pos : 0));
        };
        if (got < 0) {
          is_bad = true;
          bad.kind = MountBadKind::error;
          bad.what = std::string("pread: ") + std::generic_category().message(err);
          bad.offset = pos;
        } else if (static_cast<std::uint64_t>(got) < allowed_len(smin) ||
                   static_cast<std::uint64_t>(got) > allowed_len(smax)) {
          is_bad = true;
          bad.kind = MountBadKind::length;
          bad.what = "read returned " + std::to_string(got) + ", sizes during the read allow " +
                     std::to_string(allowed_len(smin)) + ".." + std::to_string(allowed_len(smax));
          bad.offset = pos;
        } else {
          const std::size_t n = static_cast<std::size_t>(got);
          // The bytes as the file held them when the read started.
          for (std::size_t i = 0; i < n;) {
            std::uint64_t off = pos + i;
            std::size_t in_page =
                std::min<std::size_t>(n - i, kMountPage - (off & (kMountPage - 1)));
            std::int32_t v = off < base_size ? base[off / kMountPage] : kHole;
            if (v == kHole) {
              std::memset(expect.data() + i, 0, in_page);
            } else {
              fill(fi, static_cast<unsigned>(v), off, expect.data() + i, in_page);
            }
            i += in_page;
          }
          std::size_t nbad = 0, first = n;
          bad_at.clear();
          // Fast: every byte as the read's start left it (and within that size).
          if (pos + n > base_size || std::memcmp(buf.data(), expect.data(), n) != 0) {
            for (std::size_t i = 0; i < n; i++) {
              // Past the size the read started with, only a change can have
              // put a byte there.
              bool ok = buf[i] == expect[i] && pos + i < base_size;
              for (std::size_t k = 0; !ok && k < window.size(); k++) {
                auto b = written_by(window[k], fi, pos + i);
                ok = b && *b == buf[i];
              }
              if (!ok) {
                nbad++;
                first = std::min(first, i);
                if (bad_at.size() < 512) bad_at.push_back(i);
              }
            }
          }
          if (nbad) {
            is_bad = true;
            vs.bad_bytes += nbad;
            bad.offset = pos + first;
            // Decode the first wrong aligned word the read covers whole
            // and that decodes (the copy may tear a word at its edges).
            bad.what =
                "byte " + std::to_string(buf[first]) + " (no wrong word the read covers decodes)";
            std::uint64_t last_a = ~std::uint64_t{0};
            for (std::size_t k = 0, tries = 0; k < bad_at.size() && tries < 64; k++) {
              std::uint64_t a = (pos + bad_at[k]) & ~std::uint64_t{7};
              if (a == last_a || a < pos || a + 8 > pos + n) continue;
              last_a = a;
              tries++;
              std::uint64_t word;
              std::memcpy(&word, buf.data() + (a - pos), 8);
              auto [kind, what] = classify(word, fi, a / 8);
              if (kind == MountBadKind::unknown) continue;
              bad.kind = kind;
              bad.what = what + " (word at offset " + std::to_string(a) + ")";
              break;
            }
          } else {
            vs.bytes_checked += n;
          }
        }
        if (is_bad) {
          vs.bad_reads++;
          // Relaxed: a count compared with a threshold; it orders nothing.
          if (p.stop_after_bad &&
              bad_total.fetch_add(1, std::memory_order_relaxed) + 1 >= p.stop_after_bad) {
            stop.store(true);
          }
          st.kinds[static_cast<std::size_t>(bad.kind)]++;
          if (st.kept.size() < p.keep_bad) {
            bad.at_seconds = since_start();
            bad.reader = t;
            bad.file = fi;
            bad.pos = pos;
            bad.len = len;
            bad.returned = got;
            bad.variant = var;
            st.kept.push_back(std::move(bad));
          }
          // A dead daemon answers every read with an error: stop early.
          if (got < 0 && (err == ENOTCONN || err == ECONNABORTED)) stop.store(true);
        }
      }
      for (int fd : fds) close(fd);
    });
  }

  MountRaceResult res;
  std::mutex res_mu;  // the workers' counts, added at their end

  if (p.evict) {
    threads.emplace_back([&] {
      std::uint64_t calls = 0, pages = 0, errors = 0;
      std::vector<int> fds;
      fds.reserve(paths.size());
      for (const auto& path : paths) fds.push_back(open(path.c_str(), O_RDONLY | O_CLOEXEC));
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (std::uint64_t n = 0; !stopping(); n++) {
        norefs_evict e{};
        if (fds[n % fds.size()] < 0 || ioctl(fds[n % fds.size()], NOREFS_IOC_EVICT, &e) != 0) {
          errors++;
        } else {
          pages += e.pages;
        }
        calls++;
        if (p.evict_pause_us)
          std::this_thread::sleep_for(std::chrono::microseconds(p.evict_pause_us));
      }
      for (int fd : fds)
        if (fd >= 0) close(fd);
      std::lock_guard lk(res_mu);
      res.evict_calls += calls;
      res.pages_evicted += pages;
      res.evict_errors += errors;
    });
  }

  // One changer per kind; each picks files at random and serializes with
  // the others on the file's change_mu.
  auto changer = [&](ChangeKind kind, std::uint64_t salt) {
    return [&, kind, salt] {
      std::uint64_t rng = p.seed * 0x9e3779b97f4a7c15ULL + salt;
      std::uint64_t done = 0;
      std::vector<std::uint8_t> data(p.file_pages * kMountPage);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (!stopping()) {
        std::uint64_t r = splitmix(rng);
        unsigned fi = static_cast<unsigned>(r % p.files);
        FileModel& m = *files[fi];
        const std::uint64_t full = full_size(p, fi);
        std::lock_guard ck(m.change_mu);
        // Logs c, runs `op` (the syscall), applies c to the model.
        auto change = [&](Change c, auto op) {
          {
            std::lock_guard lk(m.mu);
            c.seq = ++m.started;
            m.log[c.seq % kLog] = c;
          }
          bool ok = op();
          int err = errno;
          std::lock_guard lk(m.mu);
          if (!ok) {
            // The file is in an unknown state: m.started stays ahead of
            // m.completed, so every later read of it overlaps this change.
            return std::generic_category().message(err);
          }
          apply(m, c);
          m.completed = c.seq;
          return std::string();
        };
        std::string err;
        if (kind == ChangeKind::punch) {
          std::uint64_t pages = (full + kMountPage - 1) / kMountPage;
          std::uint64_t a = (r >> 8) % pages, b = a + 1 + (r >> 40) % 4;
          Change c;
          c.kind = ChangeKind::punch;
          c.from = a * kMountPage;
          c.to = std::min(b * kMountPage, full);
          {
            std::lock_guard lk(m.mu);
            c.size_after = m.size;
          }
          if (c.from >= c.size_after) continue;
          c.to = std::min(c.to, c.size_after);
          err = change(c, [&] {
            return fallocate(m.wfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                             static_cast<off_t>(c.from), static_cast<off_t>(c.to - c.from)) == 0;
          });
          if (!err.empty())
            err = std::string("fallocate(PUNCH_HOLE) ").append(paths[fi]).append(": ").append(err);
        } else {
          if (kind == ChangeKind::truncate) {
            Change t;
            t.kind = ChangeKind::truncate;
            t.from = ((r >> 8) % (full / kMountPage + 1)) * kMountPage;
            t.size_after = t.from;
            err = change(t, [&] { return ftruncate(m.wfd, static_cast<off_t>(t.from)) == 0; });
            if (!err.empty())
              err = std::string("ftruncate ").append(paths[fi]).append(": ").append(err);
          }
          if (err.empty()) {
            Change w;
            w.kind = ChangeKind::rewrite;
            w.version = m.next_version;
            m.next_version = m.next_version == 0xffff ? 2 : m.next_version + 1;
            w.size_after = full;
            fill(fi, w.version, 0, data.data(), full);
            err = change(w, [&] { return pwrite_all(m.wfd, data.data(), full, 0); });
            if (!err.empty())
              err = std::string("pwrite ").append(paths[fi]).append(": ").append(err);
          }
        }
        if (!err.empty()) {
          fail_run(err);
          break;
        }
        done++;
        if (p.mutate_pause_us)
          std::this_thread::sleep_for(std::chrono::microseconds(p.mutate_pause_us));
      }
      std::lock_guard lk(res_mu);
      (kind == ChangeKind::punch      ? res.punches
       : kind == ChangeKind::truncate ? res.truncates
                                      : res.rewrites) += done;
    };
  };
  if (p.punch) threads.emplace_back(changer(ChangeKind::punch, 11));
  if (p.rewrite) threads.emplace_back(changer(ChangeKind::rewrite, 23));
  if (p.truncate) threads.emplace_back(changer(ChangeKind::truncate, 37));

  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);  // pairs with the acquire loads of go
  const auto end = t0 + std::chrono::duration<double>(p.seconds);
  while (!stopping() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (const auto& st : rstats) {
    for (std::size_t v = 0; v < kRaceVariants; v++) {
      auto& d = res.by_variant[v];
      d.reads += st.v[v].reads;
      d.bytes_checked += st.v[v].bytes_checked;
      d.bad_reads += st.v[v].bad_reads;
      d.bad_bytes += st.v[v].bad_bytes;
      res.reads += st.v[v].reads;
      res.bytes_checked += st.v[v].bytes_checked;
      res.bad_reads += st.v[v].bad_reads;
      res.bad_bytes += st.v[v].bad_bytes;
    }
    for (std::size_t k = 0; k < kMountBadKinds; k++) res.bad_by_kind[k] += st.kinds[k];
    res.unchecked += st.unchecked;
    res.first_bad.insert(res.first_bad.end(), st.kept.begin(), st.kept.end());
  }
  std::sort(
      res.first_bad.begin(), res.first_bad.end(),
      [](const MountBadRead& a, const MountBadRead& b) { return a.at_seconds < b.at_seconds; });
  if (res.first_bad.size() > p.keep_bad) res.first_bad.resize(p.keep_bad);
  res.tool_error = tool_error;
  if (stats) {
    try {
      cache::CacheCounters after = stats->sum();
      res.have_daemon_counters = true;
      res.daemon_reads = after[cache::Ctr::reads] - before[cache::Ctr::reads];
      res.daemon_fast_pages = after[cache::Ctr::fast_pages] - before[cache::Ctr::fast_pages];
      res.daemon_misses = after[cache::Ctr::misses] - before[cache::Ctr::misses];
    } catch (const std::exception&) {
    }
  }
  return res;
}

MountRaceVerdict mount_race_verdict(const MountRaceParams& p, const MountRaceResult& r) {
  MountRaceVerdict v;
  char buf[512];
  if (!r.tool_error.empty()) {
    v.exit_code = 1;
    v.message = "FAIL: a change failed, the run stopped: " + r.tool_error;
    return v;
  }
  if (r.reads == 0) {
    v.exit_code = 1;
    v.message = "FAIL: no read completed, nothing was checked";
    return v;
  }
  if (p.control) {
    if (r.bad_reads > 0) {
      std::snprintf(buf, sizeof buf,
                    "control: %llu bad reads of %llu detected through the mount: the checker "
                    "catches the broken guarantee",
                    static_cast<unsigned long long>(r.bad_reads),
                    static_cast<unsigned long long>(r.reads));
      v.exit_code = 0;
    } else {
      std::snprintf(buf, sizeof buf,
                    "control: no bad read in %llu reads (%.1f s) — inconclusive (bad reads were "
                    "expected)",
                    static_cast<unsigned long long>(r.reads), r.seconds);
      v.exit_code = 2;
    }
    v.message = buf;
    return v;
  }
  if (r.bad_reads > 0) {
    std::snprintf(buf, sizeof buf, "FAIL: %llu bad reads of %llu through the mount",
                  static_cast<unsigned long long>(r.bad_reads),
                  static_cast<unsigned long long>(r.reads));
    v.exit_code = 1;
  } else if (p.evict && r.pages_evicted == 0) {
    std::snprintf(buf, sizeof buf,
                  "inconclusive: 0 bad reads, but no page was evicted (%llu of %llu evict ioctls "
                  "failed: is the directory on a norefs mount, and are we root or its owner?)",
                  static_cast<unsigned long long>(r.evict_errors),
                  static_cast<unsigned long long>(r.evict_calls));
    v.exit_code = 2;
  } else {
    std::snprintf(buf, sizeof buf,
                  "PASS: 0 bad reads in %llu reads (%.1f MiB checked) through the mount, %llu "
                  "pages evicted, %llu punches, %llu rewrites, %llu truncates meanwhile",
                  static_cast<unsigned long long>(r.reads),
                  static_cast<double>(r.bytes_checked) / (1024.0 * 1024.0),
                  static_cast<unsigned long long>(r.pages_evicted),
                  static_cast<unsigned long long>(r.punches),
                  static_cast<unsigned long long>(r.rewrites),
                  static_cast<unsigned long long>(r.truncates));
    v.exit_code = 0;
  }
  v.message = buf;
  return v;
}

std::string describe_mount_race_config(const MountRaceParams& p) {
  std::ostringstream os;
  os << "norefs_evict_race --mount " << p.dir << ": seconds=" << p.seconds
     << " readers=" << p.readers << " files=" << p.files << " file_pages=" << p.file_pages
     << " max_read=" << p.max_read << "\n  evict=" << (p.evict ? "on" : "off")
     << " punch=" << (p.punch ? "on" : "off") << " rewrite=" << (p.rewrite ? "on" : "off")
     << " truncate=" << (p.truncate ? "on" : "off") << " evict_pause_us=" << p.evict_pause_us
     << " mutate_pause_us=" << p.mutate_pause_us << " seed=" << p.seed
     << " control=" << (p.control ? "yes" : "no") << "\n";
  return os.str();
}

std::string format_mount_race_report(const MountRaceResult& r) {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "ran            %.2f s\n", r.seconds);
  os << line;
  os << "variant        reads        bytes checked   bad reads   bad bytes\n";
  for (std::size_t v = 0; v < kRaceVariants; v++) {
    const auto& d = r.by_variant[v];
    std::snprintf(
        line, sizeof line, "  %-10s %10llu %20llu %11llu %11llu\n",
        std::string(race_variant_name(static_cast<RaceVariant>(v))).c_str(),
        static_cast<unsigned long long>(d.reads), static_cast<unsigned long long>(d.bytes_checked),
        static_cast<unsigned long long>(d.bad_reads), static_cast<unsigned long long>(d.bad_bytes));
    os << line;
  }
  std::snprintf(
      line, sizeof line, "  %-10s %10llu %20llu %11llu %11llu\n", "all",
      static_cast<unsigned long long>(r.reads), static_cast<unsigned long long>(r.bytes_checked),
      static_cast<unsigned long long>(r.bad_reads), static_cast<unsigned long long>(r.bad_bytes));
  os << line;
  if (r.bad_reads) {
    os << "  bad reads by first wrong word:";
    for (std::size_t k = 0; k < kMountBadKinds; k++) {
      if (r.bad_by_kind[k])
        os << " " << mount_bad_kind_name(static_cast<MountBadKind>(k)) << "=" << r.bad_by_kind[k];
    }
    os << "\n";
  }
  if (r.unchecked)
    os << "unchecked      " << r.unchecked << " reads (overlapped too many changes)\n";
  std::snprintf(
      line, sizeof line,
      "changes        evict %llu ioctls (%llu pages, %llu errors); %llu punches, %llu "
      "rewrites, %llu truncates\n",
      static_cast<unsigned long long>(r.evict_calls),
      static_cast<unsigned long long>(r.pages_evicted),
      static_cast<unsigned long long>(r.evict_errors), static_cast<unsigned long long>(r.punches),
      static_cast<unsigned long long>(r.rewrites), static_cast<unsigned long long>(r.truncates));
  os << line;
  if (r.have_daemon_counters) {
    std::snprintf(line, sizeof line,
                  "daemon         %llu reads, %llu fast-path pages, %llu misses\n",
                  static_cast<unsigned long long>(r.daemon_reads),
                  static_cast<unsigned long long>(r.daemon_fast_pages),
                  static_cast<unsigned long long>(r.daemon_misses));
    os << line;
  }
  if (!r.tool_error.empty()) os << "tool error     " << r.tool_error << "\n";
  if (!r.first_bad.empty()) {
    os << "first bad reads:\n";
    for (const auto& b : r.first_bad) {
      std::snprintf(line, sizeof line,
                    "  t=%.3fs reader %u file %u read [%llu, +%zu) -> %zd during %s: at offset "
                    "%llu %s: %s\n",
                    b.at_seconds, b.reader, b.file, static_cast<unsigned long long>(b.pos), b.len,
                    b.returned, std::string(race_variant_name(b.variant)).c_str(),
                    static_cast<unsigned long long>(b.offset),
                    std::string(mount_bad_kind_name(b.kind)).c_str(), b.what.c_str());
      os << line;
    }
  }
  return os.str();
}

std::string mount_race_json(const MountRaceParams& p, const MountRaceResult& r,
                            const MountRaceVerdict& v, const std::string& daemon_options) {
  nlohmann::json cfg = {{"dir", p.dir},
                        {"daemon_options", daemon_options},
                        {"seconds", p.seconds},
                        {"readers", p.readers},
                        {"files", p.files},
                        {"file_pages", p.file_pages},
                        {"max_read", p.max_read},
                        {"evict", p.evict},
                        {"punch", p.punch},
                        {"rewrite", p.rewrite},
                        {"truncate", p.truncate},
                        {"evict_pause_us", p.evict_pause_us},
                        {"mutate_pause_us", p.mutate_pause_us},
                        {"seed", p.seed},
                        {"control", p.control}};
  nlohmann::json variants = nlohmann::json::object();
  for (std::size_t i = 0; i < kRaceVariants; i++) {
    const auto& d = r.by_variant[i];
    variants[std::string(race_variant_name(static_cast<RaceVariant>(i)))] = {
        {"reads", d.reads},
        {"bytes_checked", d.bytes_checked},
        {"bad_reads", d.bad_reads},
        {"bad_bytes", d.bad_bytes}};
  }
  nlohmann::json kinds = nlohmann::json::object();
  for (std::size_t k = 0; k < kMountBadKinds; k++)
    kinds[std::string(mount_bad_kind_name(static_cast<MountBadKind>(k)))] = r.bad_by_kind[k];
  nlohmann::json bad = nlohmann::json::array();
  for (const auto& b : r.first_bad) {
    bad.push_back({{"at_seconds", b.at_seconds},
                   {"reader", b.reader},
                   {"file", b.file},
                   {"pos", b.pos},
                   {"len", b.len},
                   {"returned", b.returned},
                   {"offset", b.offset},
                   {"kind", mount_bad_kind_name(b.kind)},
                   {"variant", race_variant_name(b.variant)},
                   {"what", b.what}});
  }
  nlohmann::json res = {{"seconds", r.seconds},
                        {"reads", r.reads},
                        {"bytes_checked", r.bytes_checked},
                        {"bad_reads", r.bad_reads},
                        {"bad_bytes", r.bad_bytes},
                        {"by_variant", variants},
                        {"bad_by_kind", kinds},
                        {"unchecked", r.unchecked},
                        {"evict_calls", r.evict_calls},
                        {"pages_evicted", r.pages_evicted},
                        {"evict_errors", r.evict_errors},
                        {"punches", r.punches},
                        {"rewrites", r.rewrites},
                        {"truncates", r.truncates},
                        {"tool_error", r.tool_error},
                        {"first_bad", bad}};
  if (r.have_daemon_counters) {
    res["daemon"] = {{"reads", r.daemon_reads},
                     {"fast_pages", r.daemon_fast_pages},
                     {"misses", r.daemon_misses}};
  }
  return nlohmann::json{{"config", cfg},
                        {"result", res},
                        {"verdict", {{"exit_code", v.exit_code}, {"message", v.message}}}}
             .dump(2) +
         "\n";
}

// ── DaemonMount ──

namespace {

bool mounted_at(const std::string& mnt) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint ...
    std::istringstream ls(line);
    std::string a, b, c, d, mp;
    ls >> a >> b >> c >> d >> mp;
    if (mp == mnt) return true;  // our paths have no characters mountinfo escapes
  }
  return false;
}

std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int run_quiet(const std::vector<std::string>& argv) {
  std::vector<char*> av;
  av.reserve(argv.size() + 1);
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  auto st = wait_for(pid, std::chrono::seconds(10));
  if (!st) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return WIFEXITED(*st) ? WEXITSTATUS(*st) : -1;
}

}  // namespace

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* n = sigdescr_np(WTERMSIG(status));  // MT-Safe, unlike strsignal
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + (n ? n : "?") + ")";
  }
  return "status " + std::to_string(status);
}

DaemonMount::DaemonMount(std::string daemon, std::string options, std::string backing)
    : daemon_(std::move(daemon)), options_(std::move(options)), backing_(std::move(backing)) {}

void DaemonMount::start(std::chrono::milliseconds limit) {
  std::string tmpl = "/tmp/norefs-race-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw_errno("mkdtemp /tmp/norefs-race-XXXXXX");
  root_ = tmpl;
  mnt_ = root_ + "/mnt";
  stats_ = root_ + "/stats";
  log_ = root_ + "/daemon.log";
  if (backing_.empty()) {
    backing_ = root_ + "/backing";
    if (mkdir(backing_.c_str(), 0755) != 0) throw_errno("mkdir " + backing_);
  }
  if (mkdir(mnt_.c_str(), 0755) != 0) throw_errno("mkdir " + mnt_);
  std::string opts = "stats_dir=" + stats_;
  if (!options_.empty()) opts += "," + options_;
  std::vector<std::string> argv = {daemon_, "-f", "-o", opts, backing_, mnt_};
  std::vector<char*> av;
  av.reserve(argv.size() + 1);
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  int rc = posix_spawn(&pid_, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot start " + daemon_ + ": " +
                             std::generic_category().message(rc));
  }
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!mounted_at(mnt_)) {
    if (auto st = exited()) {
      throw std::runtime_error("the daemon exited before mounting (" + describe_wait_status(*st) +
                               "):\n" + log());
    }
    if (std::chrono::steady_clock::now() >= end) {
      stop();
      throw std::runtime_error("the daemon did not mount within the limit:\n" + log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  mounted_ = true;
}

std::optional<int> DaemonMount::exited() {
  if (status_) return status_;
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  return status_;
}

std::string DaemonMount::log() const {
  std::ifstream in(log_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int> DaemonMount::stop() {
  if (pid_ > 0 && !status_) {
    // fusermount3 -u fails with EBUSY while something still uses the
    // mount (a lingering reader): retry a while.
    for (int i = 0; i < 50 && !exited(); i++) {
      if (run_quiet({"fusermount3", "-u", mnt_}) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!status_) {
      if (auto st = wait_for(pid_, std::chrono::seconds(20))) status_ = st;
    }
    if (!status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // A dead daemon (crash, kill) leaves its mount behind: detach it.
  if (!mnt_.empty() && mounted_at(mnt_)) {
    if (umount2(mnt_.c_str(), MNT_DETACH) != 0) run_quiet({"fusermount3", "-u", "-z", mnt_});
  }
  mounted_ = false;
  return status_;
}

DaemonMount::~DaemonMount() {
  stop();
  if (!root_.empty() && !mounted_at(mnt_)) {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
}

}  // namespace norefs::tools
