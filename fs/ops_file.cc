// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/ops_file.cc — open files: open, create, read, write, flush, release,
// fsync, fallocate, lseek, copy_file_range.
//
// Caching.  A regular file's CachedFile (Inode::cached) is created on its
// first open and kept while the Inode lives; each open handle has its own
// cache::FileHandle (readahead state).  Reads come from the cache; every
// change goes to the backing file first and then to the cache, both under
// the Inode's writer lock (see fs/inode.h), so the cache always matches the
// backing file as far as our own changes go.  Changes from outside are
// caught at open and at getattr (close-to-open, Filesystem::check_locked).
//
// Opening.  A read-only open gets direct_io, so that every read through it
// reaches our cache; MAP_PRIVATE mappings and exec work (the kernel reads
// those pages through FUSE_READ), and so do shared mappings, with
// FUSE_DIRECT_IO_ALLOW_MMAP (fs/fuse_io.h).  An open that may write does
// not: its writes go through the kernel's page cache, and its reads come
// from there too (keep_cache unless the file changed from outside, as with
// -o kernel_cache, where no open gets direct_io).
//
// Why writes never go direct.  A direct write is not ordered against the
// page cache that serves a shared mapping of the same file: the kernel
// writes back and drops the written range before it sends FUSE_WRITE
// (fuse_direct_io()), not after, so a store to the mapping in between
// faults the page back in through a FUSE_READ that we may answer before
// the write reaches us.  The page then holds the old bytes where the write
// went, the mapping shows them, and the page's writeback puts them back
// over the write: a lost write (xfstests generic/346; 5 runs of 10 here,
// tests/fs/coherence_mmap_test.cc).  We cannot order it: the FUSE_READ
// came first.  A write through the page cache copies into the very page
// the mapping uses, under the page lock, so the two always merge.  What it
// costs (reads through a writable handle come from the kernel's cache, not
// ours; each write also copies into a kernel page): docs/permissions.md.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "fs/backing_fd.h"
#include "fs/credentials.h"
#include "fs/ops_common.h"

