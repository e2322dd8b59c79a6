// SPDX-License-Identifier: LGPL-2.1-or-later
#include "cache/backing.h"

#include <unistd.h>

#include <cerrno>

namespace norefs::cache {

FdBacking::~FdBacking() {
  if (own_) close(fd_);
}

ssize_t FdBacking::read(const iovec* iov, int iovcnt, std::uint64_t offset) {
  ssize_t r = preadv(fd_, iov, iovcnt, static_cast<off_t>(offset));
  return r < 0 ? -errno : r;
}

}  // namespace norefs::cache
