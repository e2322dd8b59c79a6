// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_minimal_fuse — the smallest correct low-level FUSE server that
// answers reads: a root directory holding one read-only file "f" whose bytes
// come from a static buffer (byte i is i % 251, a period that no power-of-two
// offset error can hide).  No cache, no backing file, no locks: a read is one
// fuse_reply_buf() from the buffer.  It measures the FUSE round trip of the
// machine, the ceiling any daemon's served-from-memory read can reach.
//
//   norefs_minimal_fuse [-f] [-s] [-d] [-o size=N,max_threads=N,clone_fd,io_uring,...] <mountpoint>
//
// Threads: handled as the norefs daemon handles them (fs/daemon.cc,
// fs/options.cc), so that the two differ only in what a read does:
// max_threads defaults to max(10, 2 x cores), not libfuse's 10; clone_fd and
// max_idle_threads come from fuse_parse_cmdline(), and idle threads are left
// at libfuse's default (never exit) unless given.  Each value goes to its own
// fuse_loop_cfg setter (libfuse 3.14's passthrough_hp routes --num-threads
// to the idle-thread setter by mistake: libfuse PR 1034).  Files are opened direct_io, like the
// daemon's default, so every read reaches this process.
//
// Transport: /dev/fuse by default, through libfuse's own loop and I/O.
// -o io_uring serves requests over the kernel's FUSE io_uring queues with the
// daemon's transport module (fs/fuse_uring.h, fs/fuse_io.h: the INIT patch
// that asks for it and the routing of replies), so that both measure the
// same transport; it fails with a message when the kernel does not allow it
// (module parameter fuse.enable_uring off).  See docs/fuse-io-uring.md.
//
// This is the one file outside fs/ that includes <fuse_lowlevel.h>: it is a
// measuring instrument for fs/, not part of it, and shares no code with it
// except that transport module (which depends on libfuse and liburing only).

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fs/fuse_io.h"
#include "fs/fuse_uring.h"

namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
constexpr fuse_ino_t kFileIno = 2;
constexpr const char* kFileName = "f";
// Static content: nothing ever changes, so the kernel may keep entries and
// attributes for as long as it likes.
constexpr double kTimeout = 86400.0;

struct Options {
  unsigned long size = 4096;
  unsigned max_threads = 0;  // 0: default_max_threads()
  int io_uring = 0;
};

// Consumed here, so that libfuse never sees them.
constexpr fuse_opt kOptSpecs[] = {
    {"size=%lu", offsetof(Options, size), 0},
    {"max_threads=%u", offsetof(Options, max_threads), 0},
    {"io_uring", offsetof(Options, io_uring), 1},
    FUSE_OPT_END,
};

// The daemon's default (fs/options.cc, Options::default_max_threads).
unsigned default_max_threads() {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(10u, 2 * cores);
}

// Written once in main() before the session starts; read-only afterwards.
const char* g_data = nullptr;
std::size_t g_size = 0;

void fill_stat(fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  if (ino == kRootIno) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
  } else {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = static_cast<off_t>(g_size);
    st->st_blocks = static_cast<blkcnt_t>((g_size + 511) / 512);
  }
}

// Each callback sends exactly one reply.

void mf_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != kRootIno || std::strcmp(name, kFileName) != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = kFileIno;
  e.generation = 1;
  e.attr_timeout = kTimeout;
  e.entry_timeout = kTimeout;
  fill_stat(kFileIno, &e.attr);
  fuse_reply_entry(req, &e);
}

void mf_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  if (ino != kRootIno && ino != kFileIno) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  fill_stat(ino, &st);
  fuse_reply_attr(req, &st, kTimeout);
}

void mf_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != kFileIno) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY) {
    fuse_reply_err(req, EACCES);
    return;
  }
  fi->direct_io = 1;
  fi->keep_cache = 0;
  fuse_reply_open(req, fi);
}

void mf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  if (ino != kFileIno) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  auto pos = static_cast<std::size_t>(off);
  std::size_t n = pos >= g_size ? 0 : std::min(size, g_size - pos);
  fuse_reply_buf(req, n ? g_data + pos : nullptr, n);
}

void mf_release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void mf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  if (ino != kRootIno) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  struct Entry {
    const char* name;
    fuse_ino_t ino;
  };
  static constexpr Entry kEntries[] = {{".", kRootIno}, {"..", kRootIno}, {kFileName, kFileIno}};
  // Three entries fit any buffer the kernel asks with; entry i carries
  // offset i+1, the offset of the next one.
  char buf[512];
  std::size_t used = 0;
  for (auto i = static_cast<std::size_t>(std::max<off_t>(off, 0)); i < std::size(kEntries); i++) {
    struct stat st {};
    st.st_ino = kEntries[i].ino;
    st.st_mode = kEntries[i].ino == kRootIno ? S_IFDIR : S_IFREG;
    std::size_t len = fuse_add_direntry(req, buf + used, std::min(size, sizeof(buf)) - used,
                                        kEntries[i].name, &st, static_cast<off_t>(i + 1));
    if (used + len > std::min(size, sizeof(buf))) break;
    used += len;
  }
  fuse_reply_buf(req, buf, used);
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.lookup = mf_lookup;
  ops.getattr = mf_getattr;
  ops.open = mf_open;
  ops.read = mf_read;
  ops.release = mf_release;
  ops.readdir = mf_readdir;
  return ops;
}

