// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/die.h"

#include <cstdio>
#include <cstdlib>

namespace norefs {

void die(const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "norefs: %s:%d: %s\n", file, line, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace norefs
