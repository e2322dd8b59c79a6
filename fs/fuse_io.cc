// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/fuse_io.h"

#include <fuse_lowlevel.h>

#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fs/fuse_uring.h"

namespace norefs::fs {

namespace {

// Not in Debian 12's <linux/fuse.h> (7.38): bits of the 64-bit INIT flags
// above 31, i.e. bits of flags2.
// FUSE_DIRECT_IO_ALLOW_MMAP: protocol 7.39, bit 36.
constexpr std::uint64_t kDirectIoAllowMmap = 1ull << 36;
// FUSE_OVER_IO_URING: protocol 7.42, bit 41.
constexpr std::uint64_t kOverIoUring = 1ull << 41;
constexpr std::uint32_t flags2_bit(std::uint64_t flag) {
  return static_cast<std::uint32_t>(flag >> 32);
}

// Set by install_fuse_io() before the session loop starts; read-only after.
FuseIoOptions options;
std::uint32_t wanted2 = 0;  // the flags2 bits the INIT reply asks for

// The INIT exchange.  FUSE_INIT is the first request of a session and is
// answered before any other is read: the worker that reads it replies to it
// before it reads again, and no other worker reads before that (libfuse
// starts further workers only once a request is being processed, but all of
// them block in read() until the kernel has its INIT reply).  Still, these
// are atomics, since read() and writev() run on worker threads: release on
// the store of init_unique publishes offered2; acquire in writev pairs with
// it.  `patched` is a relaxed flag: once set, every later reply skips the
// check with one load.
std::atomic<std::uint64_t> init_unique{0};  // 0: no INIT seen yet
std::atomic<std::uint32_t> offered2{0};     // the kernel's flags2 (if FUSE_INIT_EXT)
std::atomic<bool> patched{false};

ssize_t io_read(int fd, void* buf, size_t len, void* /*userdata*/) {
  ssize_t n = read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + sizeof(fuse_init_in)) &&
      !patched.load(std::memory_order_relaxed)) {
    fuse_in_header in;
    std::memcpy(&in, buf, sizeof in);
    if (in.opcode == FUSE_INIT) {
      fuse_init_in arg;
      std::memcpy(&arg, static_cast<const char*>(buf) + sizeof in, sizeof arg);
      offered2.store((arg.flags & FUSE_INIT_EXT) ? arg.flags2 : 0, std::memory_order_relaxed);
      init_unique.store(in.unique, std::memory_order_release);  // publishes offered2
    }
  }
  return n;
}

// The largest request payload the kernel will put in a ring entry, from
// our INIT reply: fuse_uring_create() takes the largest of 8 KiB, max_write
// and max_pages pages (32 pages when the reply does not set FUSE_MAX_PAGES;
// the kernel only ever lowers max_pages).
std::size_t ring_payload(const fuse_init_out& arg) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t pages = 32;
  if (arg.flags & FUSE_MAX_PAGES) pages = std::max<std::size_t>(pages, arg.max_pages);
  return std::max({std::size_t{8192}, std::size_t{arg.max_write}, pages * page});
}

// The reply to FUSE_INIT: asks for the offered flags2 bits we want, writes
// it, then starts (or refuses) the io_uring queues.
ssize_t write_init_reply(int fd, struct iovec* iov, int count) {
  const std::uint32_t offered = offered2.load(std::memory_order_relaxed);
  const std::uint32_t ask = wanted2 & offered;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  fuse_init_out arg{};
  ssize_t n;
  if (out.error != 0 || ask == 0 || count > 8 ||
      iov[1].iov_len < offsetof(fuse_init_out, flags2) + sizeof(std::uint32_t)) {
    n = writev(fd, iov, count);
    if (count >= 2) std::memcpy(&arg, iov[1].iov_base, std::min(iov[1].iov_len, sizeof arg));
  } else {
    // A patched copy of libfuse's fuse_init_out; libfuse's own is left alone.
    const std::size_t len = std::min(iov[1].iov_len, sizeof arg);
    std::memcpy(&arg, iov[1].iov_base, len);
    arg.flags |= FUSE_INIT_EXT;
    arg.flags2 |= ask;
    struct iovec copy[8];
    for (int i = 0; i < count; i++) copy[i] = iov[i];
    copy[1].iov_base = &arg;
    copy[1].iov_len = len;
    n = writev(fd, copy, count);
  }
  if (options.uring) {
    if (n < 0) {
      options.uring->on_init_refused("the INIT reply could not be written");
    } else if (out.error != 0) {
      options.uring->on_init_refused("INIT was answered with an error");
    } else if (!(ask & flags2_bit(kOverIoUring))) {
      options.uring->on_init_refused(
          "the kernel's INIT did not offer FUSE_OVER_IO_URING (is "
          "/sys/module/fuse/parameters/enable_uring still Y?)");
    } else {
      // The kernel took the reply (fc->initialized is set when writev()
      // returns): the queues may register now.
      options.uring->on_init_replied(ring_payload(arg));
    }
  }
  return n;
}

ssize_t io_writev(int fd, struct iovec* iov, int count, void* /*userdata*/) {
  if (options.uring) {
    ssize_t written;
    if (options.uring->reply(iov, count, &written)) return written;
  }
  if (patched.load(std::memory_order_relaxed) || count < 2 ||
      iov[0].iov_len != sizeof(fuse_out_header)) {
    return writev(fd, iov, count);
  }
  const std::uint64_t want = init_unique.load(std::memory_order_acquire);
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  if (want == 0 || out.unique != want) return writev(fd, iov, count);
  patched.store(true, std::memory_order_relaxed);
  return write_init_reply(fd, iov, count);
}

}  // namespace

int install_fuse_io(fuse_session* se, const FuseIoOptions& opt) {
  options = opt;
  wanted2 = (opt.direct_io_allow_mmap ? flags2_bit(kDirectIoAllowMmap) : 0) |
            (opt.uring ? flags2_bit(kOverIoUring) : 0);
  static const fuse_custom_io io = {
      .writev = io_writev,
      .read = io_read,
      .splice_receive = nullptr,
      .splice_send = nullptr,
  };
  return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

}  // namespace norefs::fs
