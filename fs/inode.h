// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/inode.h — the inode table: one Inode per backing inode the kernel knows,
// keyed by the backing (st_dev, st_ino), each holding an O_PATH|O_NOFOLLOW
// fd through which every operation on it is done (*at() calls relative to
// it, /proc/self/fd/N to reopen it).  The Inode's address is the fuse_ino_t
// (the root is FUSE_ROOT_ID), as in libfuse's passthrough_hp.cc.
//
// Lifetime.  An Inode lives while the kernel holds lookups on it (nlookup:
// lookup, create, mknod, mkdir, symlink, link and each readdirplus entry
// count one; forget subtracts) or while an open handle refers to it (nopen).
// The second condition is needed because the kernel queues FORGET ahead of a
// RELEASE still waiting in the background queue.  Both counts are guarded by
// InodeTable::mu_; the Inode is destroyed outside it.  Holding the O_PATH fd
// also pins the backing inode, so its (st_dev, st_ino) cannot be reused by
// another file while the Inode exists.
//
// Lock order (the whole process, one table: docs/design.md#lock-order):
// Inode::writer_mu comes first; InodeTable::mu_ is a leaf.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cache/page_cache.h"

namespace norefs::fs {

// What we last saw of a backing file: close-to-open coherence compares it
// with a fresh fstat (like NFS).
struct BackingStamp {
  off_t size = -1;
  timespec mtime{}, ctime{};
  ino_t ino = 0;

  static BackingStamp of(const struct stat& st) {
    return {st.st_size, st.st_mtim, st.st_ctim, st.st_ino};
  }
  // Same bytes as far as a stat can tell (ctime aside).
  bool same_data(const BackingStamp& o) const {
    return size == o.size && ino == o.ino && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec;
  }
  bool operator==(const BackingStamp& o) const {
    return same_data(o) && ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
  }
};

struct Inode {
  Inode(int fd_, dev_t dev_, ino_t ino_, mode_t type_)
      : fd(fd_), dev(dev_), ino(ino_), type(type_) {}
  ~Inode();
  Inode(const Inode&) = delete;
  Inode& operator=(const Inode&) = delete;

  const int fd;       // O_PATH|O_NOFOLLOW, owned
  const dev_t dev;    // backing st_dev
  const ino_t ino;    // backing st_ino
  const mode_t type;  // S_IFMT bits: a backing inode never changes type

  bool is_reg() const { return S_ISREG(type); }
  bool is_dir() const { return S_ISDIR(type); }
  bool is_lnk() const { return S_ISLNK(type); }

  // The writer lock, the analogue of the kernel's i_rwsem: held across a
  // change of the backing file and the matching change of the cache
  // (PageCache's "Context: the caller serializes changes of one file"), and
  // across the coherence check, so that a check never sees our own change
  // half done.
  std::mutex writer_mu;
  // The file's cache: created on the first open of a regular file, kept
  // while the Inode lives (so it survives close and reopen).  Guarded by
  // writer_mu; set at most once, dropped with the Inode.
  std::shared_ptr<cache::CachedFile> cached;
  // Backing state as of the last check or our last change.  Guarded by
  // writer_mu.
  BackingStamp stamp;
  // CLOCK_MONOTONIC ns of `stamp`.  Written under writer_mu; read without it
  // by getattr to decide whether to check (relaxed: a hint, the check itself
  // runs under writer_mu).
  std::atomic<std::int64_t> stamp_ns{0};
  // One of our own operations that has no Inode at hand (rename, unlink of
  // another name) changed this file's ctime only: the next check accepts a
  // ctime-only difference.  Relaxed: consumed under writer_mu.
  std::atomic<bool> meta_changed{false};
  // Whether the last stat the daemon took of the backing inode (lookup,
  // getattr, setattr, open, coherence check, a change of its own) showed a
  // setuid or setgid bit, which a write may have to clear (ops_file.cc,
  // change_as_writer).  It spares every other write a credential switch.
  // Relaxed: a hint, published by nothing; a stale value only makes one
  // write switch for nothing, or (a bit set from outside since our last
  // stat) leaves the bit as a privileged writer would.
  std::atomic<bool> setid{false};
  void note_mode(mode_t mode) {
    setid.store((mode & (S_ISUID | S_ISGID)) != 0, std::memory_order_relaxed);
  }
  // One of our own unlinks or renames removed the backing file's last name:
  // an open of it now can only come through a handle (/proc/<pid>/fd/N),
  // never through a stale kernel dentry, so open does not answer ESTALE for
  // its zero link count (see do_open in ops_file.cc).  Set once, never
  // cleared (a backing inode with no name gets none back).  Relaxed: a flag
  // with nothing else to publish.
  std::atomic<bool> unlinked_through_mount{false};

 private:
  friend class InodeTable;
  std::uint64_t nlookup_ = 0;  // guarded by InodeTable::mu_
  std::uint64_t nopen_ = 0;    // guarded by InodeTable::mu_
};

class InodeTable {
 public:
  // Takes ownership of `root_fd` (O_PATH of the backing directory).
  InodeTable(int root_fd, const struct stat& root_st);
  ~InodeTable();
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  Inode& root() { return *root_; }

  // The Inode of `st`, with one more lookup.  Takes ownership of `fd` (an
  // O_PATH fd of that backing inode): kept for a new Inode, closed if the
  // table already has one.
  Inode* lookup(int fd, const struct stat& st);
  // Subtracts `n` lookups; returns the Inode if it must now be destroyed
  // (destroy it outside every lock).
  std::unique_ptr<Inode> forget(Inode* in, std::uint64_t n);
  // An open handle starts / stops referring to `in`.
  void open_ref(Inode* in);
  std::unique_ptr<Inode> open_unref(Inode* in);
  // Sets meta_changed on the Inode of (dev, ino) if there is one, and
  // unlinked_through_mount if its backing file has no name left.
  void note_meta_change(dev_t dev, ino_t ino);
  // Teardown: removes and returns every Inode but the root.
  std::vector<std::unique_ptr<Inode>> take_all();
  std::size_t size() const;

 private:
  struct Key {
    dev_t dev;
    ino_t ino;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      return std::hash<std::uint64_t>()(k.ino * 0x9e3779b97f4a7c15ull ^ k.dev);
    }
  };
  std::unique_ptr<Inode> erase_if_unused_locked(Inode* in);

  std::unique_ptr<Inode> root_;
  mutable std::mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Inode>, KeyHash> map_;  // guarded by mu_
};

}  // namespace norefs::fs
