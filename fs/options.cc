// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/options.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <fuse_opt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "alloc/shared_mapping.h"

#ifndef NOREFS_VERSION
#define NOREFS_VERSION "unknown"
#endif

namespace norefs::fs {

namespace {

constexpr const char* kUsage = "usage: %s [options] <backing-dir> <mountpoint>\n";

// Printed before libfuse's own option help.
constexpr const char* kOurHelp =
    "norefs options (-o opt[,opt...]):\n"
    "    -o cache_size=SIZE     hard bound on cache memory, pages waiting for a grace\n"
    "                           period included; k,m,g suffixes (binary); 0 = unbounded\n"
    "                           (default 256M)\n"
    "    -o read_path=P         noref|ref|ref-fetchadd|stackcopy (default noref)\n"
    "    -o defer=on|off        RCU-deferred page free (default on; off is unsafe with noref)\n"
    "    -o expedite=on|off     expedite long pending lists (default on)\n"
    "    -o expedite_pages=N    pending pages per thread that trigger an expedite (1024)\n"
    "    -o gp_interval_us=N    at most one grace period per N microseconds (1000)\n"
    "    -o dirty_decay_ms=N    freed page memory goes back to the kernel after about\n"
    "                           N ms; -1 never (default 1000; docs/punch-wait.md)\n"
    "    -o batch=N             fast-path pages per read-side section, 1..256 (31)\n"
    "    -o write_fill=on|off   a write to part of an uncached page reads the rest from\n"
    "                           the backing file and caches the page (default on);\n"
    "                           off leaves such pages uncached\n"
    "    -o cache=on|off        off: plain passthrough, the baseline (default on)\n"
    "    -o kernel_cache        let the kernel page cache serve repeated reads too\n"
    "    -o readahead=SIZE      readahead window maximum, at most 4M (128K; 0 = off)\n"
    "    -o max_threads=N       worker thread maximum (default: see below)\n"
    "    -o reply=auto|copy|iov how read replies are sent (default auto)\n"
    "    -o coherence_timeout=S seconds before getattr re-checks the backing file (1)\n"
    "    -o io_uring            serve requests over FUSE io_uring queues, one per CPU,\n"
    "                           instead of /dev/fuse; needs Linux 6.14+ and the module\n"
    "                           parameter fuse.enable_uring=Y (default off)\n"
    "    -o remount             with ro or rw: make a running norefs mount at the\n"
    "                           mountpoint read-only (EROFS for every change) or\n"
    "                           writable again, and exit (mount -o remount,ro)\n"
    "    -o stats_dir=DIR       where the counter blocks go: a directory (not a symlink)\n"
    "                           owned by the daemon's user and writable by nobody else,\n"
    "                           created 0700 if missing (default /run/norefs as root;\n"
    "                           else $XDG_RUNTIME_DIR/norefs, or /tmp/norefs-<uid>)\n"
    "    -o allow_other, -o default_permissions: passed to the kernel\n"
#ifdef NOREFS_SYNC_POINTS
    "    -o debug_read_delay_us=N  (test builds only) sleep N us between a fast-path\n"
    "                           page lookup and its copy (inside the read-side\n"
    "                           section): widens the race that deferral closes\n"
    "    -o debug_daemon_credentials  (test builds only) no switch to the caller's\n"
    "                           credentials: the permission tests' control\n"
#endif
    "\n"
    "mount(8), fstab and mount.fuse3 options, accepted with no effect on the daemon\n"
    "(mount(8)'s own; atime is kept by the backing filesystem):\n"
    "    -o defaults, -o auto, -o noauto, -o nofail, -o _netdev, -o user, -o users,\n"
    "    -o nouser, -o owner, -o group, -o comment=*, -o x-*, -o relatime,\n"
    "    -o norelatime, -o strictatime, -o nostrictatime, -o diratime, -o nodiratime,\n"
    "    -o lazytime, -o nolazytime, -o silent, -o loud, -v\n"
    "and passed to the kernel by libfuse:\n"
    "    -o rw, -o ro, -o dev, -o nodev, -o suid, -o nosuid, -o exec, -o noexec,\n"
    "    -o async, -o sync, -o dirsync, -o atime, -o noatime, -n (ignored)\n"
    "\n";

enum Key {
  kCacheSize,
  kReadPath,
  kDefer,
  kExpedite,
  kExpeditePages,
  kGpInterval,
  kDirtyDecay,
  kBatch,
  kCache,
  kWriteFill,
  kKernelCache,
  kReadahead,
  kMaxThreads,
  kReply,
  kCoherenceTimeout,
  kIoUring,
  kStatsDir,
  kDebugDaemonCredentials,
  kMountOnly,
  kRemount,
#ifdef NOREFS_SYNC_POINTS
  kDebugReadDelay,
#endif
};

const fuse_opt kOurOpts[] = {
    FUSE_OPT_KEY("cache_size=", kCacheSize),
    FUSE_OPT_KEY("read_path=", kReadPath),
    FUSE_OPT_KEY("defer=", kDefer),
    FUSE_OPT_KEY("expedite=", kExpedite),
    FUSE_OPT_KEY("expedite_pages=", kExpeditePages),
    FUSE_OPT_KEY("gp_interval_us=", kGpInterval),
    FUSE_OPT_KEY("dirty_decay_ms=", kDirtyDecay),
    FUSE_OPT_KEY("batch=", kBatch),
    FUSE_OPT_KEY("cache=", kCache),
    FUSE_OPT_KEY("write_fill=", kWriteFill),
    FUSE_OPT_KEY("kernel_cache", kKernelCache),
    FUSE_OPT_KEY("readahead=", kReadahead),
    FUSE_OPT_KEY("max_threads=", kMaxThreads),
    FUSE_OPT_KEY("reply=", kReply),
    FUSE_OPT_KEY("coherence_timeout=", kCoherenceTimeout),
    FUSE_OPT_KEY("io_uring", kIoUring),
    FUSE_OPT_KEY("stats_dir=", kStatsDir),
    FUSE_OPT_KEY("remount", kRemount),
#ifdef NOREFS_SYNC_POINTS
    // The permission tests' control (test builds only): every operation
    // with the daemon's own credentials, as before they were switched.
    FUSE_OPT_KEY("debug_daemon_credentials", kDebugDaemonCredentials),
    FUSE_OPT_KEY("debug_read_delay_us=", kDebugReadDelay),
#endif
    // What mount(8) and mount.fuse3 hand a helper and libfuse does not take:
    // mount(8)'s own fstab options (it passes nofail, _netdev and user on to
    // /sbin/mount.fuse.norefs; mount.fuse3 drops them) and the atime, lazytime
    // and verbosity flags.  Atime is the backing filesystem's business (the
    // daemon's reads update it there; getattr reports what the backing file
    // says), relatime is the kernel's default anyway.  x-* (fstab's
    // comments, x-systemd.*) is matched in opt_proc: fuse_opt templates
    // match prefixes only up to a '='.
    FUSE_OPT_KEY("defaults", kMountOnly),
    FUSE_OPT_KEY("auto", kMountOnly),
    FUSE_OPT_KEY("noauto", kMountOnly),
    FUSE_OPT_KEY("nofail", kMountOnly),
    FUSE_OPT_KEY("_netdev", kMountOnly),
    FUSE_OPT_KEY("user", kMountOnly),
    FUSE_OPT_KEY("users", kMountOnly),
    FUSE_OPT_KEY("nouser", kMountOnly),
    FUSE_OPT_KEY("owner", kMountOnly),
    FUSE_OPT_KEY("group", kMountOnly),
    FUSE_OPT_KEY("comment=", kMountOnly),
    FUSE_OPT_KEY("relatime", kMountOnly),
    FUSE_OPT_KEY("norelatime", kMountOnly),
    FUSE_OPT_KEY("strictatime", kMountOnly),
    FUSE_OPT_KEY("nostrictatime", kMountOnly),
    FUSE_OPT_KEY("diratime", kMountOnly),
    FUSE_OPT_KEY("nodiratime", kMountOnly),
    FUSE_OPT_KEY("lazytime", kMountOnly),
    FUSE_OPT_KEY("nolazytime", kMountOnly),
    FUSE_OPT_KEY("silent", kMountOnly),
    FUSE_OPT_KEY("loud", kMountOnly),
    FUSE_OPT_KEY("-v", kMountOnly),
    FUSE_OPT_END,
};

struct ParseState {
  Options* opts;
  std::vector<std::string> positional;
  bool bad = false;
};

std::optional<bool> parse_on_off(std::string_view v) {
  if (v == "on") return true;
  if (v == "off") return false;
  return std::nullopt;
}

template <class T>
std::optional<T> parse_uint(std::string_view v) {
  T x{};
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty()) return std::nullopt;
  return x;
}

// Applies one of our -o options.  Returns an error message, or "" if good.
std::string apply(Options& o, int key, std::string_view arg) {
  std::string_view name = arg.substr(0, arg.find('='));
  std::string_view v = arg.find('=') == std::string_view::npos ? "" : arg.substr(arg.find('=') + 1);
  auto bad = [&](std::string_view what) {
    return "bad value for " + std::string(name) + ": '" + std::string(v) + "' (" +
           std::string(what) + ")";
  };
  switch (key) {
    case kCacheSize: {
      auto s = parse_size(v);
      if (!s) return bad("a size such as 512M, 2G or 0");
      o.cache_bytes = *s;
      return "";
    }
    case kReadPath: {
      auto p = cache::parse_read_path(v);
      if (!p) return bad("noref, ref, ref-fetchadd or stackcopy");
      o.read_path = *p;
      return "";
    }
    case kDefer:
    case kExpedite:
    case kCache:
    case kWriteFill: {
      auto b = parse_on_off(v);
      if (!b) return bad("on or off");
      (key == kDefer       ? o.defer
       : key == kExpedite  ? o.expedite
       : key == kWriteFill ? o.write_fill
                           : o.cache) = *b;
      return "";
    }
    case kExpeditePages: {
      auto n = parse_uint<std::size_t>(v);
      if (!n || *n == 0) return bad("a page count >= 1");
      o.expedite_pages = *n;
      return "";
    }
    case kGpInterval: {
      auto n = parse_uint<unsigned>(v);
      if (!n || *n > 1000000) return bad("microseconds, 0..1000000");
      o.gp_interval_us = *n;
      return "";
    }
    case kDirtyDecay: {
      long ms = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
      if (v.empty() || ec != std::errc() || p != v.data() + v.size() || ms < -1 || ms > 3600000) {
        return bad("milliseconds, -1..3600000");
      }
      o.dirty_decay_ms = ms;
      return "";
    }
    case kBatch: {
      auto n = parse_uint<unsigned>(v);
      if (!n || *n == 0 || *n > cache::kMaxBatch) return bad("1..256");
      o.batch = *n;
      return "";
    }
    case kKernelCache:
      o.kernel_cache = true;
      return "";
    case kIoUring:
      o.io_uring = true;
      return "";
    case kReadahead: {
      auto s = parse_size(v);
      if (!s || *s > (4u << 20)) return bad("a size of at most 4M, 0 = off");
      o.readahead_bytes = *s;
      return "";
    }
    case kMaxThreads: {
      auto n = parse_uint<unsigned>(v);
      if (!n || *n == 0 || *n > 4096) return bad("1..4096");
      o.max_threads = *n;
      return "";
    }
    case kReply:
      if (v == "auto")
        o.reply = ReplyMode::automatic;
      else if (v == "copy")
        o.reply = ReplyMode::copy;
      else if (v == "iov")
        o.reply = ReplyMode::iov;
      else
        return bad("auto, copy or iov");
      return "";
    case kCoherenceTimeout: {
      if (v.empty()) return bad("seconds >= 0");
      std::string s(v);
      char* end = nullptr;
      errno = 0;
      double d = std::strtod(s.c_str(), &end);
      if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(d) || d < 0 || d > 1e9) {
        return bad("seconds >= 0");
      }
      o.coherence_timeout = d;
      return "";
    }
    case kStatsDir:
      if (v.empty()) return bad("a directory");
      o.stats_dir = std::string(v);
      return "";
    case kDebugDaemonCredentials:
      o.debug_daemon_credentials = true;
      return "";
    case kMountOnly:
      return "";
    case kRemount:
      o.remount = true;
      return "";
#ifdef NOREFS_SYNC_POINTS
    case kDebugReadDelay: {
      auto n = parse_uint<unsigned>(v);
      if (!n || *n > 1000000) return bad("microseconds, 0..1000000");
      o.debug_read_delay_us = *n;
      return "";
    }
#endif
  }
  return "unknown option '" + std::string(arg) + "'";
}

