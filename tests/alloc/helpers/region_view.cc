// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_alloc_region_view FD OFFSET LEN — a separate process that maps the
// shared region of FD (inherited) the way a reader in another process does
// (SharedRegion::map_view), for tests/alloc/shared_region_test.cc.
//
// Prints "mapped 0x<base>" (or "error <errno>" and exits 3), then "perms
// <rwxp>" of the mapping as /proc/self/maps lists it, then "bytes <hex>"
// of LEN bytes at base + OFFSET.  Exit 0, or 2 (usage).
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "alloc/shared_region.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FD OFFSET LEN\n", argv[0]);
    return 2;
  }
  int fd = std::atoi(argv[1]);
  std::uint64_t off = std::strtoull(argv[2], nullptr, 0);
  std::size_t len = std::strtoull(argv[3], nullptr, 0);
  std::byte* base = norefs::alloc::SharedRegion::map_view(fd);
  if (!base) {
    std::printf("error %d\n", errno);
    return 3;
  }
  auto b = reinterpret_cast<std::uintptr_t>(base);
  std::printf("mapped 0x%" PRIxPTR "\n", b);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream is(line);
    std::string range, perms;
    is >> range >> perms;
    if (std::strtoull(range.c_str(), nullptr, 16) == b) std::printf("perms %s\n", perms.c_str());
  }
  std::printf("bytes ");
  for (std::size_t i = 0; i < len; i++) std::printf("%02x", static_cast<unsigned>(base[off + i]));
  std::printf("\n");
  norefs::alloc::SharedRegion::unmap_view(base);
  return 0;
}
