// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/lib/guarded_main.h — the tools' main(): runs the tool's body and turns
// an exception that nothing below caught into a message on stderr and exit
// status 1, instead of std::terminate() and an abort with no word of what
// failed.  The bodies catch what they expect (and say more); this is the
// last resort, so that no exception escapes main().
#pragma once

#include <cstdio>
#include <exception>

namespace norefs::tools {

template <class Body>
int guarded_main(const char* tool, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: unknown exception\n", tool);
  }
  return 1;
}

}  // namespace norefs::tools
