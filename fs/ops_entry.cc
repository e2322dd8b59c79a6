// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/ops_entry.cc — names and attributes: lookup, forget, getattr, setattr,
// readlink, mknod, mkdir, symlink, unlink, rmdir, rename, link, access.
//
// Every name is resolved relative to the parent's O_PATH fd by one *at()
// call that does not follow a symlink in the last component (O_NOFOLLOW,
// AT_SYMLINK_NOFOLLOW); names are single components (check_name()), so
// nothing resolves outside the backing directory.  Inodes themselves are
// reached through their own fd (AT_EMPTY_PATH, or /proc/self/fd/N for the
// calls that take no fd).
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <vector>

#include "fs/credentials.h"
#include "fs/ops_common.h"

namespace norefs::fs {

int do_lookup(Filesystem& fs, Inode& parent, const char* name, fuse_entry_param* e) {
  if (int err = check_name(name)) return err;
  *e = fuse_entry_param{};
  e->attr_timeout = fs.timeout();
  e->entry_timeout = fs.timeout();
  int fd = openat(parent.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return last_errno();
  if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    int err = last_errno();
    close(fd);
    return err;
  }
  Inode* in = fs.inodes().lookup(fd, e->attr);
  in->note_mode(e->attr.st_mode);
  e->ino = ino_of(fs, in);
  return 0;
}

namespace {

// Nothing on the way to freeing allocates (a bad_alloc here would have
// nowhere to go: forget has no reply): each Inode whose last lookup goes is
// destroyed at once, outside the table's lock (InodeTable::forget), which
// drops its CachedFile.
void forget_one(Filesystem& fs, fuse_ino_t ino, std::uint64_t n) noexcept {
  if (ino == FUSE_ROOT_ID) return;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): libfuse hands our Inode* back as the ino
  Inode* in = reinterpret_cast<Inode*>(static_cast<std::uintptr_t>(ino));
  std::unique_ptr<Inode> dead = fs.inodes().forget(in, n);
}

void sfs_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  reply_errno(req, [&] {
    fuse_entry_param e;
    // As the caller: finding a name needs search permission on its directory.
    if (int err = as_caller(
            req, [&] { return do_lookup(fs_of(req), inode_of(req, parent), name, &e); })) {
      return err;
    }
    fuse_reply_entry(req, &e);
    return 0;
  });
}

void sfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  forget_one(fs_of(req), ino, nlookup);
  fuse_reply_none(req);
}

