// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/counter_block.h"

#include <unistd.h>

#include <stdexcept>

namespace norefs::alloc::detail {

void publish_block(BlockHeader& b, const BlockShape& shape, std::size_t max_slots) {
  b.version.store(shape.version, std::memory_order_relaxed);
  b.slot_size.store(shape.slot_size, std::memory_order_relaxed);
  b.max_slots.store(max_slots, std::memory_order_relaxed);
  b.slots_offset.store(shape.header_size, std::memory_order_relaxed);
  b.pid.store(static_cast<std::uint64_t>(getpid()), std::memory_order_relaxed);
  // Release: a reader that sees the magic (acquire, check_block()) sees the
  // fields above and the owner's, written before this call.
  b.magic.store(shape.magic, std::memory_order_release);
}

std::size_t check_block(const SharedMapping& map, const BlockShape& shape,
                        const std::string& path) {
  // open_readonly() made sure the file holds at least a header.
  const auto& b = *static_cast<const BlockHeader*>(map.data());
  // Acquire pairs with the release store of the magic in publish_block().
  bool ok = b.magic.load(std::memory_order_acquire) == shape.magic &&
            b.version.load(std::memory_order_relaxed) == shape.version &&
            b.slot_size.load(std::memory_order_relaxed) == shape.slot_size;
  std::uint64_t offset = b.slots_offset.load(std::memory_order_relaxed);
  std::uint64_t max_slots = b.max_slots.load(std::memory_order_relaxed);
  if (!ok || offset < shape.header_size || offset % shape.slot_align != 0 || offset > map.size() ||
      max_slots > (map.size() - offset) / shape.slot_size) {
    throw std::runtime_error(path + ": not a norefs " + shape.what + " of version " +
                             std::to_string(shape.version));
  }
  return offset;
}

}  // namespace norefs::alloc::detail