int opt_proc(void* data, const char* arg, int key, fuse_args* /*outargs*/) {
  auto* st = static_cast<ParseState*>(data);
  if (key == FUSE_OPT_KEY_NONOPT) {
    st->positional.emplace_back(arg);
    return 0;
  }
  if (key == FUSE_OPT_KEY_OPT) {
    // fstab's x-* options (x-systemd.automount, x-gvfs-show, ...): mount(8)
    // keeps them to itself, but a helper may still see them.
    if (std::strncmp(arg, "x-", 2) == 0) return 0;
    // Noted for a remount, and libfuse's all the same.
    if (std::strcmp(arg, "ro") == 0) st->opts->read_only = true;
    if (std::strcmp(arg, "rw") == 0) st->opts->read_only = false;
    return 1;  // libfuse's, or unknown: libfuse decides
  }
  std::string err = apply(*st->opts, key, arg);
  if (!err.empty()) {
    std::fprintf(stderr, "norefs: %s\n", err.c_str());
    st->bad = true;
  }
  return 0;
}

// Escapes ',' and '\' for a -o option value (libfuse splits on unescaped commas).
std::string escape_opt(std::string_view v) {
  std::string r;
  for (char c : v) {
    if (c == ',' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

// /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string r;
  for (std::size_t i = 0; i < s.size(); i++) {
    auto octal = [&](std::size_t j) { return j < s.size() && s[j] >= '0' && s[j] <= '7'; };
    if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      r += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      r += s[i];
    }
  }
  return r;
}

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// mkdir -p; the last component with `mode`, missing parents 0755.
int make_dirs(const std::string& path, mode_t mode) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  if (errno != ENOENT) return errno;
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (int e = make_dirs(path.substr(0, slash), 0755)) return e;
  }
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return errno;
  return 0;
}

