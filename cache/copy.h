// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/copy.h — copy_bytes(): how every read path copies bytes out of a
// cache page (and the floor of tools/bench/pread_scaling.h, which must copy the
// same way to be the limit of the paths it is compared with).
//
// Why not memcpy: the read paths copy at most a page, and the compiler,
// knowing that bound, expands memcpy inline as a head move, a tail move and
// `rep movsq` for the middle.  `rep movsq` takes tens of cycles to start,
// and a small read pays all of them: on 16-byte reads of one cached page,
// perf annotate put 29% of the fast path's samples on the instruction after
// it, and reads of 8 bytes or more cost 10 ns more than reads of 4 (the
// "step at 8 bytes").  Up to 32 bytes, copy_bytes() uses at most two pairs
// of overlapping loads and stores of the widest size that fits; above, it
// calls the C library's memcpy, which picks vector moves or `rep movsb` by
// size and CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace norefs::cache {

namespace detail {
// The C library's memcpy as an ordinary call: under another name the
// compiler does not know it as the builtin, so it neither expands nor
// inlines it.  (The sanitizers still intercept the symbol.)
extern "C" void* libc_memcpy(void* dst, const void* src, std::size_t n) __asm__("memcpy");

template <class T>
inline void move_pair(std::byte* dst, const std::byte* src, std::size_t n) {
  // Both loads before both stores: for n < 2 * sizeof(T) the two ranges
  // overlap, which is what makes one pair cover every n in [sizeof(T),
  // 2 * sizeof(T)].  (src and dst never overlap.)
  T head, tail;
  std::memcpy(&head, src, sizeof(T));
  std::memcpy(&tail, src + n - sizeof(T), sizeof(T));
  std::memcpy(dst, &head, sizeof(T));
  std::memcpy(dst + n - sizeof(T), &tail, sizeof(T));
}

struct Bytes16 {
  unsigned char b[16];
};
}  // namespace detail

// Copies n bytes; src and dst do not overlap.
inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n) {
  if (n <= 16) {
    if (n >= 8) {
      detail::move_pair<std::uint64_t>(dst, src, n);
    } else if (n >= 4) {
      detail::move_pair<std::uint32_t>(dst, src, n);
    } else if (n > 0) {
      // 1 to 3 bytes: first, middle and last (some the same byte).
      std::byte first = src[0], mid = src[n / 2], last = src[n - 1];
      dst[0] = first;
      dst[n / 2] = mid;
      dst[n - 1] = last;
    }
    return;
  }
  if (n <= 32) {
    detail::move_pair<detail::Bytes16>(dst, src, n);
    return;
  }
  detail::libc_memcpy(dst, src, n);
}

}  // namespace norefs::cache
