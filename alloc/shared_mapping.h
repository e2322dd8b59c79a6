// SPDX-License-Identifier: LGPL-2.1-or-later
//
// alloc/shared_mapping.h — a MAP_SHARED region for counters that another
// process reads live (alloc/stats_block.h, cache/cache_stats.h).
#pragma once

#include <cstddef>
#include <string>

namespace norefs::alloc {

class SharedMapping {
 public:
  // Writable, zero-filled, `bytes` rounded up to pages.  Anonymous when
  // `path` is empty; else creates `path` (mode 0600, O_EXCL), unlinked by the
  // destructor.  Throws std::system_error naming `what` and the path.
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
  SharedMapping(void* mem, std::size_t bytes, std::string path, bool owner)
      : mem_(mem), bytes_(bytes), path_(std::move(path)), owner_(owner) {}
  void* mem_;
  std::size_t bytes_;
  std::string path_;
  bool owner_;  // unlink path_ on destruction
};

}  // namespace norefs::alloc