// The stats directory: the counter blocks there are read by norefsctl as
// the daemon's user, so another user must not be able to plant, replace or
// redirect them.  Created 0700 if missing, then opened without following a
// symlink and checked on the descriptor (alloc::open_trusted_dir); the
// files themselves are created O_EXCL | O_NOFOLLOW (SharedMapping::create).
bool validate_stats_dir(Options& o) {
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "norefs: stats_dir '%s': %s\n", o.stats_dir.c_str(), msg.c_str());
    return false;
  };
  if (o.stats_dir.empty()) o.stats_dir = Options::default_stats_dir();
  // Daemonizing changes to "/": a relative directory would move.
  if (o.stats_dir[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return fail(std::generic_category().message(errno));
    o.stats_dir = std::string(cwd) + "/" + o.stats_dir;
  }
  if (int e = make_dirs(o.stats_dir, 0700)) return fail(std::generic_category().message(e));
  std::string why;
  int fd = alloc::open_trusted_dir(o.stats_dir, alloc::DirTrust::private_to_euid, &why);
  if (fd < 0) return fail(why);
  const bool writable = faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) == 0;
  const int err = errno;
  close(fd);
  if (!writable) return fail(std::generic_category().message(err));
  return true;
}

bool validate_paths(Options& o, const std::vector<std::string>& pos) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "norefs: %s\n", msg.c_str());
    return false;
  };
  char buf[PATH_MAX];
  struct stat st {};
  if (!realpath(pos[0].c_str(), buf) || stat(buf, &st) != 0) {
    return fail("backing directory '" + pos[0] + "': " + std::generic_category().message(errno));
  }
  if (!S_ISDIR(st.st_mode)) return fail("backing directory '" + pos[0] + "': not a directory");
  o.backing_dir = buf;
  if (!realpath(pos[1].c_str(), buf) || stat(buf, &st) != 0) {
    return fail("mountpoint '" + pos[1] + "': " + std::generic_category().message(errno));
  }
  if (!S_ISDIR(st.st_mode)) return fail("mountpoint '" + pos[1] + "': not a directory");
  o.mountpoint = buf;
  if (o.remount) {
    // The mount to change must be ours; nothing else is checked or started.
    const std::string type = mount_type(read_file("/proc/self/mountinfo"), o.mountpoint);
    if (type != "fuse.norefs") {
      return fail("remount: '" + pos[1] + "' is not a norefs mount" +
                  (type.empty() ? std::string(" (nothing is mounted there)") : " (" + type + ")"));
    }
    return true;
  }
  if (is_mount_point(read_file("/proc/self/mountinfo"), o.mountpoint)) {
    return fail("mountpoint '" + pos[1] + "' is busy: something is already mounted there");
  }
  // A mountpoint strictly inside the backing directory would make the daemon
  // walk into its own mount when it resolves that directory (deadlock).
  // The backing directory itself is fine: its fd is opened before mounting.
  if (o.backing_dir == "/" || o.mountpoint.starts_with(o.backing_dir + "/")) {
    return fail("mountpoint '" + pos[1] + "' is inside the backing directory");
  }
  return validate_stats_dir(o);
}

}  // namespace

