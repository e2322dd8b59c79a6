// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/stats_block.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

#include "alloc/page.h"

namespace norefs::alloc {
namespace {

constexpr std::size_t kSlotsOffset = sizeof(StatsHeader);
static_assert(kSlotsOffset % alignof(SlotCounters) == 0);

std::size_t block_bytes(std::size_t max_slots) {
  std::size_t bytes = kSlotsOffset + max_slots * sizeof(SlotCounters);
  return (bytes + kPageSize - 1) & ~(kPageSize - 1);
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace

StatsBlock::StatsBlock(const std::string& path, std::size_t max_slots)
    : path_(path), max_slots_(max_slots), bytes_(block_bytes(max_slots)) {
  void* mem;
  if (path.empty()) {
    mem = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw_errno("mmap stats block");
  } else {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw_errno("create stats block " + path);
    if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      int err = errno;
      close(fd);
      unlink(path.c_str());
      errno = err;
      throw_errno("size stats block " + path);
    }
    mem = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (mem == MAP_FAILED) {
      unlink(path.c_str());
      errno = err;
      throw_errno("mmap stats block " + path);
    }
  }
  // A fresh mapping is zero-filled: every counter starts at 0.
  header_ = new (mem) StatsHeader;
  slots_ = reinterpret_cast<SlotCounters*>(static_cast<char*>(mem) + kSlotsOffset);
  for (std::size_t i = 0; i < max_slots; i++) new (&slots_[i]) SlotCounters;
  auto& h = *header_;
  h.version.store(kStatsVersion, std::memory_order_relaxed);
  h.page_size.store(kPageSize, std::memory_order_relaxed);
  h.max_slots.store(max_slots, std::memory_order_relaxed);
  h.slots_offset.store(kSlotsOffset, std::memory_order_relaxed);
  h.pid.store(static_cast<std::uint64_t>(getpid()), std::memory_order_relaxed);
  // Release: a reader that sees the magic (acquire) sees the layout fields.
  h.magic.store(kStatsMagic, std::memory_order_release);
}

StatsBlock::~StatsBlock() {
  munmap(header_, bytes_);
  if (!path_.empty()) unlink(path_.c_str());
}

Counters StatsBlock::sum() const { return sum_counters(*header_, slots_); }

StatsReader::StatsReader(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("open stats block " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    throw_errno("stat stats block " + path);
  }
  bytes_ = static_cast<std::size_t>(st.st_size);
  if (bytes_ < sizeof(StatsHeader)) {
    close(fd);
    throw std::runtime_error(path + ": not a norefs stats block (too small)");
  }
  void* mem = mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (mem == MAP_FAILED) {
    errno = err;
    throw_errno("mmap stats block " + path);
  }
  header_ = static_cast<const StatsHeader*>(mem);
  const auto& h = *header_;
  std::uint64_t max_slots = h.max_slots.load(std::memory_order_relaxed);
  std::uint64_t offset = h.slots_offset.load(std::memory_order_relaxed);
  // Acquire pairs with the release store of the magic in StatsBlock().
  if (h.magic.load(std::memory_order_acquire) != kStatsMagic ||
      h.version.load(std::memory_order_relaxed) != kStatsVersion ||
      offset + max_slots * sizeof(SlotCounters) > bytes_) {
    munmap(mem, bytes_);
    throw std::runtime_error(path + ": not a norefs stats block of version " +
                             std::to_string(kStatsVersion));
  }
  slots_ = reinterpret_cast<const SlotCounters*>(static_cast<const char*>(mem) + offset);
}

StatsReader::~StatsReader() { munmap(const_cast<StatsHeader*>(header_), bytes_); }

Counters StatsReader::sum() const { return sum_counters(*header_, slots_); }
std::uint64_t StatsReader::waiting() const { return sum_waiting(*header_, slots_); }

// All loads relaxed: see "Writers and ordering" in the header.
std::uint64_t sum_waiting(const StatsHeader& h, const SlotCounters* slots) {
  std::uint64_t n = h.nslots.load(std::memory_order_relaxed), waiting = 0;
  for (std::uint64_t i = 0; i < n; i++) {
    waiting += slots[i].pending.load(std::memory_order_relaxed) +
               slots[i].inflight.load(std::memory_order_relaxed);
  }
  return waiting;
}

Counters sum_counters(const StatsHeader& h, const SlotCounters* slots) {
  auto rd = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
  Counters c;
  c.slots = rd(h.nslots);
  for (std::uint64_t i = 0; i < c.slots; i++) {
    const SlotCounters& s = slots[i];
    c.pending += rd(s.pending);
    c.inflight += rd(s.inflight);
    c.deferred += rd(s.deferred);
    c.freed_after_gp += rd(s.freed_after_gp);
    c.allocated += rd(s.allocated);
    c.immediate += rd(s.immediate);
    c.not_deferred += rd(s.not_deferred);
    c.threads += rd(s.in_use);
  }
  c.waiting = c.pending + c.inflight;
  c.peak_waiting = rd(h.peak_waiting);
  c.grace_periods = rd(h.grace_periods);
  c.expedites = rd(h.expedites);
  c.expedited_pages = rd(h.expedited_pages);
  c.gp_started = rd(h.gp_started);
  c.gp_completed = rd(h.gp_completed);
  c.check_violations = rd(h.check_violations);
  c.make_way_yields = rd(h.make_way_yields);
  c.arena_active_bytes = rd(h.arena_active_bytes);
  c.arena_resident_bytes = rd(h.arena_resident_bytes);
  c.config = rd(h.config);
  return c;
}

}  // namespace norefs::alloc
