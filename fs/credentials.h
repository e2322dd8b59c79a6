// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/credentials.h — acting for the caller.
//
// The daemon usually runs as root and serves every user of the mount.  An
// operation the kernel would check for a local process (lookup, create,
// open, chmod, unlink, ...) therefore runs with the *caller's* credentials:
// ActAsCaller switches the calling worker thread's fsuid, fsgid and
// supplementary groups to those of the request (fuse_req_ctx(),
// fuse_req_getgroups()) and drops every capability from the thread's
// effective set, so that the backing filesystem makes each decision itself
// (modes, ACLs, sticky directories, protected_hardlinks, setgid
// directories, trusted.* xattrs) and new files, directories, nodes and
// symlinks belong to the caller from the moment they exist.  The
// destructor restores the daemon's own credentials.  Work done on the
// daemon's own behalf (the cache's read-only fd, fills, readahead,
// coherence stats) runs outside any ActAsCaller and stays privileged.
//
// Per thread, never per process.  Linux keeps credentials per thread, but
// glibc's setgroups() (like setuid() and setresgid()) is a "setxid" call:
// it signals every thread of the process so that all of them change
// together (POSIX semantics), which would switch every other worker
// mid-operation.  glibc's setfsuid()/setfsgid() are plain syscalls, and
// capset() acts on the calling thread (pid 0).  ActAsCaller uses the raw
// syscalls for all four (SYS_setgroups, SYS_setfsgid, SYS_setfsuid,
// SYS_capset) so that nothing depends on which wrapper broadcasts.
//
// Fail closed: if any step of the switch fails, the operation is refused
// (ok() is false, err() says why) and the thread's credentials are put
// back; it never runs with the daemon's.
//
// Who is switched:
//  - a daemon not running as root (a user mount) keeps its own credentials
//    for everything: it can do no more than its user can anyway, and every
//    caller is that user (the kernel allows only the mounter, unless
//    allow_other);
//  - a caller with uid 0 and gid 0 runs as the daemon (root);
//  - any other caller is switched.  A caller with uid 0 keeps the daemon's
//    capabilities (root is root) but gets its own fsgid and groups.
//
// Cost per switched operation: reading /proc/<tid>/task/<tid>/status for
// the groups (libfuse's fuse_req_getgroups()), and 8 syscalls (4 to switch,
// 4 to restore) plus one that checks the fsuid took.  Reads and writes on an
// open handle never switch: the handle's fd was opened with the caller's
// credentials, and the kernel checks nothing more on read(2)/write(2).
#pragma once

#include <fuse_lowlevel.h>

#include <sys/types.h>

namespace norefs::fs {

class ActAsCaller {
 public:
  // Decides, once, whether the daemon switches at all (root, and not the
  // test builds' control option), and records the daemon's own groups and
  // capabilities.  Call before the first request.  `use_daemon_credentials`
  // turns switching off (the tests' control; see Options).
  static void init(bool use_daemon_credentials);
  // Whether operations run with the caller's credentials.
  static bool enabled();

  explicit ActAsCaller(fuse_req_t req);
  ~ActAsCaller();
  ActAsCaller(const ActAsCaller&) = delete;
  ActAsCaller& operator=(const ActAsCaller&) = delete;

  bool ok() const { return err_ == 0; }
  // 0, or the errno to answer the request with (EPERM) when the switch
  // failed.
  int err() const { return err_; }
  // Whether this thread now acts as an unprivileged caller (capabilities
  // dropped).
  bool unprivileged() const { return dropped_caps_; }
  // Back to the daemon's credentials before the scope ends (before a
  // reply, or before work on the daemon's own behalf).  Idempotent.
  void end() noexcept { restore(); }

 private:
  void restore() noexcept;

  int err_ = 0;
  bool switched_ = false;      // fsuid/fsgid/groups changed
  bool dropped_caps_ = false;  // effective capabilities cleared
};

// The request's umask for one create (create, mknod, mkdir), when the
// kernel leaves it to us (FUSE_CAP_DONT_MASK: Filesystem::dont_mask()).
// The backing filesystem then applies it as it would for a local process:
// not at all under a parent's default ACL, which replaces it.  The umask is
// per process, so each worker thread gets its own filesystem context
// (unshare(CLONE_FS), once per thread, the first time it creates) and sets
// the request's umask for the scope; the daemon's own is 0 (fs/daemon.cc).
// If the unshare fails, the scope masks `*mode` itself instead: what the
// kernel did before, minus the default-ACL rule.
class CallerUmask {
 public:
  CallerUmask(fuse_req_t req, bool dont_mask, mode_t* mode);
  ~CallerUmask();
  CallerUmask(const CallerUmask&) = delete;
  CallerUmask& operator=(const CallerUmask&) = delete;

 private:
  bool set_ = false;
};

// Runs `body` as the caller: returns ActAsCaller's errno if the switch
// failed, else what `body` returns.
template <class F>
int as_caller(fuse_req_t req, F&& body) {
  ActAsCaller as(req);
  if (!as.ok()) return as.err();
  return body();
}

}  // namespace norefs::fs
