// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/splitmix.h — splitmix64, shared by the checkers' content functions
// and random streams (evict_race, mount_race, partial_fault): the finalizer
// mix() is a bijection of 64-bit words, unmix() its inverse (so a checker can
// tell which file, version and offset a wrong word came from), splitmix() the
// generator.
#pragma once

#include <cstdint>

namespace norefs::tools::splitmix64 {

inline constexpr std::uint64_t kM1 = 0xbf58476d1ce4e5b9ULL, kM2 = 0x94d049bb133111ebULL;

// The inverse of an odd a, mod 2^64 (Newton: right to 3 bits, each step
// doubles them).
constexpr std::uint64_t inverse(std::uint64_t a) {
  std::uint64_t x = a;
  for (int i = 0; i < 5; i++) x *= 2 - a * x;
  return x;
}
inline constexpr std::uint64_t kM1inv = inverse(kM1), kM2inv = inverse(kM2);
static_assert(kM1 * kM1inv == 1 && kM2 * kM2inv == 1);

constexpr std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * kM1;
  z = (z ^ (z >> 27)) * kM2;
  return z ^ (z >> 31);
}

constexpr std::uint64_t unxorshift(std::uint64_t y, unsigned s) {
  std::uint64_t x = y;
  for (unsigned i = 0; i * s < 64; i++) x = y ^ (x >> s);
  return x;
}

constexpr std::uint64_t unmix(std::uint64_t z) {
  z = unxorshift(z, 31) * kM2inv;
  z = unxorshift(z, 27) * kM1inv;
  return unxorshift(z, 30);
}
static_assert(unmix(mix(0x0123456789abcdefULL)) == 0x0123456789abcdefULL);

inline std::uint64_t splitmix(std::uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  return mix(state);
}

}  // namespace norefs::tools::splitmix64
