// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/ops_dir.cc — directories (opendir, readdir, readdirplus, releasedir,
// fsyncdir), statfs and extended attributes.
#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <vector>

#include "fs/credentials.h"
#include "fs/ops_common.h"

namespace norefs::fs {

DirHandle::~DirHandle() { closedir(dp); }

namespace {

bool is_dot_or_dotdot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

int do_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Filesystem& fs = fs_of(req);
  Inode& in = inode_of(req, ino);
  // As the caller, through the magic link: read permission on the
  // directory, as opendir(3) needs (openat(in.fd, ".") would also ask for
  // search permission, which listing a directory does not).
  ProcPath path(in.fd);
  int fd = -1;
  if (int err = as_caller(req, [&] {
        fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? last_errno() : 0;
      })) {
    return err;
  }
  DIR* dp = fdopendir(fd);
  if (!dp) {
    int err = last_errno();
    close(fd);
    return err;
  }
  std::unique_ptr<DirHandle> d;
  try {
    d = std::make_unique<DirHandle>(dp);
  } catch (...) {
    closedir(dp);
    throw;
  }
  fs.track(d.get());
  fi->fh = reinterpret_cast<std::uintptr_t>(d.get());
  DirHandle* raw = d.release();
  if (fuse_reply_open(req, fi) == -ENOENT) {  // the opener went away: no releasedir follows
    fs.untrack(raw);
    delete raw;
  }
  return 0;
}

void sfs_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_opendir(req, ino, fi); });
}

// readdir and readdirplus (passthrough_hp's do_readdir).  Each readdirplus
// entry but "." and ".." counts one lookup; an entry that does not fit is
// forgotten again.
int do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
               bool plus) {
  Filesystem& fs = fs_of(req);
  Inode& dir = inode_of(req, ino);
  DirHandle* d = dir_of(fi);
  // readdirplus looks every entry up: as the caller, who needs search
  // permission on the directory for that.  One switch for the whole reply.
  std::optional<ActAsCaller> as;
  if (plus) {
    as.emplace(req);
    if (!as->ok()) return as->err();
  }
  std::vector<char> buf(size);
  char* p = buf.data();
  size_t rem = size;
  int err = 0;
  if (off != d->offset) {
    seekdir(d->dp, off);
    d->entry = nullptr;
    d->offset = off;
  }
  for (;;) {
    if (!d->entry) {
      errno = 0;
      d->entry = readdir(d->dp);
      if (!d->entry) {
        err = errno;  // 0 at the end of the stream
        break;
      }
    }
    const char* name = d->entry->d_name;
    const off_t next = d->entry->d_off;
    size_t used;
    if (plus) {
      fuse_entry_param e{};
      int lerr = is_dot_or_dotdot(name) ? EACCES : do_lookup(fs, dir, name, &e);
      if (lerr == ENOENT) {  // gone since readdir() saw it
        d->entry = nullptr;
        d->offset = next;
        continue;
      }
      if (lerr == EACCES) {
        // The name only, as readdir gives it: "." and "..", and every
        // entry of a directory the caller may read but not search (no
        // lookup counted; the kernel looks it up, and is refused, later).
        e = fuse_entry_param{};
        e.attr.st_ino = d->entry->d_ino;
        e.attr.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
      } else if (lerr) {
        err = lerr;
        break;
      }
      used = fuse_add_direntry_plus(req, p, rem, name, &e, next);
      if (used > rem) {
        if (e.ino != 0) std::unique_ptr<Inode> dead = fs.inodes().forget(&inode_of(req, e.ino), 1);
        break;
      }
    } else {
      struct stat st {};
      st.st_ino = d->entry->d_ino;
      st.st_mode = static_cast<mode_t>(d->entry->d_type) << 12;
      used = fuse_add_direntry(req, p, rem, name, &st, next);
      if (used > rem) break;
    }
    p += used;
    rem -= used;
    d->entry = nullptr;
    d->offset = next;
  }
  // An error can only be reported if nothing was stored yet (the entries
  // already stored were counted as lookups and must reach the kernel).
  if (err && rem == size) return err;
  if (as) as->end();
  fuse_reply_buf(req, buf.data(), size - rem);
  return 0;
}

void sfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_readdir(req, ino, size, off, fi, false); });
}

void sfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_readdir(req, ino, size, off, fi, true); });
}

void sfs_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  DirHandle* d = dir_of(fi);
  fs_of(req).untrack(d);
  delete d;
  fuse_reply_err(req, 0);
}

void sfs_fsyncdir(fuse_req_t req, fuse_ino_t /*ino*/, int datasync, fuse_file_info* fi) {
  reply_errno(req, [&] {
    int fd = dirfd(dir_of(fi)->dp);
    if ((datasync ? fdatasync(fd) : fsync(fd)) != 0) return last_errno();
    fuse_reply_err(req, 0);
    return 0;
  });
}

