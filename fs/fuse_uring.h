// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fs/fuse_uring.h — FUSE over io_uring for a libfuse 3.14 session (which
// knows nothing of it), as an option of the daemon and of the minimal server
// (docs/fuse-io-uring.md has the measurements and the reasons).
//
// What the kernel does (Linux 6.14+, CONFIG_FUSE_IO_URING, module parameter
// fuse.enable_uring; Documentation/filesystems/fuse-io-uring.rst).  The INIT
// request offers FUSE_OVER_IO_URING when the parameter is on; a reply that
// keeps the flag makes every later request wait until the daemon has
// registered, for every possible CPU, at least one ring entry: an
// IORING_OP_URING_CMD (128-byte SQE) on the /dev/fuse fd whose command
// area names the queue (the CPU) and whose iovec holds two buffers, a
// header block (fuse_in_header, the op's fixed argument, the entry's size
// and commit id) and a payload buffer of the session's largest request.  A
// request is then queued on the queue of the CPU its caller runs on, copied
// into a waiting entry's buffers, and that entry's command completes (one
// CQE).  The daemon answers by writing fuse_out_header and the reply's
// payload into the same buffers and submitting COMMIT_AND_FETCH on the
// entry: one command that ends the request and waits for the next.  So a
// request costs one io_uring_enter() instead of /dev/fuse's read() and
// writev().  FORGET and INTERRUPT still come through /dev/fuse, as does
// everything before INIT is answered, and notifications still go there.
//
// How, with libfuse 3.14.  One thread per queue owns that queue's io_uring
// (pinned to its CPU).  For each completed entry it lays the request out as
// /dev/fuse would have delivered it (header, op argument, payload:
// contiguous, built in a slack area just before the payload buffer, so the
// payload itself is not copied) and hands it to fuse_session_process_buf().
// libfuse answers through the session's custom I/O (fs/fuse_io.h), whose
// writev() calls reply(): a reply whose unique is the request this thread
// is serving is copied into the entry and queued as COMMIT_AND_FETCH, which
// the thread submits together with its wait for the next completion.  Any
// other reply (to a request read from /dev/fuse, an EAGAIN to an interrupt)
// goes to /dev/fuse as before.  libfuse's own loop keeps running on
// /dev/fuse for INIT, FORGET and INTERRUPT.
//
// What must stay true:
//  - Every request served here is answered on the thread that received it,
//    before its callback returns (both programs do: each callback sends its
//    one reply).  A request left without a reply aborts the process with
//    the request's opcode: the kernel would otherwise keep the entry, and
//    the caller, waiting forever.  The exceptions are the opcodes libfuse
//    never answers (FORGET, BATCH_FORGET, INTERRUPT, NOTIFY_REPLY), which
//    get an empty commit that hands the entry back.
//  - The session outlives this object: stop() joins the queue threads, and
//    it must run after the session loop returns and before
//    fuse_session_destroy().
//  - The queue threads are created with every signal blocked, so that
//    SIGINT/SIGTERM reach libfuse's loop as before.
//
// Failures.  available() says, before anything is mounted, why the kernel
// would refuse (module parameter off or absent, io_uring disabled); the
// programs print it and exit.  A refusal later (INIT without the flag, a
// REGISTER the kernel rejects) is printed, marks the object failed(), and
// stops the session with SIGTERM to the thread that created this object
// (the loop's thread), so that the program exits with an error instead of
// quietly serving over /dev/fuse.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <pthread.h>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct fuse_session;

namespace norefs::fs {

class FuseUring {
 public:
  // Entries per queue when not given: more than one lets a queue hold the
  // requests of several callers on its CPU while its thread serves one.
  static constexpr unsigned kDefaultDepth = 8;

  // "" if this kernel lets a daemon ask for FUSE over io_uring now, else a
  // sentence saying why not (for the programs' error message).
  static std::string available();

  // One queue per possible CPU, each with its io_uring and its thread, which
  // waits for the INIT reply before it registers anything.  `log_name`
  // prefixes every message ("norefs", "norefs_minimal_fuse").  Returns null
  // and sets *error if an io_uring cannot be set up.
  static std::unique_ptr<FuseUring> create(fuse_session* se, unsigned depth, const char* log_name,
                                           std::string* error);
  ~FuseUring();
  FuseUring(const FuseUring&) = delete;
  FuseUring& operator=(const FuseUring&) = delete;

  // ── Called by the session's custom I/O (fs/fuse_io.cc). ──
  // The INIT reply carrying FUSE_OVER_IO_URING was written; the kernel's
  // largest request payload follows from it.  The queues register.
  void on_init_replied(std::size_t max_payload);
  // The INIT exchange did not negotiate io_uring (`why`).
  void on_init_refused(const char* why);
  // If iov is the reply to the request this thread is serving from a ring
  // entry: copies it into the entry, queues the commit, sets *written, and
  // returns true.  Otherwise false (the caller writes it to /dev/fuse).
  bool reply(const iovec* iov, int count, ssize_t* written);

  // Wakes every queue thread and waits for it to exit (idempotent).  After
  // the session loop, before fuse_session_destroy().
  void stop();

  // A refusal or an error happened after create() (see the top).
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  unsigned queues() const { return static_cast<unsigned>(queues_.size()); }
  unsigned depth() const { return depth_; }
  // Requests answered over the rings so far (all queues).
  std::uint64_t requests_served() const;

  // A ring entry and a queue (fs/fuse_uring.cc).
  struct Entry;
  struct Queue;

 private:
  enum class Phase { waiting_for_init, serving, stopping };

  FuseUring(fuse_session* se, unsigned depth, const char* log_name);
  void serve_queue(Queue& q);
  bool register_entries(Queue& q);
  void handle(Queue& q, Entry& e);
  void queue_commit(Entry& e);
  void fail(const std::string& why);

  fuse_session* const se_;
  const int fuse_fd_;
  const unsigned depth_;
  const std::string log_name_;
  const pthread_t creator_;  // the loop's thread: fail() signals it
  std::vector<std::unique_ptr<Queue>> queues_;

  std::mutex mu_;
  std::condition_variable phase_cv_;
  Phase phase_ = Phase::waiting_for_init;  // guarded by mu_
  std::size_t max_payload_ = 0;            // guarded by mu_; set with Phase::serving
  // Relaxed: a flag read after the threads were joined or for a message;
  // nothing is published through it.
  std::atomic<bool> failed_{false};
};

}  // namespace norefs::fs
