// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <random>
#include <string>
#include <system_error>

#include "alloc/die.h"

namespace norefs::alloc {
namespace {

// 2 MiB: what jemalloc aligns huge extents to.
constexpr std::size_t kGranule = std::size_t{2} << 20;
constexpr std::size_t kHeaderBytes = 4096;

[[noreturn]] void fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), "shared region: " + what);
}

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Maps `bytes` of `fd` at a free slot of the band, or wherever the kernel
// puts it once every slot was tried.  The first slot tried is random, so
// that two daemons, or two caches of one process, rarely try the same.
void* map_in_band(int fd, std::size_t bytes) {
  const std::size_t span = SharedRegion::kBandHigh - SharedRegion::kBandLow;
  if (bytes <= span) {
    const std::size_t slots = span / bytes;
    std::size_t first = std::random_device{}() % slots;
    for (std::size_t i = 0; i < slots; i++) {
      // An address for mmap() to map at, not a pointer to an object.
      // NOLINTNEXTLINE(performance-no-int-to-ptr)
      auto* want = reinterpret_cast<void*>(SharedRegion::kBandLow + ((first + i) % slots) * bytes);
      void* p = mmap(want, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
      if (p == want) return p;
      if (p != MAP_FAILED) munmap(p, bytes);  // a kernel without NOREPLACE took it as a hint
      if (errno != EEXIST && errno != EINVAL && errno != ENOMEM) break;
    }
  }
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

}  // namespace

SharedRegion::SharedRegion(std::size_t bytes) : bytes_(round_up(bytes + kHeaderBytes, kGranule)) {
  fd_ = memfd_create("norefs-cache", MFD_CLOEXEC);
  if (fd_ < 0) fail("memfd_create");
  if (ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
    int e = errno;
    close(fd_);
    errno = e;
    fail("ftruncate to " + std::to_string(bytes_) + " bytes");
  }
  void* p = map_in_band(fd_, bytes_);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd_);
    errno = e;
    fail("mmap of " + std::to_string(bytes_) + " bytes");
  }
  base_ = static_cast<std::byte*>(p);
  new (base_)
      Header{Header::kMagic, Header::kVersion, reinterpret_cast<std::uintptr_t>(base_), bytes_};
  next_ = kHeaderBytes;
}

SharedRegion::~SharedRegion() {
  munmap(base_, bytes_);
  close(fd_);
}

void* SharedRegion::carve(std::size_t size, std::size_t align) {
  NOREFS_CHECK(align >= kHeaderBytes && (align & (align - 1)) == 0,
               "SharedRegion::carve: alignment must be a power of two >= 4 KiB");
  std::lock_guard lk(mu_);
  // Aligned as an address, not as an offset: the kernel's fallback
  // address is only page aligned.
  auto b = reinterpret_cast<std::uintptr_t>(base_);
  std::size_t at = round_up(b + next_, align) - b;
  if (at > bytes_ || size > bytes_ - at) return nullptr;
  next_ = at + size;
  return base_ + at;
}

bool SharedRegion::give_back(void* p, std::size_t len) {
  NOREFS_CHECK(contains(p, len), "SharedRegion::give_back outside the region");
  return fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                   static_cast<off_t>(offset_of(p)), static_cast<off_t>(len)) == 0;
}

std::byte* SharedRegion::map_view(int fd) {
  Header h{};
  if (pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) {
    if (errno == 0) errno = EINVAL;
    return nullptr;
  }
  if (h.magic != Header::kMagic || h.version != Header::kVersion || h.bytes == 0 ||
      h.base % kHeaderBytes != 0) {
    errno = EINVAL;
    return nullptr;
  }
  // The creator's address, for mmap() to map at (not a pointer to an object).
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  auto* want = reinterpret_cast<void*>(static_cast<std::uintptr_t>(h.base));
  void* p = mmap(want, h.bytes, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  if (p != want) {  // a kernel without NOREPLACE took the address as a hint
    munmap(p, h.bytes);
    errno = EEXIST;
    return nullptr;
  }
  return static_cast<std::byte*>(p);
}

void SharedRegion::unmap_view(std::byte* base) {
  if (!base) return;
  const auto* h = reinterpret_cast<const Header*>(base);
  munmap(base, h->bytes);
}

}  // namespace norefs::alloc