namespace norefs::fs {

OpenFile::~OpenFile() {
  close(fd);
  if (backing) backing->deactivate();
}

namespace {

using cache::kPageSize;

// The kernel's open for exec (do_open_execat()) carries __FMODE_EXEC in the
// flags it sends; the UAPI headers do not name it.
constexpr int kExecOpen = 040;

// ── Reply modes ──
// copy: PageCache::read into a thread-local buffer, fuse_reply_buf.
// iov:  PageCache::read_iov; when the fast path holds the whole read (at
//       most `batch` pages), the reply is sent with fuse_reply_iov straight
//       from the page iovecs while the read-side section is held: the
//       writev copies the bytes into the kernel before the section ends, so
//       pages are never handed to the kernel by reference.  Otherwise the
//       bytes are in the buffer and go as with copy.  Inside the section the
//       sender takes libfuse's short request and session locks (disarm(),
//       fuse_free_req()) and mallocs; none of them is ever held across a
//       grace period.
// auto: iov from one page (4 KiB) up, copy below.
//
// Measured 2026-11-30 on this 2-core VM, single thread, warm cache, best of
// 5 (a microbenchmark of PageCache::read/read_iov plus the reply's writev,
// fuse_reply_iov's malloc of cnt+1 iovecs included; the full FUSE round
// trip through fio was too noisy on this shared machine, +-50 %, to tell
// the modes apart), ns per read:
//                  writev to /dev/null        pwritev to a memfd
//                  (user side only)           (plus one kernel copy)
//   size           copy    iov   iov/copy     copy    iov   iov/copy
//   16 B            710    705   0.99          805    853   1.06
//   512 B           647    654   1.01         1133   1001   0.88
//   4 KiB           872    485   0.56         1186   1172   0.99
//   16 KiB          908    309   0.34         3286   3111   0.95
//   64 KiB         6127    668   0.11        15931  14144   0.89
//   128 KiB       12551  12032   0.96        30639  27860   0.91
// Below a page the two are equal within noise (the saved memcpy is no
// bigger than fuse_reply_iov's malloc); from a page up iov saves the whole
// user-side copy.  At 128 KiB a read spans 32-33 pages, more than the
// default batch (31), so read_iov falls back to copying: iov == copy there.
constexpr std::size_t kIovMinBytes = kPageSize;

bool use_iov(ReplyMode m, std::size_t size) {
  switch (m) {
    case ReplyMode::copy:
      return false;
    case ReplyMode::iov:
      return true;
    case ReplyMode::automatic:
      return size >= kIovMinBytes;
  }
  return false;
}

// The reply buffer: one per worker thread, grown as needed (a read is at
// most max_read, 1 MiB).  Freed when the thread exits.
std::byte* reply_buffer(std::size_t n) {
  thread_local std::unique_ptr<std::byte[]> buf;
  thread_local std::size_t cap = 0;
  if (n > cap) {
    const std::size_t c = std::max<std::size_t>(64 << 10, (n + kPageSize - 1) & ~(kPageSize - 1));
    std::unique_ptr<std::byte[]> grown(new std::byte[c]);  // bad_alloc -> ENOMEM at the boundary
    buf = std::move(grown);
    cap = c;
  }
  // clang 14's analyzer destroys a function-local thread_local at scope
  // exit, as if it were automatic, and reports this use as after the free.
  // NOLINTNEXTLINE(clang-analyzer-cplusplus.NewDelete)
  return buf.get();
}

// ── Interrupts ──
// An interrupted read must stop the fast path: the cache polls
// ReadOptions::interrupted before every page.  The flag is set from a
// callback registered with fuse_req_interrupt_func(), which takes the
// request's lock and libfuse's session lock (se->lock, which every request
// already takes twice); and it must be unregistered before the reply (see
// disarm()), which takes them again.
//
// That is registered only for reads larger than one page.  A read within
// one page does not need it: once its page is cached it completes without
// blocking on anything an interrupt could cut short, and a miss is one
// backing read of at most a readahead window, which completes promptly.
//
// Cost, measured 2026-11-30 on this 2-core VM (a microbenchmark driving
// libfuse 3.14's fuse_session_process_buf() with 16-byte READs through a
// custom io that discards the replies, so only userspace dispatch counts),
// ns per request per thread, arm + disarm vs none:
//   1 thread: 205-368 vs 216-318 (no difference);
//   2 threads: 748-902 vs 531-600 (+~250 ns, se->lock contention);
//   4 threads: 1669-2063 vs 942-1058 (+~800 ns).
// On a 10-20 us FUSE round trip that is 2-5 % under concurrency, for
// nothing on small reads.
class Interrupt {
 public:
  Interrupt() = default;
  ~Interrupt() { disarm(); }
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  void arm(fuse_req_t req) {
    req_ = req;
    fuse_req_interrupt_func(req, &Interrupt::on_interrupt, &flag_);
  }
  // Unregisters.  fuse_req_interrupt_func() takes the request's lock, which
  // libfuse holds while it runs a callback, and clears the callback under
  // the session lock that the interrupt path reads it under: once this
  // returns, no callback runs with &flag_ or will.  Without it a late
  // callback could write into this stack frame after the reply.
  void disarm() {
    if (req_) {
      fuse_req_interrupt_func(req_, nullptr, nullptr);
      req_ = nullptr;
    }
  }
  const std::atomic<bool>* flag() const { return req_ ? &flag_ : nullptr; }
  // Relaxed: a hint polled by the reader; it publishes nothing else.
  bool fired() const { return flag_.load(std::memory_order_relaxed); }

