// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/fuse_io.h — the daemon's /dev/fuse I/O: libfuse's own (read, writev),
// except that the reply to FUSE_INIT also asks for
// FUSE_DIRECT_IO_ALLOW_MMAP when the kernel offers it.
//
// Why.  Files are opened with FOPEN_DIRECT_IO, so that every read reaches
// our cache.  The kernel refuses mmap(MAP_SHARED) of such a file (ENODEV)
// unless the INIT reply carried FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39,
// kernel 6.6).  libfuse 3.14 knows no such flag and builds the INIT reply
// itself, so programs that map files for writing break on the default
// mount.  With the flag the kernel serves a shared mapping from its own page
// cache of the file (filled through FUSE_READ, written back through
// FUSE_WRITE, both served by our cache as usual), and keeps read() on the
// direct path; writes never take it (fs/ops_file.cc, "Opening": a direct
// write racing a store to the mapping loses the write).
//
// How, and why it is the least fragile way we found.  libfuse 3.13+ lets a
// daemon supply the functions that move bytes to and from /dev/fuse
// (fuse_session_custom_io()).  Ours are libfuse's defaults, read(2) and
// writev(2), plus two looks at the bytes: read() remembers the unique id of
// the INIT request and whether the kernel offered the flag; writev() of the
// reply with that id ORs FUSE_INIT_EXT into `flags` and the flag's bit into
// `flags2` (fuse_init_out has carried flags2 since 7.36; libfuse 3.14's
// reply is the full 64-byte struct, with flags2 zero).  Nothing else of
// libfuse's protocol handling changes, and the structs come from the
// system's <linux/fuse.h> (UAPI).  The alternatives were worse: patching or
// vendoring libfuse; giving up direct_io when a file may be mapped (reads
// would then come from the kernel's cache, not ours); or answering
// FUSE_INIT ourselves.  If a later libfuse negotiates the flag itself, this
// changes nothing (the bit is already set).
//
// The same INIT patch asks for FUSE over io_uring when FuseIoOptions::uring
// is given, and writev() then routes replies to the ring entries they
// answer (fs/fuse_uring.h).  The minimal server (tools/bench/minimal_fuse.cc)
// links this file and fs/fuse_uring.cc for its io_uring option, with
// direct_io_allow_mmap off: they depend on libfuse and liburing only.
#pragma once

struct fuse_session;

namespace norefs::fs {

class FuseUring;

struct FuseIoOptions {
  // Ask for FUSE_DIRECT_IO_ALLOW_MMAP when the kernel offers it (above).
  bool direct_io_allow_mmap = true;
  // Serve requests over io_uring (fs/fuse_uring.h): the INIT reply also asks
  // for FUSE_OVER_IO_URING (protocol 7.42, bit 41 of the INIT flags: bit 9
  // of flags2), the queues are started once it is written or told why not,
  // and every reply goes to uring->reply() before /dev/fuse.  Outlives the
  // session loop.
  FuseUring* uring = nullptr;
};

// Installs the I/O functions on a mounted session (after
// fuse_session_mount(), before the loop).  Once per process: the INIT
// exchange is remembered in process-wide state.  Returns 0 or -errno.
int install_fuse_io(fuse_session* se, const FuseIoOptions& options = {});

}  // namespace norefs::fs
