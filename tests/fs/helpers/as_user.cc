// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/helpers/as_user.cc — norefs_fs_as_user: does one operation on a
// path of a mount as another user, for the permission tests.
//
//   norefs_fs_as_user <uid|-> <op> <path>
//     uid  switch to this uid (and gid, no supplementary groups) first;
//          "-" keeps the caller's (a control).
//     op   info | evict | prefetch   the control ioctls (fs/control.h)
//          read                      open O_RDONLY and read the file
//
// Prints "<op>: ok" or "<op>: <errno name>" and exits 0 on success, the
// errno value on failure, 100 on bad usage, 101 if the switch failed.
#include <fcntl.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fs/control.h"

namespace {

int finish(const char* op, int err) {
  if (err == 0) {
    std::printf("%s: ok\n", op);
  } else {
    const char* name = strerrorname_np(err);
    std::printf("%s: %s\n", op, name ? name : "?");
  }
  std::fflush(stdout);
  return err;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <uid|-> info|evict|prefetch|read <path>\n", argv[0]);
    return 100;
  }
  const std::string uid = argv[1], op = argv[2], path = argv[3];
  if (uid != "-") {
    char* end = nullptr;
    unsigned long id = std::strtoul(uid.c_str(), &end, 10);
    if (*end != '\0') return 100;
    if (setgroups(0, nullptr) != 0 || setgid(static_cast<gid_t>(id)) != 0 ||
        setuid(static_cast<uid_t>(id)) != 0) {
      std::perror("switching user");
      return 101;
    }
  }
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return finish("open", errno);
  int rc = 0;
  if (op == "info") {
    norefs_info info{};
    rc = ioctl(fd, NOREFS_IOC_INFO, &info);
  } else if (op == "evict") {
    norefs_evict ev{};
    rc = ioctl(fd, NOREFS_IOC_EVICT, &ev);
  } else if (op == "prefetch") {
    norefs_prefetch pf{};
    rc = ioctl(fd, NOREFS_IOC_PREFETCH, &pf);
  } else if (op == "read") {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
    }
    rc = n < 0 ? -1 : 0;
  } else {
    return 100;
  }
  int err = rc < 0 ? errno : 0;
  close(fd);
  return finish(op.c_str(), err);
}
