// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/filesystem.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cache/backing.h"
#include "fs/backing_fd.h"
#include "fs/sys.h"

namespace norefs::fs {

Filesystem::Filesystem(const Options& opts, int root_fd, const struct stat& root_st)
    : opts_(opts), inodes_(root_fd, root_st) {}

Filesystem::~Filesystem() { teardown(); }

namespace {

// A daemon killed with SIGKILL leaves its counter blocks behind.  Removes
// alloc.<pid> and cache.<pid> of processes that no longer exist (and of our
// own pid, which can only be such a leftover: the blocks are created
// O_EXCL).
void remove_stale_stats(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  const long self = getpid();
  while (dirent* e = readdir(d)) {
    std::string_view name = e->d_name;
    std::size_t dot = name.find('.');
    if (dot == std::string_view::npos) continue;
    std::string_view kind = name.substr(0, dot), num = name.substr(dot + 1);
    if ((kind != "alloc" && kind != "cache") || num.empty() ||
        num.find_first_not_of("0123456789") != std::string_view::npos || num.size() > 9) {
      continue;
    }
    long pid = std::stol(std::string(num));
    if (pid == self || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      unlinkat(dirfd(d), e->d_name, 0);
    }
  }
  closedir(d);
}

}  // namespace

void Filesystem::start_cache() {
  remove_stale_stats(opts_.stats_dir);
  cache_ = std::make_unique<cache::PageCache>(opts_.cache_config(getpid()));
}

void Filesystem::teardown() {
  std::vector<Handle*> handles;
  {
    std::lock_guard lk(handles_mu_);
    handles.assign(handles_.begin(), handles_.end());
    handles_.clear();
  }
  for (Handle* h : handles) delete h;  // what the kernel never released
  // Every Inode, so every CachedFile: no handle is left, so their pages go
  // not deferred.
  inodes_.take_all().clear();
  // Stops the readahead worker (dropping the files it still held), drains
  // every page through its grace period, destroys the arena and removes the
  // stats files.  A page still allocated then is a leak: ~PagePool reports
  // it and aborts, so the daemon cannot exit 0 with pages outstanding.
  cache_.reset();
}

void Filesystem::track(Handle* h) {
  std::lock_guard lk(handles_mu_);
  handles_.insert(h);
}

void Filesystem::untrack(Handle* h) {
  std::lock_guard lk(handles_mu_);
  handles_.erase(h);
}

void Filesystem::set_stamp_locked(Inode& in, const struct stat& st) {
  in.stamp = BackingStamp::of(st);
  in.note_mode(st.st_mode);
  in.meta_changed.store(false, std::memory_order_relaxed);
  std::int64_t now = mono_ns();
  in.stamp_ns.store(now ? now : 1, std::memory_order_relaxed);  // 0 means "no cache"
}

bool Filesystem::attach_and_check_locked(Inode& in, int* err) {
  *err = 0;
  if (in.cached) {
    if ((*err = HandleBacking::of(in.cached.get())->activate()) != 0) return false;
    return check_locked(in);
  }
  if (!caching() || !in.is_reg()) return false;
  // The cache's own read-only fd, opened through the O_PATH fd: no path
  // walk.  If it cannot be opened (say, the daemon may not read the file),
  // the file is served uncached through each handle's own fd.
  ProcPath p(in.fd);
  int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return true;
  }
  auto backing = std::make_unique<HandleBacking>(fd, in.fd);  // activated once, for this open
  in.cached = cache_->open_file(std::move(backing), static_cast<std::uint64_t>(st.st_size));
  set_stamp_locked(in, st);
  return true;  // new: whatever the kernel cached before is not ours to keep
}

bool Filesystem::check_locked(Inode& in) {
  if (!in.cached) return false;
  struct stat st {};
  if (fstat(in.fd, &st) != 0) return false;
  return compare_locked(in, st);
}

bool Filesystem::compare_locked(Inode& in, const struct stat& st) {
  BackingStamp now = BackingStamp::of(st);
  bool ours = in.meta_changed.load(std::memory_order_relaxed);
  bool changed = !(now == in.stamp);
  // Only the ctime moved and one of our own renames or unlinks did that.
  if (changed && ours && now.same_data(in.stamp)) changed = false;
  if (changed) {
    cache_->invalidate(*in.cached);
    cache_->set_size(*in.cached, static_cast<std::uint64_t>(st.st_size));
  }
  set_stamp_locked(in, st);
  return changed;
}

FileChange::FileChange(Filesystem& fs, Inode& in) : fs_(fs), in_(in) {
  if (in.is_reg()) lk_ = std::unique_lock(in.writer_mu);
  if (in.cached) fs.check_locked(in);
}

void FileChange::finish() noexcept {
  if (done_) return;
  done_ = true;
  if (in_.cached) fs_.restamp_locked(in_);
  if (lk_.owns_lock()) lk_.unlock();
}

void Filesystem::restamp_locked(Inode& in) {
  struct stat st {};
  if (fstat(in.fd, &st) == 0) set_stamp_locked(in, st);
}

namespace {

void sfs_init(void* userdata, fuse_conn_info* conn) {
  auto* fs = static_cast<Filesystem*>(userdata);
  // Writes of up to 1 MiB; libfuse 3.14 derives max_pages from it, so reads
  // of up to 1 MiB come in one request too.
  conn->max_write = 1u << 20;
  // No NFS export (we never look up "." or ".."), no writeback cache (the
  // cache is write-through: every write reaches us and the backing file
  // before its reply), no splice (cache pages are never handed over by
  // reference; write_buf is not implemented, so SPLICE_READ is off anyway).
  conn->want &= ~(FUSE_CAP_EXPORT_SUPPORT | FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ |
                  FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // O_TRUNC comes with open: truncated under the writer lock with the cache.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  // The control ioctls work on directories too.
  if (conn->capable & FUSE_CAP_IOCTL_DIR) conn->want |= FUSE_CAP_IOCTL_DIR;
  // kernel_cache: the kernel drops its pages when a getattr shows another
  // mtime or size.
  if (fs->opts().kernel_cache && (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)) {
    conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  }
  // The umask is ours to apply (fs/credentials.h, CallerUmask): a default ACL
  // on the parent directory replaces it, which only the backing
  // filesystem knows.
  if (conn->capable & FUSE_CAP_DONT_MASK) {
    conn->want |= FUSE_CAP_DONT_MASK;
    fs->set_dont_mask(true);
  }
  conn->time_gran = 1;
}

void sfs_destroy(void* /*userdata*/) {
  // Nothing: teardown happens in run() once every worker has exited.
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = sfs_init;
  ops.destroy = sfs_destroy;
  add_entry_ops(ops);
  add_dir_ops(ops);
  add_file_ops(ops);
  add_control_ops(ops);
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& Filesystem::operations() {
  static const fuse_lowlevel_ops ops = make_ops();
  return ops;
}

}  // namespace norefs::fs