 private:
  static void on_interrupt(fuse_req_t /*req*/, void* data) {
    static_cast<std::atomic<bool>*>(data)->store(true, std::memory_order_relaxed);
  }
  std::atomic<bool> flag_{false};
  fuse_req_t req_ = nullptr;
};

// cache=off or an uncached file: pread until `size` or end of file (a short
// reply means end of file to the kernel's page cache).
int read_passthrough(fuse_req_t req, const OpenFile& of, std::byte* buf, std::size_t size,
                     off_t off) {
  std::size_t done = 0;
  while (done < size) {
    ssize_t r = pread(of.fd, buf + done, size - done, off + static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (done > 0) break;
      return last_errno();
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf), done);
  return 0;
}

int do_read(fuse_req_t req, std::size_t size, off_t off, fuse_file_info* fi) {
  if (off < 0) return EINVAL;
  Filesystem& fs = fs_of(req);
  OpenFile& of = *open_file_of(fi);
  std::byte* buf = reply_buffer(size);
  if (!of.ch) return read_passthrough(req, of, buf, size, off);

  cache::PageCache& pc = fs.cache();
  const auto pos = static_cast<std::uint64_t>(off);
  Interrupt intr;
  if (size > kPageSize) intr.arm(req);
  cache::ReadOptions ro;
  ro.interrupted = intr.flag();
  ssize_t n;
  if (use_iov(fs.opts().reply, size)) {
    struct Ctx {
      fuse_req_t req;
      Interrupt* intr;
    } ctx{req, &intr};
    // Captures one pointer: std::function keeps it inline, no allocation.
    const cache::IovSender send = [&ctx](const iovec* iov, int cnt) {
      ctx.intr->disarm();
      fuse_reply_iov(ctx.req, iov, cnt);
    };
    bool sent = false;
    n = pc.read_iov(*of.ch, pos, size, buf, send, &sent, ro);
    if (sent) return 0;
  } else {
    n = pc.read(*of.ch, pos, size, buf, ro);
  }
  const bool interrupted = intr.fired();
  intr.disarm();
  if (n < 0) return static_cast<int>(-n);
  // With the kernel's page cache a short read means end of file (it would
  // zero the rest of the page and shrink i_size): an interrupted short read
  // is answered EINTR there.  Through direct_io it reaches the reader as a
  // short read, which is what an interrupted read(2) returns.
  if (interrupted && of.kernel_paged && static_cast<std::size_t>(n) < size &&
      pos + static_cast<std::uint64_t>(n) < of.ch->file().size()) {
    return EINTR;
  }
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
  return 0;
}

void sfs_read(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t off, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_read(req, size, off, fi); });
}

// ── Opening ──

// Drops a handle: after release, or when the reply to open failed.  Nothing
// on the way allocates (release has no error to answer with).
void drop_handle(Filesystem& fs, OpenFile* of) noexcept {
  Inode* in = of->inode;
  fs.untrack(of);
  delete of;  // closes the backing fd, drops the handle's CachedFile reference
  std::unique_ptr<Inode> dead = fs.inodes().open_unref(in);
}

// Opens `in` (or adopts `fd`, already open from create) and replies with
// fuse_reply_open, or fuse_reply_create when `e` is given.  Closes `fd` on
// failure.
int open_common(fuse_req_t req, Filesystem& fs, Inode& in, fuse_file_info* fi, int flags, int fd,
                const fuse_entry_param* e) {
  std::shared_ptr<cache::CachedFile> cf;
  HandleBacking* active = nullptr;  // activated for this handle: deactivated with it
  bool changed = false;
  int err = 0;
  {
    std::lock_guard lk(in.writer_mu);
    // The cache's own fd and the coherence check: the daemon's work.
    if (fs.caching() && in.is_reg()) {
      changed = fs.attach_and_check_locked(in, &err);
      if (!err) active = HandleBacking::of(in.cached.get());
    }
    // The client's fd: as the caller, so that the backing file's modes and
    // ACLs decide, and a truncate clears setuid/setgid as for the caller.
    bool exec_open = false;  // exec of a file the caller may run but not read: below
    if (!err)
      err = as_caller(req, [&] {
        if (fd < 0) {
          ProcPath p(in.fd);
          fd = open(p.c_str(), flags | O_CLOEXEC);  // O_TRUNC, if asked, truncates here
          if (fd < 0 && errno == EACCES && (fi->flags & kExecOpen) &&
              (flags & O_ACCMODE) == O_RDONLY &&
              faccessat(AT_FDCWD, p.c_str(), X_OK, AT_EACCESS) == 0) {
            exec_open = true;
            return 0;
          }
          if (fd < 0) return last_errno();
        } else if (flags & O_TRUNC) {
          if (ftruncate(fd, 0) != 0) return last_errno();
        }
        return 0;
      });
    if (exec_open) {
      // The kernel's exec reads the binary through this handle; a local
      // exec of a 0711 file needs only execute permission, which the
      // caller was just found to have.  The handle then reads as the
      // daemon, for that exec alone (the kernel opens it for no read(2)).
      ProcPath p(in.fd);
      fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) err = last_errno();
    }
    if (!err && (flags & O_TRUNC) && in.cached) {
      (void)fs.cache().truncate(*in.cached, 0);
      fs.restamp_locked(in);
    }
    cf = in.cached;
  }
  if (err) {
    if (active) active->deactivate();
    if (fd >= 0) close(fd);
    return err;
  }
  // See "Opening" at the top.  Without a cache (cache=off) nothing tells
  // us whether the file changed since the kernel cached it: never keep.
  const bool kernel_paged = fs.opts().kernel_cache || (flags & O_ACCMODE) != O_RDONLY;
  std::unique_ptr<OpenFile> of;
  try {
    of = std::make_unique<OpenFile>(fd, flags, &in, kernel_paged);
  } catch (...) {
    if (active) active->deactivate();
    close(fd);
    throw;
  }
  of->backing = active;
  if (cf) of->ch.emplace(std::move(cf));
  fs.track(of.get());  // may throw (bad_alloc): before anything that needs undoing
  fs.inodes().open_ref(&in);
  fi->fh = reinterpret_cast<std::uintptr_t>(of.get());
  fi->direct_io = kernel_paged ? 0 : 1;
  fi->keep_cache = kernel_paged && fs.caching() && !changed ? 1 : 0;
  OpenFile* raw = of.release();
  int r = e ? fuse_reply_create(req, e, fi) : fuse_reply_open(req, fi);
  if (r == -ENOENT) drop_handle(fs, raw);  // the opener is gone: no release follows
  return 0;
}

