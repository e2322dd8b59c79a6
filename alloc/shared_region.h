// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/shared_region.h — the memory other processes may map: one memfd,
// mapped MAP_SHARED at one address, from which the page arena's extent
// hooks (page_arena.cc) carve everything a lockless reader follows: page
// data, page descriptors, the page index's nodes and each file's
// fast-path state (cache/shared_file.h).  Locks, LRU heads, inodes and
// strings stay in the creator's heap.
//
// Addresses.  Every pointer stored in the region points into the region, so
// a process that maps it at the creator's address follows them unchanged
// (docs/design.md, "The shared region": why not offsets, measured).  The
// creator asks for an address in a band that no process here uses on its
// own, [kBandLow, kBandHigh), slot by slot (MAP_FIXED_NOREPLACE), so that a
// reader can map the same range too; if the band is full it takes what the
// kernel gives.  The band also lies in the application ranges of both
// sanitizers (ASan's high memory, TSan's "modules" range), so the test
// builds map it the same way.
//
// Memory back to the kernel.  On a shared mapping MADV_DONTNEED only drops
// the page-table entries; the memfd keeps the pages.  give_back() punches
// the range out of the memfd (fallocate(FALLOC_FL_PUNCH_HOLE)), which frees
// them and makes the range read as zeros.
//
// Carving.  carve() hands out address ranges once, in increasing order (a
// bump pointer under a mutex).  jemalloc never gives an extent back to it
// (the dalloc hook opts out, page_arena.cc): it keeps them retained and
// reuses them, so the region needs as much address space as the arena's
// peak plus jemalloc's growth slack, never more over time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace norefs::alloc {

class SharedRegion {
 public:
  // The region's first page: what a reader checks before it trusts the rest.
  struct Header {
    static constexpr std::uint64_t kMagic = 0x6e6f726566737267ULL;  // "norefsrg"
    static constexpr std::uint64_t kVersion = 1;
    std::uint64_t magic;
    std::uint64_t version;
    std::uint64_t base;  // the address every pointer in the region assumes
    std::uint64_t bytes;
  };
  static constexpr std::uintptr_t kBandLow = 0x7e8000000000;
  static constexpr std::uintptr_t kBandHigh = 0x7ec000000000;

  // A memfd of `bytes` (rounded up to 2 MiB), mapped read-write.  Throws
  // std::system_error naming what failed.
  explicit SharedRegion(std::size_t bytes);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* base() const { return base_; }
  std::size_t size() const { return bytes_; }
  // The memfd (O_CLOEXEC), for a reader to map.
  int fd() const { return fd_; }
  bool contains(const void* p, std::size_t n = 1) const {
    auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(base_);
    return a >= b && n <= bytes_ && a - b <= bytes_ - n;
  }
  std::uint64_t offset_of(const void* p) const {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_);
  }

  // `size` bytes aligned to `align` (a power of two, at least 4 KiB), never
  // handed out before; nullptr when the region is full.  Thread-safe.
  void* carve(std::size_t size, std::size_t align);
  // Frees the memory of [p, p+len) (page aligned, inside the region): it
  // reads as zeros afterwards and costs nothing until written.  False (errno
  // set) if the kernel refused.
  bool give_back(void* p, std::size_t len);

  // A reader's view: maps the region of `fd` read-only at the address its
  // header names (MAP_FIXED_NOREPLACE), checks the header, and returns the
  // base, or nullptr with errno set: EEXIST (that address is taken here),
  // EINVAL (not a norefs region: bad magic or version), or mmap's.  Unmap
  // with unmap_view().
  static std::byte* map_view(int fd);
  static void unmap_view(std::byte* base);

 private:
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  int fd_ = -1;
  std::mutex mu_;
  std::size_t next_ = 0;  // guarded by mu_: the first byte never carved
};

}  // namespace norefs::alloc