// max(10, 2 x cores): libfuse's own default (10) on small machines, two
// workers per core on larger ones.  Measured 2026-11-30 on this 2-core VM
// (fio psync, 16-byte reads of a cached 4 KiB file, direct_io; 7 rounds of
// 2 s over two sweeps, medians, reads/s; the machine was shared, load
// 7-17, so each cell spans up to 3x):
//   max_threads   1 job    2 jobs   4 jobs   8 jobs
//   4             38-96k   65-120k  112-118k 81-99k
//   10            62-94k   65-106k  84-99k   124-138k
//   16            30-79k   93-95k   90-93k   103-132k
//   32            35-48k   57-126k  50-75k   64-110k
// (two medians per cell, one per sweep).  Below 8 jobs the differences are
// noise (a 1-job run uses one worker whatever the maximum); at 8 jobs 10
// is best and 32 worst (more runnable threads than cores).  clone_fd was
// within the noise too (fuse-landscape.md found the same).
std::string Options::default_stats_dir() {
  const uid_t euid = geteuid();
  if (euid == 0) return "/run/norefs";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/norefs";
  return "/tmp/norefs-" + std::to_string(euid);
}

unsigned Options::default_max_threads() {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(10u, 2 * cores);
}

cache::PageCacheConfig Options::cache_config(long pid) const {
  cache::PageCacheConfig c;
  c.read_path = read_path;
  c.pool.defer = defer;
  c.pool.expedite = expedite;
  c.pool.expedite_pages = expedite_pages;
  c.pool.gp_interval_us = gp_interval_us;
  c.pool.dirty_decay_ms = dirty_decay_ms;
  c.batch = batch;
  c.write_fill_partial = write_fill;
  c.limit_pages = limit_pages();
  c.readahead_max_pages = readahead_pages();
  c.stats_path = stats_dir + "/cache." + std::to_string(pid);
  c.pool.stats_path = stats_dir + "/alloc." + std::to_string(pid);
  // Every FUSE worker, the cache's and the pool's own threads and the main
  // thread may use a slot; one more than the maximum aborts.
  std::size_t slots = std::max<std::size_t>(1024, effective_max_threads() + 64);
  c.max_threads = slots;
  c.pool.max_threads = slots;
  return c;
}

