// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/daemon.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "fs/filesystem.h"

#ifdef NOREFS_SYNC_POINTS
#include "cache/sync_point.h"
#endif

namespace norefs::fs {

namespace {

// One fd per inode the kernel knows (passthrough_hp does the same).
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
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

}  // namespace

int run(const ParseResult& pr) {
  const Options& o = pr.opts;
  // The kernel applies the caller's umask before a create reaches us.
  umask(0);
  raise_fd_limit();

  // Opened before mounting, so that mounting over the backing directory
  // itself works: the daemon keeps seeing what is underneath.
  int root_fd = open(o.backing_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat root_st {};
  if (root_fd < 0 || fstat(root_fd, &root_st) != 0) {
    std::fprintf(stderr, "norefs: backing directory '%s': %s\n", o.backing_dir.c_str(),
                 std::strerror(errno));
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
  int status = kExitFailure;
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return kExitFailure;
  }
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return kExitFailure;
  }
  // After the fork (if any): the cache starts threads and names its stats
  // files after the daemon's pid.
  bool started = fuse_daemonize(o.foreground ? 1 : 0) == 0;
  if (started) {
    try {
      fs.start_cache();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "norefs: cannot create the page cache: %s\n", e.what());
      started = false;
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
    int r = serve(se, o);
    // 0 after an unmount, the signal number after SIGINT/SIGTERM/SIGHUP:
    // both are a clean stop.
    status = r < 0 ? kExitFailure : kExitOk;
    if (r < 0) std::fprintf(stderr, "norefs: session loop: %s\n", std::strerror(-r));
  }
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  // Every worker thread has exited: nothing calls into the cache any more.
  fuse_session_destroy(se);
#ifdef NOREFS_SYNC_POINTS
  if (o.debug_read_delay_us) cache::sync_point::clear();
#endif
  fs.teardown();
  return status;
}

}  // namespace norefs::fs
