// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/lib/backings.h — the backings that are not the product's: where the
// bytes of a tool's or a test's cached file come from.  The product's
// backing is cache::FdBacking (cache/backing.h); these serve the in-process
// tools (norefs_pread_scaling's memory backing, norefs_evict_race's content
// function) and the cache tests (tests/cache).  Library norefs_test_backings:
// it depends on norefs_cache only, so the cache tests link it without the
// tools.
//
//  - GeneratedBacking: a file whose bytes a function generates from the
//    offset, of a fixed size or of a size read at every read (a file that
//    the test grows and shrinks).  Nothing to set up, nothing to drift.
//  - ControlledBacking: a file whose bytes the test holds and changes
//    (BackingControl), with fault injection: a read count, an error for
//    every read, an error for reads that cover one page, and a gate that
//    holds reads after they copied.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "cache/backing.h"

namespace norefs::tools {

// Writes bytes [off, off+n) of the file to dst; off + n never passes the
// file's size.  Called from any thread, concurrently.
using FillFn = std::function<void(std::uint64_t off, std::byte* dst, std::size_t n)>;
using SizeFn = std::function<std::uint64_t()>;

// Copies [offset, size) into the iovecs, one fill() per iovec, like
// preadv(2): returns the bytes copied (short at the end of the file).
std::size_t fill_iov(const iovec* iov, int iovcnt, std::uint64_t offset, std::uint64_t size,
                     const FillFn& fill);

class GeneratedBacking final : public cache::Backing {
 public:
  GeneratedBacking(std::uint64_t size, FillFn fill);
  // The size is read once per read(), before the copy.
  GeneratedBacking(SizeFn size, FillFn fill);
  ssize_t read(const iovec* iov, int iovcnt, std::uint64_t offset) override;

 private:
  SizeFn size_;
  FillFn fill_;
};

// The backing file as a test sees it.  Shared by the test and the
// ControlledBacking the cache owns (which may outlive the test's last look).
struct BackingControl {
  using Bytes = std::vector<std::byte>;
  static constexpr std::uint64_t kNoPage = ~std::uint64_t{0};

  std::mutex mu;
  Bytes bytes;                // the file; its length is the file's size.  Guarded by mu
  std::atomic<int> error{0};  // returned by every read while nonzero (-EIO)
  // A read whose range covers this page fails with -EIO as a whole (a bad
  // sector under a bio); kNoPage: none.
  std::atomic<std::uint64_t> bad_page{kNoPage};
  std::atomic<std::uint64_t> reads{0};
  std::condition_variable cv;
  bool gate_closed = false;  // guarded by mu
  int gate_held = 0;         // reads waiting at the gate; guarded by mu

  void set_bytes(Bytes b);
  std::uint64_t size();
  // Bytes [off, off+len) clipped to `size` (the cache's i_size), as a read
  // of the file should return them; zeros past the end of `bytes`.
  Bytes expect(std::uint64_t off, std::size_t len, std::uint64_t size);
  // pwrite(): grows the file (zero gap) if it ends past the end.
  void write(std::uint64_t off, const Bytes& data);
  // ftruncate(): zero-fills when it grows.
  void resize(std::uint64_t size);
  // fallocate(PUNCH_HOLE | KEEP_SIZE).
  void zero(std::uint64_t off, std::uint64_t len);

  // Reads that start while the gate is closed copy their bytes, then wait
  // until it opens (a held fill carries the bytes of the moment it read).
  void close_gate();
  void open_gate();
  int held();  // reads waiting at the gate
};

class ControlledBacking final : public cache::Backing {
 public:
  explicit ControlledBacking(std::shared_ptr<BackingControl> c) : c_(std::move(c)) {}
  ssize_t read(const iovec* iov, int iovcnt, std::uint64_t offset) override;

 private:
  std::shared_ptr<BackingControl> c_;
};

}  // namespace norefs::tools
