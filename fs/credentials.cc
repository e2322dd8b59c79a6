// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/credentials.h"

#include <linux/capability.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>
#include <vector>

#include "alloc/die.h"

namespace norefs::fs {

namespace {

// The daemon's own credentials, recorded by init() before the session
// starts its workers and read-only afterwards (the workers are created
// after init(), which orders these plain writes before their reads).
struct DaemonCredentials {
  bool enabled = false;
  uid_t fsuid = 0;
  gid_t fsgid = 0;
  std::vector<gid_t> groups;
  __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3]{};
};
DaemonCredentials g_daemon;

__user_cap_header_struct cap_header() {
  __user_cap_header_struct h{};
  h.version = _LINUX_CAPABILITY_VERSION_3;
  h.pid = 0;  // the calling thread
  return h;
}

long sys_setgroups(std::size_t n, const gid_t* list) { return syscall(SYS_setgroups, n, list); }
// setfsuid/setfsgid return the previous id and cannot report failure; an
// id of -1 changes nothing and returns the current one (the check below).
uid_t sys_setfsuid(uid_t u) { return static_cast<uid_t>(syscall(SYS_setfsuid, u)); }
gid_t sys_setfsgid(gid_t g) { return static_cast<gid_t>(syscall(SYS_setfsgid, g)); }
long sys_capset(const __user_cap_data_struct* data) {
  __user_cap_header_struct h = cap_header();
  return syscall(SYS_capset, &h, data);
}

}  // namespace

void ActAsCaller::init(bool use_daemon_credentials) {
  g_daemon = DaemonCredentials{};
  if (use_daemon_credentials || geteuid() != 0) return;
  g_daemon.fsuid = geteuid();
  g_daemon.fsgid = getegid();
  int n = getgroups(0, nullptr);
  NOREFS_CHECK(n >= 0, "getgroups failed");
  g_daemon.groups.resize(static_cast<std::size_t>(n));
  n = getgroups(n, g_daemon.groups.data());
  NOREFS_CHECK(n >= 0, "getgroups failed");
  g_daemon.groups.resize(static_cast<std::size_t>(n));
  __user_cap_header_struct h = cap_header();
  NOREFS_CHECK(syscall(SYS_capget, &h, g_daemon.caps) == 0, "capget failed");
  g_daemon.enabled = true;
}

bool ActAsCaller::enabled() { return g_daemon.enabled; }

ActAsCaller::ActAsCaller(fuse_req_t req) {
  if (!g_daemon.enabled) return;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->uid == 0 && ctx->gid == 0) return;
  // The kernel never sends an unmapped id (it fails such requests with
  // EOVERFLOW); -1 would also make setfsuid() a no-op, so refuse it here.
  if (ctx->uid == static_cast<uid_t>(-1) || ctx->gid == static_cast<gid_t>(-1)) {
    err_ = EPERM;
    return;
  }
  // The caller's supplementary groups.  Without them a member of a group
  // that a file's group bits deny would be judged as "other", which may
  // allow more: so a caller whose groups cannot be read (it has exited,
  // or its pid is not visible here) is refused.
  gid_t small[64];
  std::vector<gid_t> large;
  gid_t* list = small;
  int n = fuse_req_getgroups(req, 64, small);
  if (n > 64) {
    large.resize(static_cast<std::size_t>(n));  // bad_alloc -> ENOMEM at the boundary
    n = fuse_req_getgroups(req, n, large.data());
    list = large.data();
    if (n > static_cast<int>(large.size())) n = -EAGAIN;  // grew meanwhile
  }
  if (n < 0) {
    err_ = EPERM;
    return;
  }
  if (sys_setgroups(static_cast<std::size_t>(n), list) != 0) {
    err_ = EPERM;
    return;
  }
  switched_ = true;  // from here on, restore() puts everything back
  sys_setfsgid(ctx->gid);
  sys_setfsuid(ctx->uid);  // leaving fsuid 0 clears the fs capabilities too
  if (sys_setfsuid(static_cast<uid_t>(-1)) != ctx->uid ||
      sys_setfsgid(static_cast<gid_t>(-1)) != ctx->gid) {
    restore();
    err_ = EPERM;
    return;
  }
  if (ctx->uid != 0) {
    // Also CAP_SYS_ADMIN (trusted.* xattrs), CAP_SYS_RESOURCE (reserved
    // blocks), ...: nothing the caller could not do itself.  Permitted
    // and inheritable stay, so restore() can raise them again.
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3];
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) {
      none[i] = g_daemon.caps[i];
      none[i].effective = 0;
    }
    if (sys_capset(none) != 0) {
      restore();
      err_ = EPERM;
      return;
    }
    dropped_caps_ = true;
  }
}

ActAsCaller::~ActAsCaller() { restore(); }

void ActAsCaller::restore() noexcept {
  // Each step can only fail if the thread lost what init() saw it hold: a
  // worker left with a caller's credentials would run the next request
  // with them, so that is a broken invariant, not an error to answer.
  if (dropped_caps_) {
    NOREFS_CHECK(sys_capset(g_daemon.caps) == 0, "cannot restore the daemon's capabilities");
    dropped_caps_ = false;
  }
  if (switched_) {
    sys_setfsuid(g_daemon.fsuid);
    sys_setfsgid(g_daemon.fsgid);
    NOREFS_CHECK(sys_setfsuid(static_cast<uid_t>(-1)) == g_daemon.fsuid &&
                     sys_setfsgid(static_cast<gid_t>(-1)) == g_daemon.fsgid,
                 "cannot restore the daemon's fsuid/fsgid");
    NOREFS_CHECK(sys_setgroups(g_daemon.groups.size(), g_daemon.groups.data()) == 0,
                 "cannot restore the daemon's groups");
    switched_ = false;
  }
}

CallerUmask::CallerUmask(fuse_req_t req, bool dont_mask, mode_t* mode) {
  if (!dont_mask) return;  // the kernel masked the mode already
  const mode_t mask = fuse_req_ctx(req)->umask & 0777;
  // -1: unshare failed on this thread; 1: this thread's umask is its own.
  thread_local int own_fs = 0;
  if (own_fs == 0) {
    own_fs = unshare(CLONE_FS) == 0 ? 1 : -1;
    static std::atomic<bool> said{false};
    if (own_fs < 0 && !said.exchange(true)) {
      std::fprintf(stderr,
                   "norefs: unshare(CLONE_FS) failed (%s): the umask is applied without "
                   "regard to default ACLs\n",
                   std::generic_category().message(errno).c_str());
    }
  }
  if (own_fs < 0) {
    *mode &= ~mask;
    return;
  }
  umask(mask);
  set_ = true;
}

CallerUmask::~CallerUmask() {
  if (set_) umask(0);
}

}  // namespace norefs::fs