// Flags for the backing open: the client's, less what the kernel already
// did (create, exclusive, no-follow: resolved by the kernel's path walk;
// reopening /proc/self/fd/N with O_NOFOLLOW would fail) and O_DIRECT (our
// reads and writes use unaligned buffers; direct I/O is ours to give).
int backing_flags(int flags) {
  return flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT | kExecOpen);
}

int do_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Inode& in = inode_of(req, ino);
  if (in.is_dir()) return EISDIR;
  if (in.is_lnk()) return ELOOP;
  // The backing file was removed or renamed over outside the mount while
  // the kernel still maps the name to this inode (entry_timeout): ESTALE
  // makes the VFS look the name up again (do_filp_open()'s LOOKUP_REVAL
  // retry), which finds the new file or none.  Close-to-open, as on NFS.
  // Not when our own unlink or rename removed the last name: the kernel
  // dropped that dentry, so this is a reopen through /proc/<pid>/fd/N.
  struct stat st {};
  if (in.is_reg() && !in.unlinked_through_mount.load(std::memory_order_relaxed) &&
      fstat(in.fd, &st) == 0 && st.st_nlink == 0) {
    return ESTALE;
  }
  return open_common(req, fs_of(req), in, fi, backing_flags(fi->flags), -1, nullptr);
}

void sfs_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_open(req, ino, fi); });
}

int do_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  if (int err = check_name(name)) return err;
  Filesystem& fs = fs_of(req);
  Inode& dir = inode_of(req, parent);
  int flags = backing_flags(fi->flags);
  // O_NOFOLLOW: a symlink at `name` (say, to a path outside) is never
  // followed by the daemon.  O_EXCL first, to know whether we created it:
  // an existing one is truncated (if asked) under the writer lock, in
  // open_common().
  const int base = (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC;
  bool created = true;
  int fd = -1;
  fuse_entry_param e;
  // As the caller: the new file is the caller's from the moment it exists.
  if (int err = as_caller(req, [&] {
        {
          CallerUmask um(req, fs.dont_mask(), &mode);
          fd = openat(dir.fd, name, base | O_CREAT | O_EXCL, mode);
        }
        if (fd < 0 && errno == EEXIST && !(fi->flags & O_EXCL)) {
          created = false;
          fd = openat(dir.fd, name, base);
        }
        if (fd < 0) return last_errno();
        return do_lookup(fs, dir, name, &e);
      })) {
    if (fd >= 0) close(fd);
    return err;
  }
  if (created) flags &= ~O_TRUNC;
  Inode& in = inode_of(req, e.ino);
  int err;
  try {
    err = open_common(req, fs, in, fi, flags, fd, &e);
  } catch (...) {
    std::unique_ptr<Inode> dead = fs.inodes().forget(&in, 1);
    throw;
  }
  if (err) std::unique_ptr<Inode> dead = fs.inodes().forget(&in, 1);  // the kernel got no entry
  return err;
}

void sfs_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                fuse_file_info* fi) {
  reply_errno(req, [&] { return do_create(req, parent, name, mode, fi); });
}

