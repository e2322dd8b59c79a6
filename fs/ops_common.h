// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/ops_common.h — helpers shared by the operation files.
#pragma once

#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <system_error>

#include "fs/filesystem.h"

namespace norefs::fs {

inline Filesystem& fs_of(fuse_req_t req) {
  return *static_cast<Filesystem*>(fuse_req_userdata(req));
}

inline Inode& inode_of(fuse_req_t req, fuse_ino_t ino) {
  if (ino == FUSE_ROOT_ID) return fs_of(req).inodes().root();
  // NOLINTNEXTLINE(performance-no-int-to-ptr): libfuse hands our Inode* back as the ino
  return *reinterpret_cast<Inode*>(static_cast<std::uintptr_t>(ino));
}

inline fuse_ino_t ino_of(Filesystem& fs, Inode* in) {
  if (in == &fs.inodes().root()) return FUSE_ROOT_ID;
  return static_cast<fuse_ino_t>(reinterpret_cast<std::uintptr_t>(in));
}

inline OpenFile* open_file_of(const fuse_file_info* fi) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): libfuse hands our OpenFile* back as fh
  return reinterpret_cast<OpenFile*>(static_cast<std::uintptr_t>(fi->fh));
}

inline DirHandle* dir_of(const fuse_file_info* fi) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): libfuse hands our DirHandle* back as fh
  return reinterpret_cast<DirHandle*>(static_cast<std::uintptr_t>(fi->fh));
}

// Tells the kernel to forget its cached attributes (and ACLs) of `in`, so
// that the next stat asks us.  For a change whose effect on the mode the
// kernel does not foresee: a write, fallocate or copy_file_range that made
// the backing filesystem clear setuid/setgid, an ACL that rewrote the mode.
// The kernel invalidates only size and times after a write and only ctime
// after setxattr, and a stat that asks for the mode alone (statx with
// STATX_MODE: `stat -c %a`) would show the old bits for coherence_timeout
// seconds; a setuid bit shown after the write cleared it is one that exec
// would honour on a suid mount.  Called before the reply; no page is
// touched (offset -1), so it cannot wait on a request of ours.
inline void invalidate_kernel_attrs(fuse_req_t req, Inode* in) {
  Filesystem& fs = fs_of(req);
  if (fs.session()) (void)fuse_lowlevel_notify_inval_inode(fs.session(), ino_of(fs, in), -1, 0);
}

// Names come from the kernel as single components; refuse anything that
// could walk elsewhere (the kernel never sends these without
// FUSE_CAP_EXPORT_SUPPORT, which we do not ask for).
inline int check_name(const char* name) {
  if (name[0] == '\0' || std::strchr(name, '/')) return EINVAL;
  if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) return EINVAL;
  return 0;
}

// Runs `body`, which returns 0 after sending its reply itself or an errno
// to be sent here.  Exceptions stop at this boundary: none may cross into
// libfuse.  `body` must not throw after it has replied (nothing it does
// after a reply allocates).
template <class F>
void reply_errno(fuse_req_t req, F&& body) noexcept {
  int err;
  try {
    err = body();
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  } catch (const std::system_error& e) {
    err = e.code().category() == std::generic_category() ||
                  e.code().category() == std::system_category()
              ? e.code().value()
              : EIO;
    if (err == 0) err = EIO;
  } catch (...) {
    err = EIO;
  }
  if (err != 0) fuse_reply_err(req, err);
}

// Shared by lookup, create, mknod, mkdir, symlink, link and readdirplus:
// resolves `name` in `parent` without following a symlink, counts one
// lookup and fills `e`.  Returns 0 or an errno.
int do_lookup(Filesystem& fs, Inode& parent, const char* name, fuse_entry_param* e);

}  // namespace norefs::fs