void usage(const char* prog) {
  std::printf(
      "usage: %s [options] <mountpoint>\n\n"
      "One read-only file \"f\" served from memory (byte i = i %% 251), opened direct_io.\n"
      "    -o size=N              size of f in bytes (default 4096)\n"
      "    -o max_threads=N       worker thread maximum (default max(10, 2 x cores) = %u)\n"
      "    -o io_uring            serve requests over FUSE io_uring queues (one per CPU,\n"
      "                           %u entries each); needs fuse.enable_uring=Y\n",
      prog, default_max_threads(), norefs::fs::FuseUring::kDefaultDepth);
}

}  // namespace

int main(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  Options opt;
  if (fuse_opt_parse(&args, &opt, kOptSpecs, nullptr) != 0) return 2;
  fuse_cmdline_opts cmd{};
  if (fuse_parse_cmdline(&args, &cmd) != 0) return 2;
  int ret = 1;
  fuse_session* se = nullptr;
  fuse_lowlevel_ops ops = make_ops();
  std::vector<char> data;
  std::unique_ptr<norefs::fs::FuseUring> uring;
  std::string error;
  if (cmd.show_help) {
    usage(argv[0]);
    fuse_cmdline_help();
    fuse_lowlevel_help();
    ret = 0;
    goto out_args;
  }
  if (cmd.show_version) {
    std::printf("FUSE library version %s\n", fuse_pkgversion());
    fuse_lowlevel_version();
    ret = 0;
    goto out_args;
  }
  if (cmd.mountpoint == nullptr) {
    usage(argv[0]);
    ret = 2;
    goto out_args;
  }
  data.resize(opt.size);
  for (std::size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i % 251);
  g_data = data.data();
  g_size = data.size();
  if (opt.max_threads == 0) opt.max_threads = default_max_threads();
  if (opt.io_uring) {
    error = norefs::fs::FuseUring::available();
    if (!error.empty()) {
      std::fprintf(stderr, "norefs_minimal_fuse: -o io_uring: %s\n", error.c_str());
      ret = 1;
      goto out_args;
    }
  }
  // Effective configuration first, on stderr: stdout is free for -d's log.
  std::fprintf(
      stderr,
      "norefs_minimal_fuse: %s: f = %lu bytes, %s, max_threads %u, max_idle_threads %s, "
      "clone_fd %d, direct_io, %s\n",
      cmd.mountpoint, opt.size, cmd.singlethread ? "single-threaded" : "multithreaded",
      opt.max_threads,
      cmd.max_idle_threads == UINT_MAX ? "unlimited" : std::to_string(cmd.max_idle_threads).c_str(),
      cmd.clone_fd, opt.io_uring ? "io_uring" : "/dev/fuse");

  fuse_opt_add_arg(&args, "-ofsname=norefs_minimal,subtype=norefs_minimal");
  se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  if (se == nullptr) {
    ret = 2;
    goto out_args;
  }
  if (fuse_set_signal_handlers(se) != 0) goto out_session;
  if (fuse_session_mount(se, cmd.mountpoint) != 0) goto out_signals;
  fuse_daemonize(cmd.foreground);
  // After fuse_daemonize(): its fork would leave the queue threads behind.
  if (opt.io_uring) {
    uring = norefs::fs::FuseUring::create(se, norefs::fs::FuseUring::kDefaultDepth,
                                          "norefs_minimal_fuse", &error);
    if (!uring) {
      std::fprintf(stderr, "norefs_minimal_fuse: -o io_uring: %s\n", error.c_str());
      goto out_unmount;
    }
    std::fprintf(stderr, "norefs_minimal_fuse: io_uring: %u queues of %u entries\n",
                 uring->queues(), uring->depth());
    if (norefs::fs::install_fuse_io(se, {.direct_io_allow_mmap = false, .uring = uring.get()}) !=
        0) {
      std::fprintf(stderr, "norefs_minimal_fuse: cannot install the io_uring transport\n");
      goto out_unmount;
    }
  }
  if (cmd.singlethread) {
    ret = fuse_session_loop(se);
  } else {
    fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(cfg, static_cast<unsigned>(cmd.clone_fd));
    // UINT_MAX is fuse_parse_cmdline()'s "not given"; 3.14 logs an error
    // when handed it.
    if (cmd.max_idle_threads != UINT_MAX) fuse_loop_cfg_set_idle_threads(cfg, cmd.max_idle_threads);
    fuse_loop_cfg_set_max_threads(cfg, opt.max_threads);
    ret = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
  }
  ret = ret ? 1 : 0;
  if (uring) {
    // The queue threads use the session: they end before it does.
    uring->stop();
    std::fprintf(stderr, "norefs_minimal_fuse: io_uring: %llu requests served over the rings\n",
                 static_cast<unsigned long long>(uring->requests_served()));
    if (uring->failed()) ret = 1;
  }
out_unmount:
  fuse_session_unmount(se);
out_signals:
  fuse_remove_signal_handlers(se);
out_session:
  fuse_session_destroy(se);
  uring.reset();
out_args:
  std::free(cmd.mountpoint);
  fuse_opt_free_args(&args);
  return ret;
}