std::optional<std::size_t> parse_size(std::string_view s) {
  if (s.empty()) return std::nullopt;
  unsigned shift = 0;
  switch (s.back()) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    default:
      break;
  }
  if (shift) s.remove_suffix(1);
  auto n = parse_uint<std::size_t>(s);
  if (!n) return std::nullopt;
  if (shift && *n > (~std::size_t{0} >> shift)) return std::nullopt;
  return *n << shift;
}

namespace {

// Calls fn(line) for each line of /proc/self/mountinfo's text whose mount
// point is `path`, in order (the last is the topmost mount there).
template <class F>
void for_each_mount_at(std::string_view mountinfo, std::string_view path, F&& fn) {
  std::size_t pos = 0;
  while (pos < mountinfo.size()) {
    std::size_t eol = mountinfo.find('\n', pos);
    if (eol == std::string_view::npos) eol = mountinfo.size();
    std::string_view line = mountinfo.substr(pos, eol - pos);
    pos = eol + 1;
    // id parent major:minor root mountpoint ...
    std::size_t f = 0;
    for (int i = 0; i < 4 && f != std::string_view::npos; i++) {
      f = line.find(' ', f);
      if (f != std::string_view::npos) f++;
    }
    if (f == std::string_view::npos) continue;
    std::size_t e = line.find(' ', f);
    if (unescape_mountinfo(line.substr(f, e == std::string_view::npos ? e : e - f)) == path) {
      fn(line);
    }
  }
}

}  // namespace

