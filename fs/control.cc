// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/control.cc — the ioctl control interface (fs/control.h).
//
// FUSE passes ioctls on regular files and directories as "restricted": the
// kernel takes the argument sizes from the _IOC encoding of `cmd`, fetches
// in_bufsz bytes for _IOW/_IOWR and copies back at most out_bufsz bytes for
// _IOR/_IOWR, so the reply is fuse_reply_ioctl(req, 0, buf, size) with the
// structure itself.  32-bit callers (FUSE_IOCTL_COMPAT) are not supported.
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "fs/control.h"
#include "fs/ops_common.h"

namespace norefs::fs {

namespace {

// The cached file behind an open regular file, or nullptr if it is served
// uncached.  The handle keeps it alive for the duration of the request.
cache::CachedFile* cached_of(fuse_file_info* fi) {
  OpenFile* of = open_file_of(fi);
  return of->ch ? &of->ch->file() : nullptr;
}

void copy_path(char (&dst)[256], const std::string& src) {
  std::memset(dst, 0, sizeof dst);
  std::strncpy(dst, src.c_str(), sizeof dst - 1);
}

int do_info(fuse_req_t req, std::size_t out_bufsz) {
  if (out_bufsz < sizeof(norefs_info)) return EINVAL;
  Filesystem& fs = fs_of(req);
  norefs_info info{};
  info.pid = static_cast<std::uint64_t>(getpid());
  copy_path(info.alloc_stats, fs.cache().pool().stats_path());
  copy_path(info.cache_stats, fs.cache().stats_path());
  fuse_reply_ioctl(req, 0, &info, sizeof info);
  return 0;
}

int do_evict(fuse_req_t req, fuse_file_info* fi, std::size_t out_bufsz) {
  if (out_bufsz < sizeof(norefs_evict)) return EINVAL;
  norefs_evict ev{};
  if (cache::CachedFile* f = cached_of(fi)) ev.pages = fs_of(req).cache().evict(*f);
  fuse_reply_ioctl(req, 0, &ev, sizeof ev);
  return 0;
}

int do_prefetch(fuse_req_t req, fuse_file_info* fi, const void* in_buf, std::size_t in_bufsz,
                std::size_t out_bufsz) {
  if (in_bufsz < sizeof(norefs_prefetch) || out_bufsz < sizeof(norefs_prefetch)) return EINVAL;
  norefs_prefetch pf;
  std::memcpy(&pf, in_buf, sizeof pf);
  timespec t0{}, t1{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ssize_t pages = 0;
  if (cache::CachedFile* f = cached_of(fi)) {
    std::uint64_t size = f->size();
    std::uint64_t len = pf.length;
    if (len == 0) len = pf.offset < size ? size - pf.offset : 0;  // 0: to the end
    pages = fs_of(req).cache().prefetch(*f, pf.offset, len);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (pages < 0) return static_cast<int>(-pages);
  pf.pages_read = static_cast<std::uint64_t>(pages);
  pf.nanoseconds = static_cast<std::uint64_t>((t1.tv_sec - t0.tv_sec) * 1000000000LL +
                                              (t1.tv_nsec - t0.tv_nsec));
  fuse_reply_ioctl(req, 0, &pf, sizeof pf);
  return 0;
}

int do_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, fuse_file_info* fi, unsigned flags,
             const void* in_buf, std::size_t in_bufsz, std::size_t out_bufsz) {
  if (flags & FUSE_IOCTL_COMPAT) return ENOSYS;
  if (cmd != NOREFS_IOC_INFO && cmd != NOREFS_IOC_EVICT && cmd != NOREFS_IOC_PREFETCH) {
    return ENOTTY;
  }
  // Only root or the user who mounted.
  uid_t uid = fuse_req_ctx(req)->uid;
  if (uid != 0 && uid != getuid()) return EPERM;
  if (cmd == NOREFS_IOC_INFO) return do_info(req, out_bufsz);
  // EVICT and PREFETCH act on a regular file's cache; fi is then an
  // OpenFile (for a directory it would be a DirHandle).
  if (!inode_of(req, ino).is_reg()) return ENOTTY;
  if (cmd == NOREFS_IOC_EVICT) return do_evict(req, fi, out_bufsz);
  return do_prefetch(req, fi, in_buf, in_bufsz, out_bufsz);
}

void sfs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* /*arg*/, fuse_file_info* fi,
               unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  reply_errno(req, [&] { return do_ioctl(req, ino, cmd, fi, flags, in_buf, in_bufsz, out_bufsz); });
}

}  // namespace

void add_control_ops(fuse_lowlevel_ops& ops) { ops.ioctl = sfs_ioctl; }

}  // namespace norefs::fs
