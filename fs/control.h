// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/control.h — the control interface of a running norefs mount: ioctls on
// a file or directory opened through the mount.  Plain C types, no libfuse:
// tools/ctl/norefsctl includes it.  Only root or the user who mounted may use
// them (EPERM otherwise).
//
//   NOREFS_IOC_INFO      on any file or directory of the mount: the daemon's
//                        pid and the paths of its two counter blocks
//                        (alloc/stats_block.h, cache/cache_stats.h), which
//                        are 0600 files of the mounting user.
//   NOREFS_IOC_EVICT     on a regular file: evict its cached pages that no
//                        reference-path reader holds (fadvise(DONTNEED)).
//   NOREFS_IOC_PREFETCH  on a regular file: read [offset, offset+length)
//                        into the cache now (MADV_WILLNEED); reports pages
//                        read from the backing file and the time taken.
#pragma once

#include <linux/ioctl.h>
#include <stdint.h>

#define NOREFS_IOC_MAGIC 'N'

struct norefs_info {
  uint64_t pid;
  char alloc_stats[256];  // NUL-terminated path
  char cache_stats[256];
};

struct norefs_evict {
  uint64_t pages;  // out: pages evicted
};

struct norefs_prefetch {
  uint64_t offset;       // in
  uint64_t length;       // in; 0 = to the end of the file
  uint64_t pages_read;   // out: pages read from the backing file
  uint64_t nanoseconds;  // out: time the prefetch took in the daemon
};

#define NOREFS_IOC_INFO _IOR(NOREFS_IOC_MAGIC, 1, struct norefs_info)
#define NOREFS_IOC_EVICT _IOR(NOREFS_IOC_MAGIC, 2, struct norefs_evict)
#define NOREFS_IOC_PREFETCH _IOWR(NOREFS_IOC_MAGIC, 3, struct norefs_prefetch)
