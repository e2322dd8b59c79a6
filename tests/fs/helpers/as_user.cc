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
//          append                    open O_WRONLY|O_APPEND, write one byte
//          fallocate | punch | zero  open O_RDWR, fallocate the first 4 KiB
//                                    (mode 0, PUNCH_HOLE, ZERO_RANGE; the
//                                    last two with KEEP_SIZE)
//          exec                      run the file (no arguments) and wait
//          setcap                    set a security.capability xattr on it
//
// Prints "<op>: ok" or "<op>: <errno name>" and exits 0 on success, the
// errno value on failure, 100 on bad usage, 101 if the switch failed.
#include <fcntl.h>
#include <grp.h>
#include <linux/falloc.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fs/control.h"

extern char** environ;

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
    std::fprintf(
        stderr,
        "usage: %s <uid|-> info|evict|prefetch|read|append|fallocate|punch|zero|exec|setcap "
        "<path>\n",
        argv[0]);
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
  if (op == "setcap") {
    const unsigned cap[5] = {0x02000000, 1u << 13, 0, 0, 0};  // vfs_cap_data, CAP_NET_RAW
    int rc = setxattr(path.c_str(), "security.capability", cap, sizeof cap, 0);
    return finish("setcap", rc == 0 ? 0 : errno);
  }
  if (op == "exec") {
    char* args[] = {argv[3], nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, path.c_str(), nullptr, nullptr, args, environ);
    if (rc != 0) return finish("exec", rc);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return finish("exec", errno);
    return finish("exec", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : ECHILD);
  }
  int flags = O_RDONLY;
  if (op == "append") flags = O_WRONLY | O_APPEND;
  if (op == "fallocate" || op == "punch" || op == "zero") flags = O_RDWR;
  int fd = open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return finish("open", errno);
  int rc = 0;
  if (op == "append") {
    rc = write(fd, "+", 1) == 1 ? 0 : -1;
  } else if (op == "fallocate") {
    rc = fallocate(fd, 0, 0, 4096);
  } else if (op == "punch") {
    rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096);
  } else if (op == "zero") {
    rc = fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, 4096);
  } else if (op == "info") {
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
