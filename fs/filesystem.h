// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/filesystem.h — the daemon's state and its low-level operations table.
//
// Shape (libfuse example/passthrough_hp.cc): each callback sfs_<op> calls a
// do_<op> that either sends the one reply itself and returns 0, or returns
// an errno that the wrapper (reply_errno(), fs/ops_common.h) sends.  No
// exception crosses into libfuse (bad_alloc -> ENOMEM).  Locks are dropped
// before replying.
//
// Files are split by topic: ops_entry.cc (names and attributes), ops_dir.cc
// (directories, xattrs, statfs), ops_file.cc (open, read, write and the
// other data operations), control.cc (ioctl, fs/control.h).
#pragma once

#include <fuse_lowlevel.h>

#include <dirent.h>

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "cache/page_cache.h"
#include "fs/inode.h"
#include "fs/options.h"
#include "fs/sys.h"

namespace norefs::fs {

class HandleBacking;  // fs/backing_fd.h

// Something fi->fh points to; tracked so that teardown can drop what the
// kernel never released (a daemon stopped by a signal with files open).
struct Handle {
  virtual ~Handle() = default;
};

// An open regular file.
struct OpenFile final : Handle {
  OpenFile(int fd_, int flags_, Inode* inode_, bool kernel_paged_)
      : fd(fd_), flags(flags_), inode(inode_), kernel_paged(kernel_paged_) {}
  ~OpenFile() override;
  const int fd;     // the backing file, opened with the client's access mode and flags
  const int flags;  // as opened (O_APPEND decides where writes go)
  Inode* const inode;
  // Opened without direct_io: the kernel's page cache serves this handle's
  // reads and takes its writes (ops_file.cc, "Opening").
  const bool kernel_paged;
  // The cache's backing descriptor, activated for this handle (fs/backing_fd.h):
  // the destructor deactivates it.  Null when the file is served uncached.
  HandleBacking* backing = nullptr;
  // Per-handle readahead state over the inode's CachedFile; empty when the
  // file is served uncached (cache=off, or its read-only fd failed).
  std::optional<cache::FileHandle> ch;
};

// An open directory (passthrough_hp's DirHandle).
struct DirHandle final : Handle {
  explicit DirHandle(DIR* dp_) : dp(dp_) {}
  ~DirHandle() override;
  DIR* const dp;
  off_t offset = 0;                // telldir() cookie of the next entry
  struct dirent* entry = nullptr;  // read but not yet sent
};

class Filesystem {
 public:
  // Takes ownership of `root_fd` (O_PATH of the backing directory).
  Filesystem(const Options& opts, int root_fd, const struct stat& root_st);
  ~Filesystem();
  Filesystem(const Filesystem&) = delete;
  Filesystem& operator=(const Filesystem&) = delete;

  // Creates the page cache and its stats files (alloc.<pid>, cache.<pid> in
  // stats_dir).  After daemonizing: the cache starts threads, and the files
  // are named after the daemon's pid.  Throws std::exception.
  void start_cache();
  // After the session loop has returned (no worker thread left): drops
  // every handle the kernel did not release, every inode and so every
  // CachedFile, then the cache (drains every page, removes the stats
  // files).  Aborts (PagePool) if a page leaked.
  void teardown();

  const Options& opts() const { return opts_; }
  InodeTable& inodes() { return inodes_; }
  cache::PageCache& cache() { return *cache_; }
  bool caching() const { return opts_.cache; }
  double timeout() const { return opts_.coherence_timeout; }

  void track(Handle* h);
  void untrack(Handle* h);

  // The session, for notifications to the kernel (set once, before the
  // loop starts).
  void set_session(fuse_session* se) { se_ = se; }
  fuse_session* session() const { return se_; }
  // Whether the kernel leaves the umask to us (FUSE_CAP_DONT_MASK, set at
  // INIT, before any request): creates then apply the request's umask
  // themselves, so that a default ACL on the parent replaces it as on a
  // local filesystem (fs/credentials.h, CallerUmask).
  bool dont_mask() const { return dont_mask_; }
  void set_dont_mask(bool on) { dont_mask_ = on; }

  // ── Coherence (close-to-open) ── Context for all: in.writer_mu held.
  // For an open of a regular file, if caching is on: makes in.cached exist
  // and its backing descriptor open for one more handle (HandleBacking::
  // activate(); the handle's release deactivates it), then does
  // check_locked().  Returns true if the kernel's own cache of the file
  // must be dropped too (the file changed, or its CachedFile is new).
  // `*err`: the errno if the descriptor could not be reopened (EMFILE...):
  // the open fails.
  bool attach_and_check_locked(Inode& in, int* err);
  // If in.cached exists: compares the backing file with in.stamp; if it
  // changed from outside, drops every cached page and takes the new size
  // (PageCache::invalidate + set_size).  Returns true if it changed.
  bool check_locked(Inode& in);
  // Re-reads in.stamp after one of our own changes.
  void restamp_locked(Inode& in);

  static const fuse_lowlevel_ops& operations();

 private:
  bool compare_locked(Inode& in, const struct stat& st);
  void set_stamp_locked(Inode& in, const struct stat& st);

  const Options opts_;
  fuse_session* se_ = nullptr;
  bool dont_mask_ = false;
  InodeTable inodes_;
  std::unique_ptr<cache::PageCache> cache_;
  std::mutex handles_mu_;
  std::unordered_set<Handle*> handles_;  // guarded by handles_mu_
};

// One change of a file by the daemon, the sequence every change follows:
// the writer lock (regular files: Inode::writer_mu), the coherence check
// (an outside change must not be absorbed by the restamp below), then the
// caller's backing operation and the matching cache operation, then
// finish(): the restamp (our own change is never taken for one from outside;
// done after a partial failure too) and the unlock, before the reply.  The
// destructor finishes what an early return left.
class FileChange {
 public:
  FileChange(Filesystem& fs, Inode& in);
  ~FileChange() { finish(); }
  FileChange(const FileChange&) = delete;
  FileChange& operator=(const FileChange&) = delete;
  // The file's cache, or null (not cached, not a regular file).
  cache::CachedFile* cached() const { return in_.cached.get(); }
  void finish() noexcept;

 private:
  Filesystem& fs_;
  Inode& in_;
  std::unique_lock<std::mutex> lk_;
  bool done_ = false;
};

// Operation tables, one per file.
void add_entry_ops(fuse_lowlevel_ops& ops);
void add_dir_ops(fuse_lowlevel_ops& ops);
void add_file_ops(fuse_lowlevel_ops& ops);
void add_control_ops(fuse_lowlevel_ops& ops);

}  // namespace norefs::fs
