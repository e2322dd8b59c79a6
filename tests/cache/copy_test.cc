// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/copy.h: copy_bytes() copies exactly n bytes for every n a read
// path can ask for (0 to a page), at every alignment of source and
// destination, and writes nothing outside the n bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "alloc/page.h"
#include "cache/copy.h"

namespace norefs::cache {

using alloc::kPageSize;
namespace {

TEST(CopyBytes, EverySizeAndAlignmentExactlyTheBytes) {
  constexpr std::size_t kGuard = 64;
  std::vector<std::byte> src(kPageSize + 2 * kGuard), dst(kPageSize + 2 * kGuard);
  for (std::size_t i = 0; i < src.size(); i++)
    src[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  for (std::size_t n = 0; n <= kPageSize; n += (n < 300 ? 1 : 61)) {
    for (std::size_t s_off : {0u, 1u, 7u, 8u, 15u}) {
      for (std::size_t d_off : {0u, 3u, 8u, 17u}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xEE});
        copy_bytes(dst.data() + kGuard + d_off, src.data() + kGuard + s_off, n);
        for (std::size_t i = 0; i < dst.size(); i++) {
          const bool inside = i >= kGuard + d_off && i < kGuard + d_off + n;
          const std::byte want = inside ? src[i - d_off + s_off] : std::byte{0xEE};
          ASSERT_EQ(dst[i], want) << "n=" << n << " src+" << s_off << " dst+" << d_off << " byte "
                                  << i << (inside ? " (inside)" : " (outside)");
        }
      }
    }
  }
}

}  // namespace
}  // namespace norefs::cache
