// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/fuse_io.h"

#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace norefs::fs {

namespace {

// Not in Debian 12's <linux/fuse.h> (7.38): protocol 7.39, bit 36 of the
// 64-bit INIT flags, i.e. bit 4 of flags2.
constexpr std::uint64_t kDirectIoAllowMmap = 1ull << 36;
constexpr std::uint32_t kFlags2Bit = static_cast<std::uint32_t>(kDirectIoAllowMmap >> 32);

// The INIT exchange.  FUSE_INIT is the first request of a session and is
// answered before any other is read: the worker that reads it replies to it
// before it reads again, and no other worker reads before that (libfuse
// starts further workers only once a request is being processed, but all of
// them block in read() until the kernel has its INIT reply).  Still, these
// are atomics, since read() and writev() run on worker threads: release on
// the store of init_unique publishes offered; acquire in writev pairs with
// it.  `patched` is a relaxed flag: once set, every later reply skips the
// check with one load.
std::atomic<std::uint64_t> init_unique{0};  // 0: no INIT seen yet
std::atomic<bool> offered{false};
std::atomic<bool> patched{false};
std::atomic<bool> negotiated{false};

ssize_t io_read(int fd, void* buf, size_t len, void* /*userdata*/) {
  ssize_t n = read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + sizeof(fuse_init_in)) &&
      !patched.load(std::memory_order_relaxed)) {
    fuse_in_header in;
    std::memcpy(&in, buf, sizeof in);
    if (in.opcode == FUSE_INIT) {
      fuse_init_in arg;
      std::memcpy(&arg, static_cast<const char*>(buf) + sizeof in, sizeof arg);
      offered.store((arg.flags & FUSE_INIT_EXT) && (arg.flags2 & kFlags2Bit),
                    std::memory_order_relaxed);
      init_unique.store(in.unique, std::memory_order_release);  // publishes offered
    }
  }
  return n;
}

ssize_t io_writev(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  if (patched.load(std::memory_order_relaxed) || count < 2 ||
      iov[0].iov_len != sizeof(fuse_out_header)) {
    return writev(fd, iov, count);
  }
  const std::uint64_t want = init_unique.load(std::memory_order_acquire);
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  if (want == 0 || out.unique != want) return writev(fd, iov, count);
  patched.store(true, std::memory_order_relaxed);
  if (out.error != 0 || !offered.load(std::memory_order_relaxed) ||
      iov[1].iov_len < offsetof(fuse_init_out, flags2) + sizeof(std::uint32_t)) {
    return writev(fd, iov, count);
  }
  // A patched copy of libfuse's fuse_init_out; libfuse's own is left alone.
  fuse_init_out arg{};
  const std::size_t len = std::min(iov[1].iov_len, sizeof arg);
  std::memcpy(&arg, iov[1].iov_base, len);
  arg.flags |= FUSE_INIT_EXT;
  arg.flags2 |= kFlags2Bit;
  struct iovec copy[8];
  if (count > 8) return writev(fd, iov, count);
  for (int i = 0; i < count; i++) copy[i] = iov[i];
  copy[1].iov_base = &arg;
  copy[1].iov_len = len;
  ssize_t n = writev(fd, copy, count);
  if (n >= 0) negotiated.store(true, std::memory_order_relaxed);
  return n;
}

}  // namespace

int install_fuse_io(fuse_session* se) {
  static const fuse_custom_io io = {
      .writev = io_writev,
      .read = io_read,
      .splice_receive = nullptr,
      .splice_send = nullptr,
  };
  return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

bool direct_io_mmap_negotiated() { return negotiated.load(std::memory_order_relaxed); }

}  // namespace norefs::fs