void sfs_statfs(fuse_req_t req, fuse_ino_t ino) {
  reply_errno(req, [&] {
    struct statvfs sv {};
    if (fstatvfs(inode_of(req, ino).fd, &sv) != 0) return last_errno();
    fuse_reply_statfs(req, &sv);
    return 0;
  });
}

// ── Extended attributes, through /proc/self/fd/N: the path-based calls
// reach the O_PATH fd's inode itself (the magic link is a jump, not a walk)
// and open nothing, so a FIFO does not block. ──

// Whether a refused removal of `name` is the kernel dropping a file
// capability before a change by this caller (security_inode_killpriv(),
// from file_remove_privs() before fallocate, or before a write through the
// page cache): security.capability, asked by a caller who may write the
// file.  libfuse 3.14 cannot negotiate FUSE_HANDLE_KILLPRIV, so the kernel
// sends the removal itself, as the caller, who has no CAP_SETFCAP; locally
// the kernel removes it with no check.  Doing it as the daemon grants
// nothing new: whoever may write the file drops the capability by writing
// one byte (as ops_entry.cc's is_setid_clearing() for setuid/setgid).
// Context: acting as the caller.
bool is_capability_kill(const char* name, const char* path) {
  return std::strcmp(name, "security.capability") == 0 &&
         faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

// A change of xattrs changes ctime: done under the writer lock and
// restamped for a cached file.  An ACL may rewrite the mode (the access
// ACL's owner, group and other entries are the mode bits): the kernel's
// cached attributes are dropped before the reply (invalidate_kernel_attrs()).
// `removal`: op removes `name` (only a removal can be the capability drop;
// a set of security.capability as the daemon would grant one).
template <class Change>
int change_xattr(fuse_req_t req, fuse_ino_t ino, const char* name, bool removal, Change&& op) {
  Filesystem& fs = fs_of(req);
  Inode& in = inode_of(req, ino);
  ProcPath p(in.fd);
  FileChange change(fs, in);
  bool kill_cap = false;  // the kernel's capability drop, done below as the daemon
  // As the caller: user.* needs write permission, trusted.* and security.*
  // capabilities the caller does not have.
  int err = as_caller(req, [&] {
    if (op(p.c_str()) == 0) return 0;
    int e = last_errno();
    if (e == EPERM && removal && is_capability_kill(name, p.c_str())) kill_cap = true;
    return e;
  });
  if (kill_cap) err = op(p.c_str()) == 0 ? 0 : last_errno();
  change.finish();
  if (err) return err;
  if (std::strncmp(name, "system.posix_acl_", 17) == 0) invalidate_kernel_attrs(req, &in);
  fuse_reply_err(req, 0);
  return 0;
}

void sfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                  int flags) {
  reply_errno(req, [&] {
    return change_xattr(req, ino, name, false,
                        [&](const char* path) { return setxattr(path, name, value, size, flags); });
  });
}

void sfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  reply_errno(req, [&] {
    return change_xattr(req, ino, name, true,
                        [&](const char* path) { return removexattr(path, name); });
  });
}

// getxattr and listxattr: size 0 asks for the size needed.
template <class Get>
int get_xattr(fuse_req_t req, fuse_ino_t ino, size_t size, Get&& get) {
  ProcPath p(inode_of(req, ino).fd);
  std::vector<char> buf(size);
  ssize_t n = -1;
  // As the caller: user.* needs read permission; trusted.* is invisible
  // to a caller without CAP_SYS_ADMIN.
  if (int err = as_caller(req, [&] {
        n = get(p.c_str(), size ? buf.data() : nullptr, size);
        return n < 0 ? last_errno() : 0;
      })) {
    return err;
  }
  if (size == 0) {  // the caller asks for the size needed
    fuse_reply_xattr(req, static_cast<size_t>(n));
    return 0;
  }
  fuse_reply_buf(req, buf.data(), static_cast<size_t>(n));
  return 0;
}

void sfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  reply_errno(req, [&] {
    return get_xattr(req, ino, size, [&](const char* path, char* b, size_t n) {
      return getxattr(path, name, b, n);
    });
  });
}

void sfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  reply_errno(req, [&] {
    return get_xattr(req, ino, size,
                     [&](const char* path, char* b, size_t n) { return listxattr(path, b, n); });
  });
}

}  // namespace

void add_dir_ops(fuse_lowlevel_ops& ops) {
  ops.opendir = sfs_opendir;
  ops.readdir = sfs_readdir;
  ops.readdirplus = sfs_readdirplus;
  ops.releasedir = sfs_releasedir;
  ops.fsyncdir = sfs_fsyncdir;
  ops.statfs = sfs_statfs;
  ops.setxattr = sfs_setxattr;
  ops.getxattr = sfs_getxattr;
  ops.listxattr = sfs_listxattr;
  ops.removexattr = sfs_removexattr;
}

}  // namespace norefs::fs
