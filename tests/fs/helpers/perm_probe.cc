// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/helpers/perm_probe.cc — norefs_fs_perm_probe: becomes an
// unprivileged user and runs a fixed script of file operations in a tree
// laid out by tests/fs/permission_test.cc, printing one line per operation:
//
//   <step>: ok|<ERRNO NAME>[ mode=<octal> uid=<n> gid=<n>]
//
// (the attributes of the step's object afterwards, where they matter).  The
// test runs it once on a native directory and once through a norefs mount
// of an identical tree, and compares the two transcripts line by line: the
// mount must behave exactly as the native filesystem does for this user.
//
//   norefs_fs_perm_probe <uid> <gid> <group,group,...|-> <root>
//
// Exits 0 after the script (whatever each step returned), 100 on bad usage,
// 101 if it could not become the user.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* err_name(int e) {
  if (e == 0) return "ok";
  const char* n = strerrorname_np(e);
  return n ? n : "?";
}

// Prints the step's result, and `attrs_of`'s attributes if given (lstat, as
// the user: "stat:<ERRNO>" if even that is refused).
void report(const char* step, int rc, const char* attrs_of = nullptr) {
  const int e = rc < 0 ? errno : 0;
  std::printf("%s: %s", step, err_name(e));
  if (attrs_of) {
    struct stat st {};
    if (lstat(attrs_of, &st) == 0) {
      std::printf(" mode=%o uid=%u gid=%u", static_cast<unsigned>(st.st_mode & 07777),
                  static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_gid));
    } else {
      std::printf(" stat:%s", err_name(errno));
    }
  }
  std::printf("\n");
}

