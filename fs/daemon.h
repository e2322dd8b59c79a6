// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/daemon.h — the daemon's life: mount, serve, unmount, drain.
#pragma once

#include "fs/options.h"

namespace norefs::fs {

// Exit statuses of the daemon.
inline constexpr int kExitOk = 0;       // clean unmount, every page drained
inline constexpr int kExitFailure = 1;  // something went wrong after parsing
inline constexpr int kExitUsage = 2;    // bad input; nothing was mounted

// Mounts `pr.opts.backing_dir` on `pr.opts.mountpoint`, serves until
// unmounted (fusermount3 -u, umount) or told to stop (SIGINT, SIGTERM,
// SIGHUP), then drops every inode and file and destroys the cache.
// Returns the exit status.
int run(const ParseResult& pr);

}  // namespace norefs::fs
