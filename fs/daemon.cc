// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/daemon.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "fs/credentials.h"
#include "fs/filesystem.h"
#include "fs/fuse_io.h"
#include "fs/fuse_uring.h"

#ifdef NOREFS_SYNC_POINTS
#include "cache/sync_point.h"
#endif

namespace norefs::fs {

namespace {

// One fd per inode the kernel knows (passthrough_hp does the same).
// Each inode the kernel knows costs one descriptor (its O_PATH fd), and
// each open handle one more, with one for the cache while the file is open
// (fs/backing_fd.h): the soft limit goes up to the hard one, and the daemon
// says so.  Running out is an error the caller sees (EMFILE from lookup,
// create or open), never a wedged daemon.
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    const rlim_t was = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      std::fprintf(stderr, "norefs: open file limit raised from %llu to %llu (the hard limit)\n",
                   static_cast<unsigned long long>(was),
                   static_cast<unsigned long long>(lim.rlim_max));
    }
  }
}

// fuse_session_loop*() return 0, -errno, or the signal that stopped them.
int serve(fuse_session* se, const Options& o) {
  if (o.singlethread) return fuse_session_loop(se);
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  if (!cfg) return -ENOMEM;
  fuse_loop_cfg_set_clone_fd(cfg, o.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, o.effective_max_threads());
  // The default (-1: idle workers never exit) is left alone: libfuse 3.14
  // logs an error for it, and thread churn costs (libfuse PR 652).
  if (o.max_idle_threads != ~0u) fuse_loop_cfg_set_idle_threads(cfg, o.max_idle_threads);
  int r = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  return r;
}

// Going to the background the way fuse_daemonize() does (fork, setsid,
// cd /, stdio on /dev/null), except that the parent does not exit as soon
// as the child exists: it waits until the child reports whether the cache
// started, and exits with that status.  So `norefs ...`, mount(8) and
// systemd's Type=forking see exit 0 only for a mount that serves, and a
// failure (after which the child has unmounted) as exit 1 with its message
// on the caller's stderr.
class Background {
 public:
  // Forks.  Returns in the child only (or, if fork() fails, in the only
  // process: then ok() is false); the parent waits for report() and exits.
  Background() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "norefs: cannot go to the background: pipe: %s\n",
                   std::generic_category().message(errno).c_str());
      return;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "norefs: cannot go to the background: fork: %s\n",
                   std::generic_category().message(errno).c_str());
      close(fds[0]);
      close(fds[1]);
      return;
    }
    if (pid > 0) {
      close(fds[1]);
      unsigned char status = kExitFailure;
      ssize_t n;
      do {
        n = read(fds[0], &status, 1);
      } while (n < 0 && errno == EINTR);
      // n == 0: the child died before it could say (its stderr is ours).
      // _exit: the mount, the session and the cache are the child's now.
      _exit(n == 1 ? status : kExitFailure);
    }
    close(fds[0]);
    (void)setsid();
    fd_ = fds[1];
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() { report(kExitFailure); }

  bool ok() const { return fd_ >= 0; }

  // Tells the waiting parent `status`; on success first detaches from the
  // caller's directory and terminal, as fuse_daemonize() does.  Once only.
  void report(int status) {
    if (fd_ < 0) return;
    if (status == kExitOk) {
      (void)chdir("/");
      int null = open("/dev/null", O_RDWR | O_CLOEXEC);
      if (null >= 0) {
        for (int fd = 0; fd <= 2; fd++) (void)dup2(null, fd);
        if (null > 2) close(null);
      }
    }
    auto byte = static_cast<unsigned char>(status);
    ssize_t n;
    do {
      n = write(fd_, &byte, 1);
    } while (n < 0 && errno == EINTR);
    close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace

// mount -o remount,ro|rw: mount(8) runs the helper again, with the
// mountpoint of the running daemon.  The superblock's read-only flag is the
// kernel's (MS_REMOUNT through the old mount API: FUSE ignores the options
// and changes nothing else), so a read-only mount refuses every change with
// EROFS before a request reaches the daemon, as a native ro mount does; the
// running daemon is not told and needs not be.  The per-mount flags (nosuid,
// nodev, noexec, the atime ones) are kept as they are: MS_REMOUNT replaces
// them all.  Exit status as for a mount.
int remount(const Options& o) {
  struct statvfs sv {};
  if (statvfs(o.mountpoint.c_str(), &sv) != 0) {
    std::fprintf(stderr, "norefs: remount %s: %s\n", o.mountpoint.c_str(),
                 std::generic_category().message(errno).c_str());
    return kExitFailure;
  }
  unsigned long flags = MS_REMOUNT | (o.read_only ? MS_RDONLY : 0);
  const std::pair<unsigned long, unsigned long> keep[] = {
      {ST_NOSUID, MS_NOSUID},          {ST_NODEV, MS_NODEV},           {ST_NOEXEC, MS_NOEXEC},
      {ST_NOATIME, MS_NOATIME},        {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME},
      {ST_SYNCHRONOUS, MS_SYNCHRONOUS}};
  for (auto [st_bit, ms_bit] : keep)
    if (sv.f_flag & st_bit) flags |= ms_bit;
  if (mount(nullptr, o.mountpoint.c_str(), nullptr, flags, nullptr) != 0) {
    std::fprintf(stderr, "norefs: remount %s %s: %s\n", o.mountpoint.c_str(),
                 o.read_only ? "ro" : "rw", std::generic_category().message(errno).c_str());
    return kExitFailure;
  }
  return 0;
}

int run(const ParseResult& pr) {
  const Options& o = pr.opts;
  if (o.remount) return remount(o);
  // Creates apply the request's umask themselves (fs/credentials.h,
  // CallerUmask), or the kernel did before the request reached us.
  umask(0);
  raise_fd_limit();

  // Opened before mounting, so that mounting over the backing directory
  // itself works: the daemon keeps seeing what is underneath.
  int root_fd = open(o.backing_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat root_st {};
  if (root_fd < 0 || fstat(root_fd, &root_st) != 0) {
    std::fprintf(stderr, "norefs: backing directory '%s': %s\n", o.backing_dir.c_str(),
                 std::generic_category().message(errno).c_str());
    if (root_fd >= 0) close(root_fd);
    return kExitUsage;
  }
  Filesystem fs(o, root_fd, root_st);

  std::vector<char*> argv;
  for (const std::string& a : pr.fuse_args) argv.push_back(const_cast<char*>(a.c_str()));
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  // Rejects options nobody consumed ("fuse: unknown option(s)").
  fuse_session* se =
      fuse_session_new(&args, &Filesystem::operations(), sizeof(fuse_lowlevel_ops), &fs);
  fuse_opt_free_args(&args);  // what libfuse added to it while parsing
  if (!se) return kExitUsage;
  fs.set_session(se);
  int status = kExitFailure;
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return kExitFailure;
  }
  if (geteuid() != 0) {
    // A user mount: nothing to switch (fs/credentials.h).  Said, because
    // with allow_other every other user then acts as this one.
    std::fprintf(stderr,
                 "norefs: running as uid %u, not root: every operation uses its credentials\n",
                 static_cast<unsigned>(geteuid()));
  }
  if (o.io_uring) {
    // Before anything is mounted: the common refusal (the module
    // parameter is off) ends here with the kernel's reason.
    std::string why = FuseUring::available();
    if (!why.empty()) {
      std::fprintf(stderr, "norefs: -o io_uring: %s\n", why.c_str());
      fuse_remove_signal_handlers(se);
      fuse_session_destroy(se);
      return kExitFailure;
    }
  }
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return kExitFailure;
  }
  // Shared mappings of direct_io files (fs/fuse_io.h); kernel_cache mounts
  // do not need it.  With io_uring the I/O is installed after the fork,
  // with the queues (their threads would not survive it).
  if (!o.kernel_cache && !o.io_uring && install_fuse_io(se) != 0) {
    std::fprintf(stderr, "norefs: cannot install the /dev/fuse I/O functions\n");
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return kExitFailure;
  }
  // After the fork (if any): the cache starts threads and names its stats
  // files after the daemon's pid.
  std::optional<Background> background;
  if (!o.foreground) background.emplace();
  bool started = !background || background->ok();
  if (started) {
    try {
      fs.start_cache();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "norefs: cannot create the page cache: %s\n", e.what());
      started = false;
    }
  }
  std::unique_ptr<FuseUring> uring;
  if (started && o.io_uring) {
    std::string error;
    uring = FuseUring::create(se, FuseUring::kDefaultDepth, "norefs", &error);
    if (!uring) {
      std::fprintf(stderr, "norefs: -o io_uring: %s\n", error.c_str());
      started = false;
    } else if (install_fuse_io(
                   se, {.direct_io_allow_mmap = !o.kernel_cache, .uring = uring.get()}) != 0) {
      std::fprintf(stderr, "norefs: cannot install the io_uring transport\n");
      started = false;
    } else {
      std::fprintf(stderr, "norefs: io_uring: %u queues of %u entries\n", uring->queues(),
                   uring->depth());
    }
  }
