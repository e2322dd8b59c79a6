// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/backing_fd.h — the cache's read-only descriptor of a backing file, open
// only while the file is: from the first open handle to the last release.
//
// Why.  Every Inode the kernel knows holds one O_PATH fd (fs/inode.h), for
// as long as the kernel keeps the inode (until FORGET, which may be long
// after the last close).  The cache reads misses, readahead and the rest of
// a partly written page through a descriptor of its own, opened as the
// daemon.  Kept for the Inode's life, that made two descriptors per file
// the kernel remembers, and a tree of 10,000 closed files exhausted a
// 20,000-descriptor limit (xfstests generic/471).  The cache needs it only
// while some handle may read or write, so it is opened with the first
// handle and closed with the last: closed files cost one descriptor.
//
// Concurrency.  read() is called from any thread, with a handle open (a
// request) or not (the readahead worker finishing a window after the last
// release).  `mu_` guards fd_, handles_ and reads_; a read takes it twice
// (before and after its preadv), never across it.  The descriptor is closed
// only when no handle is open and no read is in flight, so a read never
// reaches a descriptor number that was closed and reused for another file.
// A read with no handle open fails with -ESTALE (the readahead worker drops
// its window; a request always has its handle).
#pragma once

#include <mutex>

#include "cache/backing.h"
#include "cache/page_cache.h"

namespace norefs::fs {

class HandleBacking final : public cache::Backing {
 public:
  // `fd`: an O_RDONLY descriptor of the file, owned from here on; counts as
  // the first handle's activation (attach, under the writer lock of an open).
  // `path_fd`: the Inode's O_PATH fd, borrowed: used only by activate(),
  // which runs in an open of the Inode, so it outlives every use.
  HandleBacking(int fd, int path_fd) : fd_(fd), path_fd_(path_fd), handles_(1) {}
  ~HandleBacking() override;
  HandleBacking(const HandleBacking&) = delete;
  HandleBacking& operator=(const HandleBacking&) = delete;

  // A handle opens: reopens the descriptor (as the daemon) if it was closed.
  // 0 or the errno of the open (EMFILE, ENFILE: the caller's open fails).
  int activate();
  // A handle was released: the last one closes the descriptor (now, or when
  // the last read in flight ends).
  void deactivate() noexcept;

  ssize_t read(const iovec* iov, int iovcnt, std::uint64_t offset) override;

  // The backing of a CachedFile the daemon made (Filesystem::
  // attach_and_check_locked() gives every one a HandleBacking), or null.
  static HandleBacking* of(cache::CachedFile* f) {
    return f ? &static_cast<HandleBacking&>(f->backing()) : nullptr;
  }

 private:
  void close_if_idle_locked() noexcept;

  std::mutex mu_;
  int fd_;             // -1 while closed; guarded by mu_
  const int path_fd_;  // borrowed
  int handles_;        // open handles; guarded by mu_
  int reads_ = 0;      // reads in flight on fd_; guarded by mu_
};

}  // namespace norefs::fs