void sfs_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; i++) forget_one(fs_of(req), forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

// Close-to-open coherence on getattr: a stamp older than coherence_timeout
// is checked against the backing file (under the writer lock, so that it
// never sees one of our own writes half done).
void maybe_revalidate(Filesystem& fs, Inode& in, struct stat* st) {
  if (!in.is_reg() || !fs.caching()) return;
  std::int64_t stamped = in.stamp_ns.load(std::memory_order_relaxed);
  if (stamped == 0) return;  // never opened: no CachedFile to check
  if (mono_ns() - stamped <= static_cast<std::int64_t>(fs.timeout() * 1e9)) return;
  std::lock_guard lk(in.writer_mu);
  if (fs.check_locked(in)) {
    // Changed: report what the check saw, not the stat from before it.
    (void)fstatat(in.fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
  }
}

int do_getattr(fuse_req_t req, fuse_ino_t ino) {
  Filesystem& fs = fs_of(req);
  Inode& in = inode_of(req, ino);
  struct stat st {};
  if (fstatat(in.fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return last_errno();
  in.note_mode(st.st_mode);
  maybe_revalidate(fs, in, &st);
  fuse_reply_attr(req, &st, fs.timeout());
  return 0;
}

void sfs_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  reply_errno(req, [&] { return do_getattr(req, ino); });
}

int set_times(Inode& in, const OpenFile* of, const struct stat* attr, int valid) {
  timespec tv[2];
  tv[0].tv_sec = 0;
  tv[1].tv_sec = 0;
  if (valid & FUSE_SET_ATTR_ATIME_NOW)
    tv[0].tv_nsec = UTIME_NOW;
  else if (valid & FUSE_SET_ATTR_ATIME)
    tv[0] = attr->st_atim;
  else
    tv[0].tv_nsec = UTIME_OMIT;
  if (valid & FUSE_SET_ATTR_MTIME_NOW)
    tv[1].tv_nsec = UTIME_NOW;
  else if (valid & FUSE_SET_ATTR_MTIME)
    tv[1] = attr->st_mtim;
  else
    tv[1].tv_nsec = UTIME_OMIT;
  if (of) return futimens(of->fd, tv) == 0 ? 0 : last_errno();
  // AT_EMPTY_PATH on the O_PATH fd: works for symlinks too, follows nothing.
  if (utimensat(in.fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0) return 0;
  if (errno != EINVAL || in.is_lnk()) return last_errno();
  ProcPath p(in.fd);  // kernels without AT_EMPTY_PATH for utimensat
  return utimensat(AT_FDCWD, p.c_str(), tv, 0) == 0 ? 0 : last_errno();
}

int set_mode(const Inode& in, const OpenFile* of, mode_t mode) {
  if (of) return fchmod(of->fd, mode) == 0 ? 0 : last_errno();
  if (in.is_lnk()) return EOPNOTSUPP;
  ProcPath p(in.fd);
  return chmod(p.c_str(), mode) == 0 ? 0 : last_errno();
}

// Whether a chmod the caller was refused is the kernel clearing setuid or
// setgid before a truncate, a write (kernel_cache) or a chown by that
// caller: a mode change that only drops those bits, asked by a caller who
// may write the file.  libfuse 3.14 cannot negotiate FUSE_HANDLE_KILLPRIV,
// so the kernel sends that change itself, as the caller, who need not own
// the file; locally the kernel forces it (ATTR_FORCE).  Doing it as the
// daemon grants nothing new: whoever may write the file clears these bits
// by writing one byte.  Context: acting as the caller.
bool is_setid_clearing(const Inode& in, const OpenFile* of, mode_t mode) {
  constexpr mode_t kSetid = S_ISUID | S_ISGID;
  struct stat st {};
  if (fstatat(in.fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return false;
  const mode_t cur = st.st_mode & 07777, want = mode & 07777;
  if ((cur & ~kSetid) != (want & ~kSetid) || (want & kSetid & ~cur) || want == cur) return false;
  if (of && (of->flags & O_ACCMODE) != O_RDONLY) return true;
  ProcPath p(in.fd);
  return faccessat(AT_FDCWD, p.c_str(), W_OK, AT_EACCESS) == 0;
}

int do_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int valid, fuse_file_info* fi) {
  Filesystem& fs = fs_of(req);
  Inode& in = inode_of(req, ino);
  // fi is an OpenFile only for regular files (for a directory it would be
  // a DirHandle); the O_PATH fd serves otherwise.
  const OpenFile* of = fi && in.is_reg() ? open_file_of(fi) : nullptr;
  FileChange change(fs, in);
  // Every change as the caller: the backing filesystem decides who may
  // chmod, chown, truncate or set times, and clears setuid/setgid bits on
  // chown and on a chmod by a non-member of the file's group, as it would
  // for a local process.
  ActAsCaller as(req);
  if (!as.ok()) return as.err();
  int err = 0;
  bool clear_setid = false;  // the kernel's clearing, done below as the daemon
  if (valid & FUSE_SET_ATTR_MODE) {
    err = set_mode(in, of, attr->st_mode);
    if (err == EPERM && is_setid_clearing(in, of, attr->st_mode)) {
      err = 0;
      clear_setid = true;
    }
  }
  if (!err && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
    uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : static_cast<uid_t>(-1);
    gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : static_cast<gid_t>(-1);
    if (fchownat(in.fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
      err = last_errno();
    }
  }
  if (!err && (valid & FUSE_SET_ATTR_SIZE)) {
    int r;
    if (of) {
      r = ftruncate(of->fd, attr->st_size);
    } else if (in.is_reg()) {
      ProcPath p(in.fd);
      r = truncate(p.c_str(), attr->st_size);
    } else {
      r = -1;
      errno = in.is_dir() ? EISDIR : EINVAL;
    }
    if (r != 0) {
      err = last_errno();
    } else if (change.cached()) {
      // The backing file first, then the cache (PageCache::truncate's
      // Context); -ENOMEM leaves the cache consistent (pages dropped).
      (void)fs.cache().truncate(*change.cached(), static_cast<std::uint64_t>(attr->st_size));
    }
  }
  if (!err && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                        FUSE_SET_ATTR_MTIME_NOW))) {
    err = set_times(in, of, attr, valid);
  }
  as.end();
  if (!err && clear_setid) err = set_mode(in, of, attr->st_mode);
  struct stat st {};
  if (!err && fstatat(in.fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    err = last_errno();
  }
  if (!err) in.note_mode(st.st_mode);
  change.finish();  // restamped even after a partial failure
  if (err) return err;
  fuse_reply_attr(req, &st, fs.timeout());
  return 0;
}

void sfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int valid, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_setattr(req, ino, attr, valid, fi); });
}

int do_readlink(fuse_req_t req, fuse_ino_t ino) {
  Inode& in = inode_of(req, ino);
  char buf[PATH_MAX + 1];
  ssize_t n = readlinkat(in.fd, "", buf, sizeof buf - 1);
  if (n < 0) return last_errno();
  buf[n] = '\0';
  fuse_reply_readlink(req, buf);
  return 0;
}

void sfs_readlink(fuse_req_t req, fuse_ino_t ino) {
  reply_errno(req, [&] { return do_readlink(req, ino); });
}

// mknod, mkdir, symlink: `make(dirfd, mode)` creates `name` in the
// parent's fd with `mode` (the request's, under its umask: CallerUmask).
template <class Make>
int make_node(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, Make&& make) {
  if (int err = check_name(name)) return err;
  Filesystem& fs = fs_of(req);
  Inode& dir = inode_of(req, parent);
  fuse_entry_param e;
  // As the caller: the new node is the caller's from the moment it exists
  // (its group: the caller's, or the directory's if that is setgid).
  ActAsCaller as(req);
  if (!as.ok()) return as.err();
  {
    CallerUmask um(req, fs.dont_mask(), &mode);
    if (make(dir.fd, mode) != 0) return last_errno();
  }
  if (int err = do_lookup(fs, dir, name, &e)) return err;
  as.end();
  fuse_reply_entry(req, &e);
  return 0;
}

void sfs_mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  reply_errno(req, [&] {
    return make_node(req, parent, name, mode,
                     [&](int dfd, mode_t m) { return mknodat(dfd, name, m, rdev); });
  });
}

void sfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  reply_errno(req, [&] {
    return make_node(req, parent, name, mode,
                     [&](int dfd, mode_t m) { return mkdirat(dfd, name, m); });
  });
}