#ifdef NOREFS_SYNC_POINTS
  // Test builds: the race-window control (docs/races.md): the noref fast
  // path and stackcopy sleep between finding their page and copying it,
  // inside the read-side section.  (Not the reference path: it copies from
  // a page it holds, and a sleep there only slows every miss, so that pages
  // rarely become hot enough for the fast path.)  Installed before
  // any worker starts, cleared after every worker has exited.
  if (started && o.debug_read_delay_us) {
    for (const char* point : {"read:fast:before_copy", "read:stackcopy:before_copy"}) {
      cache::sync_point::set(point, [us = o.debug_read_delay_us] { usleep(us); });
    }
  }
#endif
  if (started) {
    // Before the first worker exists (fs/credentials.h).
    ActAsCaller::init(o.debug_daemon_credentials);
    // The mount is in place and the cache is up: requests queued since
    // mounting are served as soon as the loop starts.
    if (background) background->report(kExitOk);
    int r = serve(se, o);
    // 0 after an unmount, the signal number after SIGINT/SIGTERM/SIGHUP:
    // both are a clean stop.
    status = r < 0 ? kExitFailure : kExitOk;
    if (r < 0)
      std::fprintf(stderr, "norefs: session loop: %s\n",
                   std::generic_category().message(-r).c_str());
    // The queue threads call into the session: they end first.  A refusal
    // by the kernel (already printed) stopped the loop with SIGTERM.
    if (uring) {
      uring->stop();
      if (uring->failed()) status = kExitFailure;
      std::fprintf(stderr, "norefs: io_uring: %llu requests served over the rings\n",
                   static_cast<unsigned long long>(uring->requests_served()));
    }
  }
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  // Every worker thread has exited: nothing calls into the cache any more.
  fuse_session_destroy(se);
  uring.reset();
#ifdef NOREFS_SYNC_POINTS
  if (o.debug_read_delay_us) cache::sync_point::clear();
#endif
  fs.teardown();
  // A failure to start is reported once nothing is mounted any more.
  if (background) background->report(status);
  return status;
}

}  // namespace norefs::fs
