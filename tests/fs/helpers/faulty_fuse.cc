// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/helpers/faulty_fuse.cc — norefs_fs_faulty_fuse: an in-memory FUSE
// server that fails chosen reads and writes with EIO, used by
// tests/fs/fault_test.cc as the *backing directory* of a norefs mount.
//
//   norefs_fs_faulty_fuse [-o files=N,size=BYTES] <mountpoint>
//
// The root holds N regular files f0..f<N-1> (default 3) of BYTES bytes each
// (default 256 KiB); byte i of file k is (i + 13 k) % 251, a period no
// power-of-two offset error can hide.  Files can be written (and grow) and
// truncated; nothing is persisted.  They are opened direct_io and every
// timeout is 0, so each read and write of a client (norefs) reaches this
// process and sees the current rules.
//
// Faults are set through the control file ".faults" in the root, written by
// the test through this server's own mountpoint; each write is one command:
//   read <name> <off> <len>    every READ of <name> that overlaps
//                              [off, off+len) is answered EIO, whole
//   write <name> <off> <len>   the same for WRITE (nothing is written)
//   clear                      no faults any more
// Reading ".faults" gives "read_faults <n>\nwrite_faults <n>\n": how many
// EIO replies were sent, so a test can tell a fault was really hit.
//
// A READ that overlaps a bad range fails as a whole (like a bio that covers
// a bad sector): the client gets EIO for the good pages of the request too,
// and must retry them on their own to read them.
//
// Single-threaded (fuse_session_loop): no locks.  Exits 0 after a clean
// unmount (fusermount3 -u, SIGTERM, SIGINT).
#include <fuse_lowlevel.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr fuse_ino_t kRootIno = FUSE_ROOT_ID;
constexpr const char* kControlName = ".faults";

struct Range {
  fuse_ino_t ino;
  std::uint64_t off, len;
  bool overlaps(fuse_ino_t i, std::uint64_t o, std::uint64_t n) const {
    return i == ino && n > 0 && o < off + len && off < o + n;
  }
};

struct State {
  std::vector<std::string> data;  // file k: inode 2 + k
  std::vector<Range> bad_reads, bad_writes;
  unsigned long read_faults = 0, write_faults = 0;

  fuse_ino_t control_ino() const { return 2 + data.size(); }
  bool is_file(fuse_ino_t ino) const { return ino >= 2 && ino < control_ino(); }
  std::string& file(fuse_ino_t ino) { return data[ino - 2]; }
  std::string status() const {
    return "read_faults " + std::to_string(read_faults) + "\nwrite_faults " +
           std::to_string(write_faults) + "\n";
  }
  // The inode of "f<k>", or 0.
  fuse_ino_t lookup(const std::string& name) const {
    if (name == kControlName) return control_ino();
    if (name.size() < 2 || name[0] != 'f') return 0;
    char* end = nullptr;
    unsigned long k = std::strtoul(name.c_str() + 1, &end, 10);
    if (*end != '\0' || k >= data.size() || name != "f" + std::to_string(k)) return 0;
    return 2 + k;
  }
};

State g;  // one session, one thread

struct Options {
  unsigned long files = 3;
  unsigned long size = 256 << 10;
};

constexpr fuse_opt kOptSpecs[] = {
    {"files=%lu", offsetof(Options, files), 0},
    {"size=%lu", offsetof(Options, size), 0},
    FUSE_OPT_END,
};

bool fill_stat(fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  if (ino == kRootIno) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
  } else if (g.is_file(ino) || ino == g.control_ino()) {
    st->st_mode = S_IFREG | (ino == g.control_ino() ? 0600 : 0644);
    st->st_nlink = 1;
    st->st_size =
        static_cast<off_t>(ino == g.control_ino() ? g.status().size() : g.file(ino).size());
    st->st_blocks = (st->st_size + 511) / 512;
  } else {
    return false;
  }
  return true;
}

void ff_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fuse_ino_t ino = parent == kRootIno ? g.lookup(name) : 0;
  if (ino == 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = ino;
  e.generation = 1;
  fill_stat(ino, &e.attr);
  fuse_reply_entry(req, &e);  // timeouts 0
}

void ff_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  struct stat st;
  if (!fill_stat(ino, &st)) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_reply_attr(req, &st, 0);
}

void ff_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  if ((to_set & FUSE_SET_ATTR_SIZE) && g.is_file(ino)) {
    g.file(ino).resize(static_cast<std::size_t>(attr->st_size), '\0');
  }
  // Mode, owner and times are not kept: the files are fixtures.
  ff_getattr(req, ino, nullptr);
}

