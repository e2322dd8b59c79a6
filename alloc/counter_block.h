// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/counter_block.h — per-thread counters in one shared mapping, written
// by one process, read live by any.  The pool's (alloc/stats_block.h) and
// the cache's (cache/cache_stats.h) are both this template.
//
// Layout, every field a native-endian, lock-free std::atomic<uint64_t>:
//   offset 0:             Header, whose first member is a BlockHeader
//   offset slots_offset:  max_slots Slots; readers sum [0, nslots)
// A Header type names its kind: `static constexpr std::uint64_t kMagic,
// kVersion` and `static constexpr const char* kWhat` (for messages).  A
// change of the Header's or the Slot's layout or meaning bumps kVersion.
//
// Writer (CounterBlock): creates the mapping (anonymous, or a 0600 file
// created O_EXCL and unlinked by the destructor), constructs the header and
// every slot (a fresh mapping is zero-filled: every counter starts at 0),
// lets the owner fill its own header fields, fills the BlockHeader, and
// stores the magic last with release.  A reader that loads the magic with
// acquire and finds it therefore sees every field written before it.
//
// Reader (CounterBlockReader): maps the file read-only and refuses (throws
// std::runtime_error) a file without the magic, of another version, with
// another slot size, or too short for its slots.  Readers never write, so
// a reader cannot disturb the writer, and may sum as often as it likes
// (every 2 ms is cheap) without taking any lock a writer takes.
//
// Writers and ordering: each counter has one writer at a time (a slot's
// owner thread, or whoever holds the lock the owner says guards it), which
// updates it with counter_add()/counter_sub(): relaxed load + relaxed store,
// no RMW and no line shared between threads on the fast path.  Relaxed is
// enough because the values carry no pointers: a reader wants each number,
// not an order between them.  A sum over slots is not a snapshot: it may lag
// by what moves while it reads; after quiescence it is exact.  Counters with
// several writers (rare events) use a relaxed fetch_add and say so.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>

#include "alloc/shared_mapping.h"

namespace norefs::alloc {

using Counter = std::atomic<std::uint64_t>;
static_assert(Counter::is_always_lock_free, "counters are read from another process");

// Relaxed single-writer update: see "Writers and ordering" above.
inline void counter_add(Counter& c, std::uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline void counter_sub(Counter& c, std::uint64_t n) {
  c.store(c.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
}

// The fields every block starts with.  One cache line.
struct alignas(64) BlockHeader {
  Counter magic;         // the kind's kMagic, stored last (release)
  Counter version;       // the kind's kVersion
  Counter slot_size;     // sizeof(Slot) of the writer
  Counter max_slots;     // slots in the mapping
  Counter slots_offset;  // byte offset of slot 0
  Counter nslots;        // slots handed out so far (SlotRegistry): readers sum [0, nslots)
  Counter pid;           // the writer's
};

// The parts of the template that do not depend on its types (counter_block.cc).
namespace detail {
struct BlockShape {
  std::uint64_t magic, version;
  std::size_t header_size, slot_size, slot_align;
  const char* what;
};
// Fills `b` (every field but nslots), then stores the magic with release.
void publish_block(BlockHeader& b, const BlockShape& shape, std::size_t max_slots);
// The reader's checks; returns slots_offset or throws std::runtime_error.
std::size_t check_block(const SharedMapping& map, const BlockShape& shape, const std::string& path);
template <class Header, class Slot>
constexpr BlockShape shape_of() {
  return {Header::kMagic, Header::kVersion, sizeof(Header),
          sizeof(Slot),   alignof(Slot),    Header::kWhat};
}
}  // namespace detail

template <class Header, class Slot>
class CounterBlock {
  static_assert(std::is_standard_layout_v<Header> && offsetof(Header, block) == 0,
                "a Header starts with its BlockHeader");
  static_assert(sizeof(Header) % alignof(Slot) == 0);

 public:
  static constexpr std::size_t kSlotsOffset = sizeof(Header);

  // `init` fills the owner's own header fields before the magic is stored.
  // Throws std::system_error if the mapping cannot be made.
  template <class Init>
  CounterBlock(const std::string& path, std::size_t max_slots, Init init)
      : map_(SharedMapping::create(path, kSlotsOffset + max_slots * sizeof(Slot), Header::kWhat)),
        max_slots_(max_slots) {
    void* mem = map_.data();
    header_ = new (mem) Header;
    slots_ = reinterpret_cast<Slot*>(static_cast<char*>(mem) + kSlotsOffset);
    for (std::size_t i = 0; i < max_slots; i++) new (&slots_[i]) Slot;
    init(*header_);
    detail::publish_block(header_->block, detail::shape_of<Header, Slot>(), max_slots);
  }
  CounterBlock(const CounterBlock&) = delete;
  CounterBlock& operator=(const CounterBlock&) = delete;

  Header& header() { return *header_; }
  const Header& header() const { return *header_; }
  Slot& slot(std::size_t i) { return slots_[i]; }
  const Slot* slots() const { return slots_; }
  std::size_t max_slots() const { return max_slots_; }
  // Where the SlotRegistry publishes how many slots it handed out.
  Counter& nslots() { return header_->block.nslots; }
  const std::string& path() const { return map_.path(); }

 private:
  SharedMapping map_;
  std::size_t max_slots_;
  Header* header_;
  Slot* slots_;
};

template <class Header, class Slot>
class CounterBlockReader {
 public:
  // Throws std::system_error (open/mmap) or std::runtime_error (not a block
  // of this kind and version).
  explicit CounterBlockReader(const std::string& path)
      : map_(SharedMapping::open_readonly(path, sizeof(Header), Header::kWhat)) {
    std::size_t offset = detail::check_block(map_, detail::shape_of<Header, Slot>(), path);
    header_ = static_cast<const Header*>(map_.data());
    slots_ = reinterpret_cast<const Slot*>(static_cast<const char*>(map_.data()) + offset);
  }
  CounterBlockReader(const CounterBlockReader&) = delete;
  CounterBlockReader& operator=(const CounterBlockReader&) = delete;

  const Header& header() const { return *header_; }
  const Slot* slots() const { return slots_; }

 private:
  SharedMapping map_;
  const Header* header_;
  const Slot* slots_;
};

}  // namespace norefs::alloc
