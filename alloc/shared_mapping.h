// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/shared_mapping.h — a MAP_SHARED region for counters that another
// process reads live (alloc/stats_block.h, cache/cache_stats.h).
#pragma once

#include <cstddef>
#include <string>

namespace norefs::alloc {

// How much a directory that will hold counter files must be trusted.
enum class DirTrust {
  // Owned by the effective uid or root; writable by group or others only
  // with the sticky bit (/tmp, /dev/shm): nobody else can remove, rename or
  // replace a file we create there.  What SharedMapping::create() requires.
  safe,
  // Owned by the effective uid and writable by nobody else: what the
  // daemon's stats_dir must be (docs/faults.md, "The stats directory").
  private_to_euid,
};

// Opens `dir` (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC: a symlink is
// refused, not followed) and checks it against `trust` on the open
// descriptor.  Returns the descriptor, or -1 with the reason in `*why`
// ("is a symbolic link", "is owned by uid 65534, not by uid 0", "is
// writable by group or others (mode 0777)", or strerror) and errno set
// (ELOOP for a symlink, EPERM for an owner or mode refused, else open's).
int open_trusted_dir(const std::string& dir, DirTrust trust, std::string* why);

class SharedMapping {
 public:
  // Writable, zero-filled, `bytes` rounded up to pages.  Anonymous when
  // `path` is empty; else creates `path` (mode 0600) with O_CREAT | O_EXCL |
  // O_NOFOLLOW relative to its directory, opened and checked with
  // open_trusted_dir(DirTrust::safe) (a symlink planted at `path` is never
  // followed); the destructor unlinks it relative to that same directory.
  // Throws std::system_error naming `what` and the path.
  static SharedMapping create(const std::string& path, std::size_t bytes, const std::string& what);
  // Read-only view of an existing file; throws std::system_error, or
  // std::runtime_error if it is smaller than `min_bytes`.
  static SharedMapping open_readonly(const std::string& path, std::size_t min_bytes,
                                     const std::string& what);

  SharedMapping(SharedMapping&& o) noexcept;
  SharedMapping& operator=(SharedMapping&&) = delete;
  SharedMapping(const SharedMapping&) = delete;
  ~SharedMapping();

  void* data() const { return mem_; }
  std::size_t size() const { return bytes_; }
  const std::string& path() const { return path_; }

 private:
  SharedMapping(void* mem, std::size_t bytes, std::string path, int dir_fd)
      : mem_(mem), bytes_(bytes), path_(std::move(path)), dir_fd_(dir_fd) {}
  void* mem_;
  std::size_t bytes_;
  std::string path_;
  int dir_fd_;  // >= 0: we created path_ in this directory; unlinked and closed on destruction
};

}  // namespace norefs::alloc