void sfs_release(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  drop_handle(fs_of(req), open_file_of(fi));
  fuse_reply_err(req, 0);
}

// close(dup()): the backing filesystem sees a close (NFS flushes, reports
// deferred write errors), our fd stays open until release.
int do_flush(fuse_req_t req, fuse_file_info* fi) {
  int fd = dup(open_file_of(fi)->fd);
  if (fd < 0) return last_errno();
  if (close(fd) != 0) return last_errno();
  fuse_reply_err(req, 0);
  return 0;
}

void sfs_flush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_flush(req, fi); });
}

int do_fsync(fuse_req_t req, int datasync, fuse_file_info* fi) {
  int fd = open_file_of(fi)->fd;
  if ((datasync ? fdatasync(fd) : fsync(fd)) != 0) return last_errno();
  fuse_reply_err(req, 0);
  return 0;
}

void sfs_fsync(fuse_req_t req, fuse_ino_t /*ino*/, int datasync, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_fsync(req, datasync, fi); });
}

// ── Changes: backing file first, then the cache, under the writer lock ──

// A write into a file that may carry setuid/setgid bits runs as the caller,
// and so do fallocate and copy_file_range into it: the backing filesystem
// then clears the bits as it would for a local process (file_remove_privs():
// setuid always, setgid with group execute or when the writer is not in the
// file's group, neither for a writer with CAP_FSETID).  The kernel does not
// always do it first: an O_DIRECT write, fallocate and copy_file_range reach
// us with no mode change ahead of them, and a write through the page cache
// only when the kernel's cached mode shows the bits (libfuse 3.14 cannot
// negotiate FUSE_HANDLE_KILLPRIV).  Every other
// change runs without a switch: the handle's fd was opened as the caller,
// and the kernel checks nothing more on write.  Context: in.writer_mu held.
// When the bits went, the kernel's cached attributes are told before the
// reply (invalidate_kernel_attrs()).
template <class F>
int change_as_writer(fuse_req_t req, Inode& in, int fd, F&& body) {
  if (!in.setid.load(std::memory_order_relaxed)) return body();
  int err = as_caller(req, body);
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    in.note_mode(st.st_mode);
    if (!(st.st_mode & (S_ISUID | S_ISGID))) invalidate_kernel_attrs(req, &in);
  }
  return err;
}

int do_write(fuse_req_t req, const char* data, std::size_t size, off_t off, fuse_file_info* fi) {
  Filesystem& fs = fs_of(req);
  OpenFile& of = *open_file_of(fi);
  Inode& in = *of.inode;
  FileChange change(fs, in);
  ssize_t n = -1;
  off_t pos = off;
  // EIO, ENOSPC...: the cache is untouched.
  if (int err = change_as_writer(req, in, of.fd, [&] {
        if (of.flags & O_APPEND) {
          // The backing fd appends at the backing file's current end; where
          // that was is read back from the fd's offset (serialized by the lock).
          n = write(of.fd, data, size);
          if (n >= 0) {
            off_t end = lseek(of.fd, 0, SEEK_CUR);
            pos = end < 0 ? -1 : end - n;
          }
        } else {
          n = pwrite(of.fd, data, size, off);
        }
        return n < 0 ? last_errno() : 0;
      })) {
    return err;
  }
  if (cache::CachedFile* f = change.cached(); f && n > 0) {
    if (pos < 0) {
      fs.cache().invalidate(*f);  // cannot tell where the append went
      struct stat st {};
      if (fstat(of.fd, &st) == 0) fs.cache().set_size(*f, static_cast<std::uint64_t>(st.st_size));
    } else {
      // -ENOMEM drops the affected pages instead: still consistent.
      (void)fs.cache().write(*f, static_cast<std::uint64_t>(pos), data,
                             static_cast<std::size_t>(n));
    }
  }
  change.finish();
  fuse_reply_write(req, static_cast<std::size_t>(n));
  return 0;
}

void sfs_write(fuse_req_t req, fuse_ino_t /*ino*/, const char* buf, size_t size, off_t off,
               fuse_file_info* fi) {
  reply_errno(req, [&] { return do_write(req, buf, size, off, fi); });
}