void ff_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino == kRootIno) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  if (!g.is_file(ino) && ino != g.control_ino()) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  if ((fi->flags & O_TRUNC) && g.is_file(ino)) g.file(ino).clear();
  fi->direct_io = 1;
  fi->keep_cache = 0;
  fuse_reply_open(req, fi);
}

void ff_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  if (off < 0) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  const auto pos = static_cast<std::uint64_t>(off);
  std::string text;
  const std::string* src;
  if (ino == g.control_ino()) {
    text = g.status();
    src = &text;
  } else if (g.is_file(ino)) {
    for (const Range& r : g.bad_reads) {
      if (r.overlaps(ino, pos, size)) {
        g.read_faults++;
        fuse_reply_err(req, EIO);
        return;
      }
    }
    src = &g.file(ino);
  } else {
    fuse_reply_err(req, ENOENT);
    return;
  }
  std::size_t n = pos >= src->size() ? 0 : std::min<std::size_t>(size, src->size() - pos);
  fuse_reply_buf(req, n ? src->data() + pos : nullptr, n);
}

// One control command; false if it is not one.
bool control(const std::string& cmd) {
  std::istringstream in(cmd);
  std::string verb, name;
  std::uint64_t off = 0, len = 0;
  in >> verb;
  if (verb == "clear") {
    g.bad_reads.clear();
    g.bad_writes.clear();
    return true;
  }
  if ((verb != "read" && verb != "write") || !(in >> name >> off >> len)) return false;
  fuse_ino_t ino = g.lookup(name);
  if (!g.is_file(ino)) return false;
  (verb == "read" ? g.bad_reads : g.bad_writes).push_back({ino, off, len});
  return true;
}

void ff_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
              fuse_file_info*) {
  if (ino == g.control_ino()) {
    if (!control(std::string(buf, size))) {
      std::fprintf(stderr, "faulty_fuse: bad command '%.*s'\n", static_cast<int>(size), buf);
      fuse_reply_err(req, EINVAL);
      return;
    }
    fuse_reply_write(req, size);
    return;
  }
  if (!g.is_file(ino) || off < 0) {
    fuse_reply_err(req, g.is_file(ino) ? EINVAL : ENOENT);
    return;
  }
  const auto pos = static_cast<std::uint64_t>(off);
  for (const Range& r : g.bad_writes) {
    if (r.overlaps(ino, pos, size)) {
      g.write_faults++;
      fuse_reply_err(req, EIO);
      return;
    }
  }
  std::string& f = g.file(ino);
  if (f.size() < pos + size) f.resize(pos + size, '\0');
  std::memcpy(f.data() + pos, buf, size);
  fuse_reply_write(req, size);
}

void ff_ok(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }
void ff_fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

}  // namespace

int main(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  Options opt;
  if (fuse_opt_parse(&args, &opt, kOptSpecs, nullptr) != 0) return 2;
  fuse_cmdline_opts cmd{};
  if (fuse_parse_cmdline(&args, &cmd) != 0 || cmd.mountpoint == nullptr) {
    std::fprintf(stderr, "usage: %s [-o files=N,size=BYTES] <mountpoint>\n", argv[0]);
    return 2;
  }
  for (unsigned long k = 0; k < opt.files; k++) {
    std::string s(opt.size, '\0');
    for (std::size_t i = 0; i < s.size(); i++) s[i] = static_cast<char>((i + 13 * k) % 251);
    g.data.push_back(std::move(s));
  }
  fuse_lowlevel_ops ops{};
  ops.lookup = ff_lookup;
  ops.getattr = ff_getattr;
  ops.setattr = ff_setattr;
  ops.open = ff_open;
  ops.read = ff_read;
  ops.write = ff_write;
  ops.flush = ff_ok;
  ops.release = ff_ok;
  ops.fsync = ff_fsync;

  int ret = 1;
  fuse_opt_add_arg(&args, "-ofsname=norefs_faulty,subtype=norefs_faulty");
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), nullptr);
  if (se != nullptr) {
    if (fuse_set_signal_handlers(se) == 0) {
      if (fuse_session_mount(se, cmd.mountpoint) == 0) {
        std::fprintf(stderr, "faulty_fuse: %s: %lu files of %lu bytes\n", cmd.mountpoint, opt.files,
                     opt.size);
        ret = fuse_session_loop(se) == 0 ? 0 : 1;
        fuse_session_unmount(se);
      }
      fuse_remove_signal_handlers(se);
    }
    fuse_session_destroy(se);
  }
  std::free(cmd.mountpoint);
  fuse_opt_free_args(&args);
  return ret;
}
