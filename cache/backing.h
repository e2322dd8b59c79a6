// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/backing.h — where a cached file's bytes come from.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>

namespace norefs::cache {

class Backing {
 public:
  virtual ~Backing() = default;
  // Reads up to the iovecs' total at `offset`, like preadv(2): bytes read
  // (short at end of file) or -errno.  Called from any thread, concurrently.
  virtual ssize_t read(const iovec* iov, int iovcnt, std::uint64_t offset) = 0;
};

// A file descriptor; owns it (closes it) if `own` is true.
class FdBacking final : public Backing {
 public:
  FdBacking(int fd, bool own) : fd_(fd), own_(own) {}
  ~FdBacking() override;
  FdBacking(const FdBacking&) = delete;
  FdBacking& operator=(const FdBacking&) = delete;
  ssize_t read(const iovec* iov, int iovcnt, std::uint64_t offset) override;
  int fd() const { return fd_; }

 private:
  int fd_;
  bool own_;
};

}  // namespace norefs::cache