// After a change the cache cannot mirror byte by byte: take the backing
// file's size.  Context: in a FileChange of f's file.
void sync_size(Filesystem& fs, cache::CachedFile& f, int fd) {
  struct stat st {};
  if (fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) != f.size()) {
    (void)fs.cache().truncate(f, static_cast<std::uint64_t>(st.st_size));
  }
}

int do_fallocate(fuse_req_t req, int mode, off_t off, off_t len, fuse_file_info* fi) {
  Filesystem& fs = fs_of(req);
  OpenFile& of = *open_file_of(fi);
  Inode& in = *of.inode;
  FileChange change(fs, in);
  if (int err = change_as_writer(
          req, in, of.fd, [&] { return fallocate(of.fd, mode, off, len) ? last_errno() : 0; })) {
    return err;
  }
  if (cache::CachedFile* f = change.cached()) {
    cache::PageCache& pc = fs.cache();
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
      // The range reads as zero; ZERO_RANGE without KEEP_SIZE may also
      // grow the file (sync_size).
      (void)pc.punch(*f, static_cast<std::uint64_t>(off), static_cast<std::uint64_t>(len));
    } else if (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) {
      pc.invalidate(*f);  // bytes moved: nothing cached is where it was
    }
    // Mode 0 may grow the file (zeros); KEEP_SIZE changes no byte.
    sync_size(fs, *f, of.fd);
  }
  change.finish();
  fuse_reply_err(req, 0);
  return 0;
}

void sfs_fallocate(fuse_req_t req, fuse_ino_t /*ino*/, int mode, off_t off, off_t len,
                   fuse_file_info* fi) {
  reply_errno(req, [&] { return do_fallocate(req, mode, off, len, fi); });
}

// Only SEEK_DATA and SEEK_HOLE come here (the kernel does the rest).  The
// handle's fd offset is otherwise unused (reads and writes are positional).
int do_lseek(fuse_req_t req, off_t off, int whence, fuse_file_info* fi) {
  off_t r = lseek(open_file_of(fi)->fd, off, whence);
  if (r < 0) return last_errno();
  fuse_reply_lseek(req, r);
  return 0;
}

void sfs_lseek(fuse_req_t req, fuse_ino_t /*ino*/, off_t off, int whence, fuse_file_info* fi) {
  reply_errno(req, [&] { return do_lseek(req, off, whence, fi); });
}

int do_copy_file_range(fuse_req_t req, off_t off_in, fuse_file_info* fi_in, off_t off_out,
                       fuse_file_info* fi_out, std::size_t len, int flags) {
  Filesystem& fs = fs_of(req);
  OpenFile& src = *open_file_of(fi_in);
  OpenFile& dst = *open_file_of(fi_out);
  Inode& in = *dst.inode;
  FileChange change(fs, in);  // the destination's; the source is only read
  loff_t oi = off_in, oo = off_out;
  ssize_t n = -1;
  if (int err = change_as_writer(req, in, dst.fd, [&] {
        n = copy_file_range(src.fd, &oi, dst.fd, &oo, len, static_cast<unsigned>(flags));
        return n < 0 ? last_errno() : 0;
      })) {
    return err;
  }
  if (cache::CachedFile* f = change.cached(); f && n > 0) {
    fs.cache().invalidate(*f, static_cast<std::uint64_t>(off_out), static_cast<std::uint64_t>(n));
    sync_size(fs, *f, dst.fd);
  }
  change.finish();
  fuse_reply_write(req, static_cast<std::size_t>(n));
  return 0;
}

void sfs_copy_file_range(fuse_req_t req, fuse_ino_t /*ino_in*/, off_t off_in, fuse_file_info* fi_in,
                         fuse_ino_t /*ino_out*/, off_t off_out, fuse_file_info* fi_out, size_t len,
                         int flags) {
  reply_errno(req,
              [&] { return do_copy_file_range(req, off_in, fi_in, off_out, fi_out, len, flags); });
}

}  // namespace

void add_file_ops(fuse_lowlevel_ops& ops) {
  ops.open = sfs_open;
  ops.create = sfs_create;
  ops.read = sfs_read;
  ops.write = sfs_write;
  ops.flush = sfs_flush;
  ops.release = sfs_release;
  ops.fsync = sfs_fsync;
  ops.fallocate = sfs_fallocate;
  ops.lseek = sfs_lseek;
  ops.copy_file_range = sfs_copy_file_range;
}

}  // namespace norefs::fs
