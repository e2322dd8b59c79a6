// SPDX-License-Identifier: LGPL-2.1-or-later
#include "alloc/shared_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

SharedMapping SharedMapping::create(const std::string& path, std::size_t bytes,
                                    const std::string& what) {
  bytes = (bytes + kPageSize - 1) & ~(kPageSize - 1);
  if (path.empty()) {
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw_errno(errno, "mmap " + what);
    return SharedMapping(mem, bytes, path, false);
  }
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw_errno(errno, "create " + what + " " + path);
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
    unlink(path.c_str());
    throw_errno(err, "map " + what + " " + path);
  }
  return SharedMapping(mem, bytes, path, true);
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
  return SharedMapping(mem, bytes, path, false);
}

SharedMapping::SharedMapping(SharedMapping&& o) noexcept
    : mem_(std::exchange(o.mem_, nullptr)),
      bytes_(o.bytes_),
      path_(std::move(o.path_)),
      owner_(std::exchange(o.owner_, false)) {}

SharedMapping::~SharedMapping() {
  if (!mem_) return;
  munmap(mem_, bytes_);
  if (owner_) unlink(path_.c_str());
}

}  // namespace norefs::alloc