void sfs_symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  // The target is stored as given and never resolved by the daemon.
  reply_errno(req, [&] {
    return make_node(req, parent, name, 0777,
                     [&](int dfd, mode_t /*m*/) { return symlinkat(link, dfd, name); });
  });
}

// Our rename or unlink changes the ctime of the inode behind `name`: tell
// its Inode, if the kernel knows it, so that the next coherence check does
// not take that for a change from outside.
struct NameStat {
  NameStat(int dirfd, const char* name) {
    ok = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
  }
  void note(Filesystem& fs) const {
    if (ok) fs.inodes().note_meta_change(st.st_dev, st.st_ino);
  }
  struct stat st {};
  bool ok;
};

int do_remove(fuse_req_t req, fuse_ino_t parent, const char* name, int flags) {
  if (int err = check_name(name)) return err;
  Filesystem& fs = fs_of(req);
  Inode& dir = inode_of(req, parent);
  NameStat victim(dir.fd, name);
  // As the caller: write and search permission on the directory, and the
  // sticky bit's owner rule.
  if (int err = as_caller(req, [&] { return unlinkat(dir.fd, name, flags) ? last_errno() : 0; })) {
    return err;
  }
  victim.note(fs);
  fuse_reply_err(req, 0);
  return 0;
}

void sfs_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  reply_errno(req, [&] { return do_remove(req, parent, name, 0); });
}

void sfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  reply_errno(req, [&] { return do_remove(req, parent, name, AT_REMOVEDIR); });
}

int do_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  if (int err = check_name(name)) return err;
  if (int err = check_name(newname)) return err;
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE | RENAME_EXCHANGE)) return EINVAL;
  Filesystem& fs = fs_of(req);
  Inode& from = inode_of(req, parent);
  Inode& to = inode_of(req, newparent);
  NameStat moved(from.fd, name), target(to.fd, newname);
  if (int err = as_caller(req, [&] {
        return renameat2(from.fd, name, to.fd, newname, flags) ? last_errno() : 0;
      })) {
    return err;
  }
  moved.note(fs);
  target.note(fs);  // exchanged, or replaced (its link count changed)
  fuse_reply_err(req, 0);
  return 0;
}

void sfs_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                const char* newname, unsigned int flags) {
  reply_errno(req, [&] { return do_rename(req, parent, name, newparent, newname, flags); });
}

int do_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  if (int err = check_name(newname)) return err;
  Filesystem& fs = fs_of(req);
  Inode& in = inode_of(req, ino);
  Inode& dir = inode_of(req, newparent);
  FileChange change(fs, in);  // ctime and link count change
  // As the caller: write permission on the directory, and
  // protected_hardlinks (the caller must own the file or may read and
  // write it).  AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH, which a caller
  // does not have; then the /proc link (AT_SYMLINK_FOLLOW follows the magic
  // link to this very inode).
  ActAsCaller as(req);
  if (!as.ok()) return as.err();
  if (linkat(in.fd, "", dir.fd, newname, AT_EMPTY_PATH) != 0) {
    if (errno != EPERM && errno != ENOENT) return last_errno();
    ProcPath p(in.fd);
    if (linkat(AT_FDCWD, p.c_str(), dir.fd, newname, AT_SYMLINK_FOLLOW) != 0) return last_errno();
  }
  change.finish();
  fuse_entry_param e;
  if (int err = do_lookup(fs, dir, newname, &e)) return err;
  as.end();
  fuse_reply_entry(req, &e);
  return 0;
}

void sfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  reply_errno(req, [&] { return do_link(req, ino, newparent, newname); });
}

void sfs_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  reply_errno(req, [&] {
    Inode& in = inode_of(req, ino);
    ProcPath p(in.fd);
    // AT_EACCESS: check with the (switched) fsuid and groups; without it
    // faccessat() would check the daemon's real uid, root.
    if (int err = as_caller(req, [&] {
          return faccessat(AT_FDCWD, p.c_str(), mask, AT_EACCESS) ? last_errno() : 0;
        })) {
      return err;
    }
    fuse_reply_err(req, 0);
    return 0;
  });
}

}  // namespace

void add_entry_ops(fuse_lowlevel_ops& ops) {
  ops.lookup = sfs_lookup;
  ops.forget = sfs_forget;
  ops.forget_multi = sfs_forget_multi;
  ops.getattr = sfs_getattr;
  ops.setattr = sfs_setattr;
  ops.readlink = sfs_readlink;
  ops.mknod = sfs_mknod;
  ops.mkdir = sfs_mkdir;
  ops.symlink = sfs_symlink;
  ops.unlink = sfs_unlink;
  ops.rmdir = sfs_rmdir;
  ops.rename = sfs_rename;
  ops.link = sfs_link;
  ops.access = sfs_access;
}

}  // namespace norefs::fs
