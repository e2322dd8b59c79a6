// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/sys.h — small system helpers of the daemon, below everything else in
// fs/ (Filesystem and the operation files use them).
#pragma once

#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace norefs::fs {

// "/proc/self/fd/N": reopens, or reaches with a path-only call, exactly the
// inode an O_PATH fd holds, with no path walk through the backing tree.
struct ProcPath {
  explicit ProcPath(int fd) { std::snprintf(buf, sizeof buf, "/proc/self/fd/%d", fd); }
  const char* c_str() const { return buf; }
  char buf[32];
};

inline std::int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// errno of the last failed call, never 0 (a call that failed without
// setting it is reported as EIO).
inline int last_errno() {
  const int e = errno;
  return e ? e : EIO;
}

}  // namespace norefs::fs
