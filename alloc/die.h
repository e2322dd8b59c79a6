// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/die.h — broken invariants abort loudly, with file and line.  For
// states the code must never reach (a bug), never for I/O or bad input,
// which are returned as errors.
#pragma once

#include <string>

namespace norefs {

[[noreturn]] void die(const char* file, int line, const std::string& msg);

}  // namespace norefs

#define NOREFS_DIE(msg) ::norefs::die(__FILE__, __LINE__, (msg))
#define NOREFS_CHECK(cond, msg)   \
  do {                            \
    if (!(cond)) NOREFS_DIE(msg); \
  } while (0)
