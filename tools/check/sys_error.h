// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/sys_error.h — a failed system call as an exception, for the
// checkers' setup code (making files, mapping buffers): the checked loads
// themselves count their failures instead.  One copy for the checkers, so
// that their library builds as one translation unit (tools/CMakeLists.txt).
#pragma once

#include <cerrno>
#include <string>
#include <system_error>

namespace norefs::tools {

// std::system_error with `err` (errno's value now, in the first form) and `what`.
[[noreturn]] inline void throw_errno(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}
[[noreturn]] inline void throw_errno(const std::string& what) { throw_errno(errno, what); }

}  // namespace norefs::tools
