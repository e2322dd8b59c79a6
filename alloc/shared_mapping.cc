// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/shared_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "alloc/page.h"

namespace norefs::alloc {
namespace {

[[noreturn]] void throw_errno(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

int open_trusted_dir(const std::string& dir, DirTrust trust, std::string* why) {
  why->clear();
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    struct stat st {};
    // O_NOFOLLOW | O_DIRECTORY on a symlink: ELOOP, or ENOTDIR.
    if ((err == ELOOP || err == ENOTDIR) && lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      *why = "is a symbolic link (refused: it could point anywhere)";
      err = ELOOP;
    } else {
      *why = std::generic_category().message(err);
    }
    errno = err;
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    *why = std::generic_category().message(err);
    close(fd);
    errno = err;
    return -1;
  }
  const uid_t euid = geteuid();
  const mode_t perm = st.st_mode & 07777;
  char mode[16];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(perm));
  if (trust == DirTrust::private_to_euid) {
    if (st.st_uid != euid) {
      *why = "is owned by uid " + std::to_string(st.st_uid) + ", not by the daemon's uid " +
             std::to_string(euid);
    } else if (perm & (S_IWGRP | S_IWOTH)) {
      *why = std::string("is writable by group or others (mode ") + mode + ")";
    }
  } else {
    if (st.st_uid != euid && st.st_uid != 0) {
      *why = "is owned by uid " + std::to_string(st.st_uid) + ", neither uid " +
             std::to_string(euid) + " nor root";
    } else if ((perm & (S_IWGRP | S_IWOTH)) && !(perm & S_ISVTX)) {
      *why =
          std::string("is writable by group or others without the sticky bit (mode ") + mode + ")";
    }
  }
  if (!why->empty()) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

SharedMapping SharedMapping::create(const std::string& path, std::size_t bytes,
                                    const std::string& what) {
  bytes = (bytes + kPageSize - 1) & ~(kPageSize - 1);
  if (path.empty()) {
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw_errno(errno, "mmap " + what);
    return SharedMapping(mem, bytes, path, -1);
  }
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty()) throw_errno(EISDIR, "create " + what + " " + path);
  std::string why;
  int dir_fd = open_trusted_dir(dir, DirTrust::safe, &why);
  if (dir_fd < 0) {
    throw std::system_error(errno, std::generic_category(),
                            "create " + what + " " + path + ": directory " + dir + " " + why);
  }
  // O_EXCL | O_NOFOLLOW: a name that exists, a symlink included, is an
  // error (EEXIST), never followed or reused.
  int fd = openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    close(dir_fd);
    throw_errno(err, "create " + what + " " + path);
  }
  void* mem = MAP_FAILED;
  int err = 0;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    err = errno;
  } else {
    mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) err = errno;
  }
  close(fd);
  if (mem == MAP_FAILED) {
    unlinkat(dir_fd, name.c_str(), 0);
    close(dir_fd);
    throw_errno(err, "map " + what + " " + path);
  }
  return SharedMapping(mem, bytes, path, dir_fd);
}

SharedMapping SharedMapping::open_readonly(const std::string& path, std::size_t min_bytes,
                                           const std::string& what) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(errno, "open " + what + " " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    throw_errno(err, "stat " + what + " " + path);
  }
  auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < min_bytes) {
    close(fd);
    throw std::runtime_error(path + ": not a norefs " + what + " (too small)");
  }
  void* mem = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (mem == MAP_FAILED) throw_errno(err, "map " + what + " " + path);
  return SharedMapping(mem, bytes, path, -1);
}

SharedMapping::SharedMapping(SharedMapping&& o) noexcept
    : mem_(std::exchange(o.mem_, nullptr)),
      bytes_(o.bytes_),
      path_(std::move(o.path_)),
      dir_fd_(std::exchange(o.dir_fd_, -1)) {}

SharedMapping::~SharedMapping() {
  if (!mem_) return;
  munmap(mem_, bytes_);
  if (dir_fd_ >= 0) {
    unlinkat(dir_fd_, path_.substr(path_.find_last_of('/') + 1).c_str(), 0);
    close(dir_fd_);
  }
}

}  // namespace norefs::alloc
