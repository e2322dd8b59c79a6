// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/backing_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "fs/sys.h"

namespace norefs::fs {

HandleBacking::~HandleBacking() {
  if (fd_ >= 0) close(fd_);
}

int HandleBacking::activate() {
  std::lock_guard lk(mu_);
  if (fd_ < 0) {
    ProcPath p(path_fd_);
    int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    fd_ = fd;
  }
  handles_++;
  return 0;
}

void HandleBacking::deactivate() noexcept {
  std::lock_guard lk(mu_);
  handles_--;
  close_if_idle_locked();
}

void HandleBacking::close_if_idle_locked() noexcept {
  if (handles_ == 0 && reads_ == 0 && fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

ssize_t HandleBacking::read(const iovec* iov, int iovcnt, std::uint64_t offset) {
  int fd;
  {
    std::lock_guard lk(mu_);
    if (fd_ < 0) return -ESTALE;
    fd = fd_;
    reads_++;
  }
  ssize_t r = preadv(fd, iov, iovcnt, static_cast<off_t>(offset));
  int err = r < 0 ? errno : 0;
  std::lock_guard lk(mu_);
  reads_--;
  close_if_idle_locked();
  return r < 0 ? -err : r;
}

}  // namespace norefs::fs
