// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cache/shared_file.h — what the fast path reads of one file: its size and
// its page index.  It lives in the shared region (alloc/shared_region.h),
// allocated through the page pool's SharedAlloc, so that a reader in
// another process that maps the region runs the same fast path
// (cache/fast_path.h) on the same bytes.  Everything else of a file (its
// lock, backing, readahead state, generation counter) stays in
// CachedFile, in the daemon's heap.
//
// Writers and orderings are CachedFile's (the protocol: read_loop.h).
// Lifetime: the CachedFile's.  A reader, in this process or another, uses a
// SharedFile only while it holds an open handle of the file (for another
// process: an open file of the mount, whose FUSE handle keeps the
// CachedFile), as the protocol's "no handle, no reader" rule requires.
#pragma once

#include <atomic>
#include <cstdint>

#include "cache/page_index.h"

namespace norefs::cache {

struct SharedFile {
  SharedFile(alloc::SharedAlloc heap, std::uint64_t isize) : size(isize), index(heap) {}

  // i_size.  Stored (release) under CachedFile::mu_; loaded acquire by
  // readers (read_loop.h, "Size").
  std::atomic<std::uint64_t> size;
  PageIndex index;
};

}  // namespace norefs::cache
