// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/cache/pattern.h — the content of the cache tests' files: word w of
// file f at generation g is pattern_word(f, w, g), so a wrong byte read back
// says whose it is.  Shared by the tests (cache_test_util.h) and their
// helper processes (tests/cache/helpers/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace norefs::cache::test {

inline constexpr std::uint64_t pattern_word(std::uint32_t file, std::uint64_t word,
                                            std::uint32_t gen) {
  return (std::uint64_t{file} << 56) | (std::uint64_t{gen & 0xffffff} << 32) | (word & 0xffffffffu);
}

inline std::byte pattern_byte(std::uint32_t file, std::uint64_t off, std::uint32_t gen) {
  return static_cast<std::byte>(pattern_word(file, off / 8, gen) >> (8 * (off % 8)));
}

}  // namespace norefs::cache::test