int open_close(const char* path, int flags, mode_t mode = 0) {
  int fd = open(path, flags | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

int read_all(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf);
  int e = errno;
  close(fd);
  errno = e;
  return n < 0 ? -1 : 0;
}

int write_one(const char* path, int flags) {
  int fd = open(path, O_WRONLY | flags | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, "x", 1);
  int e = errno;
  close(fd);
  errno = e;
  return n == 1 ? 0 : -1;
}

int set_times(const char* path, bool now) {
  timespec tv[2];
  if (now) {
    tv[0].tv_nsec = tv[1].tv_nsec = UTIME_NOW;
    tv[0].tv_sec = tv[1].tv_sec = 0;
  } else {
    tv[0] = tv[1] = timespec{1000000000, 0};
  }
  return utimensat(AT_FDCWD, path, tv, AT_SYMLINK_NOFOLLOW);
}

// Lists a directory; prints the names it saw (sorted) after the result.
int list_dir(const char* path, std::string* names) {
  DIR* d = opendir(path);
  if (!d) return -1;
  std::vector<std::string> v;
  errno = 0;
  while (dirent* e = readdir(d)) v.emplace_back(e->d_name);
  int e = errno;
  closedir(d);
  if (e) {
    errno = e;
    return -1;
  }
  std::sort(v.begin(), v.end());
  for (const std::string& n : v) *names += " " + n;
  return 0;
}

void report_list(const char* step, const char* path) {
  std::string names;
  int rc = list_dir(path, &names);
  std::printf("%s: %s%s\n", step, err_name(rc < 0 ? errno : 0), names.c_str());
}

void script() {
  // Reading and opening.
  report("read secret (root 0600)", read_all("secret"));
  report("read grp_r via a supplementary group (0640)", read_all("grp_r"));
  report("read grp_deny as a group member (0604)", read_all("grp_deny"));
  report("read dir_x/f through a directory without search", read_all("dir_x/f"));
  report("open secret O_WRONLY|O_TRUNC", open_close("secret", O_WRONLY | O_TRUNC));
  report("open grp_r O_RDWR", open_close("grp_r", O_RDWR));
  report("append to secret", write_one("secret", O_APPEND), "secret");
  report("write pub_rw", write_one("pub_rw", 0), "pub_rw");
  report("open pub_rw O_TRUNC", open_close("pub_rw", O_WRONLY | O_TRUNC), "pub_rw");
  report("access secret R_OK", access("secret", R_OK));
  report("access grp_r R_OK", access("grp_r", R_OK));
  report("access grp_r W_OK", access("grp_r", W_OK));
  report_list("list dir_r (r, no x)", "dir_r");
  report("stat dir_r/f", 0, "dir_r/f");
  report_list("list dir_x (no r, no x)", "dir_x");
  report_list("list sticky", "sticky");

  // Creating: owner and group from the start.
  report("create in dir_ro", open_close("dir_ro/new", O_CREAT | O_EXCL | O_WRONLY, 0644));
  report("create in dir_w", open_close("dir_w/new", O_CREAT | O_EXCL | O_WRONLY, 0640),
         "dir_w/new");
  report("create in sgid_dir", open_close("sgid_dir/new", O_CREAT | O_EXCL | O_WRONLY, 0640),
         "sgid_dir/new");
  report("mkdir in dir_ro", mkdir("dir_ro/d", 0755));
  report("mkdir in dir_w", mkdir("dir_w/d", 0750), "dir_w/d");
  report("mkdir in sgid_dir", mkdir("sgid_dir/d", 0750), "sgid_dir/d");
  report("mkfifo in dir_w", mknod("dir_w/fifo", S_IFIFO | 0600, 0), "dir_w/fifo");
  report("mknod char device in dir_w", mknod("dir_w/null", S_IFCHR | 0666, makedev(1, 3)));
  report("symlink in dir_w", symlink("pub_rw", "dir_w/sym"), "dir_w/sym");
  report("symlink in dir_ro", symlink("pub_rw", "dir_ro/sym"));
  report("link secret into dir_w (protected_hardlinks)", link("secret", "dir_w/hl_secret"));
  report("link pub_rw into dir_w", link("pub_rw", "dir_w/hl_pub"), "dir_w/hl_pub");
  report("link own into dir_ro", link("own", "dir_ro/hl_own"));

  // Removing and renaming.
  report("unlink dir_ro/f", unlink("dir_ro/f"));
  report("unlink dir_w/theirs (not sticky)", unlink("dir_w/theirs"));
  report("unlink sticky/theirs", unlink("sticky/theirs"));
  report("unlink sticky/mine", unlink("sticky/mine"));
  report("rename sticky/theirs2 -> sticky/moved", rename("sticky/theirs2", "sticky/moved"));
  report("rename dir_w/new -> dir_ro/new", rename("dir_w/new", "dir_ro/new"));
  report("rename dir_w/new -> dir_w/renamed", rename("dir_w/new", "dir_w/renamed"),
         "dir_w/renamed");
  report("rmdir sticky/their_dir", rmdir("sticky/their_dir"));
  report("rmdir dir_ro/sub", rmdir("dir_ro/sub"));
  report("rmdir dir_w/d", rmdir("dir_w/d"));

  // Attributes.
  report("chmod pub_rw (not the owner)", chmod("pub_rw", 0600), "pub_rw");
  report("chmod own", chmod("own", 0600), "own");
  report("chown own to another user", chown("own", 60002, static_cast<gid_t>(-1)), "own");
  report("chown own to a member group", chown("own", static_cast<uid_t>(-1), 60010), "own");
  report("chown own to a foreign group", chown("own", static_cast<uid_t>(-1), 60020), "own");
  report("chown pub_rw (not the owner)", chown("pub_rw", static_cast<uid_t>(-1), 60001));
  report("utimes pub_rw to a time (not the owner)", set_times("pub_rw", false));
  report("utimes pub_rw to now (writable)", set_times("pub_rw", true));
  report("utimes secret to now", set_times("secret", true));
  report("utimes own to a time", set_times("own", false));
  report("truncate grp_r (read only)", truncate("grp_r", 0));
  report("truncate pub_rw", truncate("pub_rw", 3), "pub_rw");
  report("setxattr user.k on pub_rw", setxattr("pub_rw", "user.k", "v", 1, 0));
  report("setxattr user.k on grp_r", setxattr("grp_r", "user.k", "v", 1, 0));
  report("setxattr trusted.k on own", setxattr("own", "trusted.k", "v", 1, 0));
  char val[64];
  report("getxattr trusted.t on tx (set by root)",
         getxattr("tx", "trusted.t", val, sizeof val) < 0 ? -1 : 0);
  char list[256];
  ssize_t nl = listxattr("tx", list, sizeof list);
  std::printf("listxattr tx: %s", err_name(nl < 0 ? errno : 0));
  for (ssize_t i = 0; nl > 0 && i < nl; i += static_cast<ssize_t>(std::strlen(list + i)) + 1) {
    std::printf(" %s", list + i);
  }
  std::printf("\n");

  // setuid and setgid bits.
  report("write suid_w (06777, not the owner)", write_one("suid_w", 0), "suid_w");
  report("truncate suid_t (06777)", truncate("suid_t", 1), "suid_t");
  report("open suid_o O_TRUNC (06777)", open_close("suid_o", O_WRONLY | O_TRUNC), "suid_o");
  report("chown suid_own to a member group", chown("suid_own", static_cast<uid_t>(-1), 60010),
         "suid_own");
  report("chmod sg_chmod 02755 (group not ours)", chmod("sg_chmod", 02755), "sg_chmod");
  report("chmod sg_ours 02755 (a member group)", chmod("sg_ours", 02755), "sg_ours");
  report("write sgid_noexec (02666: no group execute)", write_one("sgid_noexec", 0), "sgid_noexec");
  std::fflush(stdout);
}

bool parse_id(const char* s, unsigned long* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtoul(s, &end, 10);
  return errno == 0 && end != s && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <uid> <gid> <group,...|-> <root>\n", argv[0]);
    return 100;
  }
  unsigned long uid, gid;
  if (!parse_id(argv[1], &uid) || !parse_id(argv[2], &gid)) return 100;
  std::vector<gid_t> groups;
  if (std::strcmp(argv[3], "-") != 0) {
    std::string s = argv[3];
    std::size_t pos = 0;
    while (pos <= s.size()) {
      std::size_t comma = s.find(',', pos);
      if (comma == std::string::npos) comma = s.size();
      unsigned long g;
      if (!parse_id(s.substr(pos, comma - pos).c_str(), &g)) return 100;
      groups.push_back(static_cast<gid_t>(g));
      pos = comma + 1;
    }
  }
  if (setgroups(groups.size(), groups.data()) != 0 ||
      setresgid(static_cast<gid_t>(gid), static_cast<gid_t>(gid), static_cast<gid_t>(gid)) != 0 ||
      setresuid(static_cast<uid_t>(uid), static_cast<uid_t>(uid), static_cast<uid_t>(uid)) != 0) {
    std::perror("becoming the user");
    return 101;
  }
  if (chdir(argv[4]) != 0) {
    std::perror(argv[4]);
    return 101;
  }
  umask(022);
  script();
  return 0;
}