bool is_mount_point(std::string_view mountinfo, std::string_view path) {
  bool found = false;
  for_each_mount_at(mountinfo, path, [&](std::string_view) { found = true; });
  return found;
}

std::string mount_type(std::string_view mountinfo, std::string_view path) {
  std::string type;
  for_each_mount_at(mountinfo, path, [&](std::string_view line) {
    // ... optional fields - fstype source super-options
    std::size_t sep = line.find(" - ");
    if (sep == std::string_view::npos) return;
    std::string_view rest = line.substr(sep + 3);
    type = unescape_mountinfo(rest.substr(0, rest.find(' ')));  // the last one is the topmost
  });
  return type;
}

ParseResult parse_command_line(int argc, char* argv[]) {
  ParseResult r;
  ParseState st{&r.opts, {}, false};
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  auto done = [&](ParseResult::Action a) {
    fuse_opt_free_args(&args);
    r.action = a;
    return r;
  };
  if (fuse_opt_parse(&args, &st, kOurOpts, opt_proc) != 0) return done(ParseResult::exit_usage);

  // Our fsname and subtype before libfuse's parser, so that it adds no
  // default subtype of its own.
  if (st.positional.size() >= 1) {
    char buf[PATH_MAX];
    std::string src = realpath(st.positional[0].c_str(), buf) ? buf : st.positional[0];
    std::string o = "-ofsname=" + escape_opt(src) + ",subtype=norefs";
    fuse_opt_add_arg(&args, o.c_str());
  }

  fuse_cmdline_opts fo{};
  if (fuse_parse_cmdline(&args, &fo) != 0) return done(ParseResult::exit_usage);
  free(fo.mountpoint);  // none: our parser took every positional argument
  if (fo.show_help) {
    std::printf(kUsage, argv[0]);
    std::printf("\n");
    std::fputs(kOurHelp, stdout);
    std::printf("    max_threads default: %u here (max(10, 2 x cores))\n\n",
                Options::default_max_threads());
    fuse_cmdline_help();
    fuse_lowlevel_help();
    return done(ParseResult::exit_ok);
  }
  if (fo.show_version) {
    std::printf("norefs version %s\n", NOREFS_VERSION);
    std::printf("FUSE library version %s\n", fuse_pkgversion());
    std::fflush(stdout);
    fuse_lowlevel_version();
    return done(ParseResult::exit_ok);
  }
  if (st.bad) return done(ParseResult::exit_usage);
  if (st.positional.size() != 2) {
    std::fprintf(stderr, "norefs: wrong number of arguments (%zu, want 2)\n", st.positional.size());
    std::fprintf(stderr, kUsage, argv[0]);
    std::fprintf(stderr, "try '%s --help' for the options\n", argv[0]);
    return done(ParseResult::exit_usage);
  }
  Options& o = r.opts;
  o.foreground = fo.foreground;
  o.debug = fo.debug;
  o.singlethread = fo.singlethread;
  o.clone_fd = fo.clone_fd;
  o.max_idle_threads = fo.max_idle_threads;
  if (!validate_paths(o, st.positional)) return done(ParseResult::exit_usage);
  for (int i = 0; i < args.argc; i++) r.fuse_args.emplace_back(args.argv[i]);
  return done(ParseResult::run);
}

}  // namespace norefs::fs
