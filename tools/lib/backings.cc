// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/lib/backings.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cache/config.h"

namespace norefs::tools {

std::size_t fill_iov(const iovec* iov, int iovcnt, std::uint64_t offset, std::uint64_t size,
                     const FillFn& fill) {
  std::size_t done = 0;
  for (int i = 0; i < iovcnt && offset < size; i++) {
    std::size_t n = std::min<std::uint64_t>(iov[i].iov_len, size - offset);
    fill(offset, static_cast<std::byte*>(iov[i].iov_base), n);
    offset += n;
    done += n;
  }
  return done;
}

GeneratedBacking::GeneratedBacking(std::uint64_t size, FillFn fill)
    : size_([size] { return size; }), fill_(std::move(fill)) {}

GeneratedBacking::GeneratedBacking(SizeFn size, FillFn fill)
    : size_(std::move(size)), fill_(std::move(fill)) {}

ssize_t GeneratedBacking::read(const iovec* iov, int iovcnt, std::uint64_t offset) {
  return static_cast<ssize_t>(fill_iov(iov, iovcnt, offset, size_(), fill_));
}

// ── BackingControl ──

void BackingControl::set_bytes(Bytes b) {
  std::lock_guard lk(mu);
  bytes = std::move(b);
}

std::uint64_t BackingControl::size() {
  std::lock_guard lk(mu);
  return bytes.size();
}

BackingControl::Bytes BackingControl::expect(std::uint64_t off, std::size_t len,
                                             std::uint64_t size) {
  std::lock_guard lk(mu);
  std::uint64_t end = std::min<std::uint64_t>(off + len, size);
  Bytes b(end > off ? end - off : 0, std::byte{0});
  for (std::uint64_t o = off; o < end && o < bytes.size();) {
    std::uint64_t n = std::min<std::uint64_t>(end, bytes.size()) - o;
    std::memcpy(b.data() + (o - off), bytes.data() + o, n);
    o += n;
  }
  return b;
}

void BackingControl::write(std::uint64_t off, const Bytes& data) {
  std::lock_guard lk(mu);
  if (off + data.size() > bytes.size()) bytes.resize(off + data.size());
  std::copy(data.begin(), data.end(), bytes.begin() + static_cast<std::ptrdiff_t>(off));
}

void BackingControl::resize(std::uint64_t size) {
  std::lock_guard lk(mu);
  bytes.resize(size);
}

void BackingControl::zero(std::uint64_t off, std::uint64_t len) {
  std::lock_guard lk(mu);
  for (std::uint64_t o = off; o < bytes.size() && o - off < len; o++) bytes[o] = std::byte{0};
}

void BackingControl::close_gate() {
  std::lock_guard lk(mu);
  gate_closed = true;
}

void BackingControl::open_gate() {
  {
    std::lock_guard lk(mu);
    gate_closed = false;
  }
  cv.notify_all();
}

int BackingControl::held() {
  std::lock_guard lk(mu);
  return gate_held;
}

// ── ControlledBacking ──

ssize_t ControlledBacking::read(const iovec* iov, int iovcnt, std::uint64_t offset) {
  // Relaxed: a count and injected values the test sets before the reads it
  // aims them at (ordered by the cache calls in between); no data hangs on them.
  c_->reads.fetch_add(1, std::memory_order_relaxed);
  if (int e = c_->error.load(std::memory_order_relaxed)) return e;
  std::uint64_t len = 0;
  for (int i = 0; i < iovcnt; i++) len += iov[i].iov_len;
  const std::uint64_t bad = c_->bad_page.load(std::memory_order_relaxed);
  if (bad != BackingControl::kNoPage && len > 0 && offset <= (bad + 1) * cache::kPageSize - 1 &&
      bad * cache::kPageSize < offset + len) {
    return -EIO;
  }
  std::unique_lock lk(c_->mu);
  const auto& bytes = c_->bytes;
  ssize_t n = static_cast<ssize_t>(fill_iov(iov, iovcnt, offset, bytes.size(),
                                            [&](std::uint64_t o, std::byte* dst, std::size_t k) {
                                              std::memcpy(dst, bytes.data() + o, k);
                                            }));
  if (c_->gate_closed) {
    c_->gate_held++;
    c_->cv.notify_all();
    c_->cv.wait(lk, [&] { return !c_->gate_closed; });
    c_->gate_held--;
    // An error injected while the read was held fails it (a slow I/O
    // that ends in an error).
    if (int e = c_->error.load(std::memory_order_relaxed)) return e;
  }
  return n;
}

}  // namespace norefs::tools
