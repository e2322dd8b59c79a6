// SPDX-License-Identifier: LGPL-2.1-or-later
#include "fs/fuse_uring.h"

#include <fuse_lowlevel.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
#include <thread>

namespace norefs::fs {

namespace {

// ── The kernel's FUSE-over-io_uring UAPI (include/uapi/linux/fuse.h,
// protocol 7.42+; Debian 12's <linux/fuse.h> is 7.38 and has none of it).
// Written here from the documented layout, with the sizes checked below.

// Sizes of the two fixed areas of the header block.
constexpr std::size_t kInOutHeaderSize = 128;  // fuse_in_header / fuse_out_header
constexpr std::size_t kOpInOutSize = 128;      // the op's fixed argument

// The third part of the header block: per-request data both ways.
struct RingEntInOut {
  std::uint64_t flags;
  std::uint64_t commit_id;   // kernel -> daemon: the id COMMIT_AND_FETCH names
  std::uint32_t payload_sz;  // bytes used in the payload buffer, either way
  std::uint32_t padding;
  std::uint64_t reserved;
};
static_assert(sizeof(RingEntInOut) == 32);

// iov[0] of a REGISTER: the header block of one ring entry.
struct RingReqHeader {
  char in_out[kInOutHeaderSize];
  char op_in[kOpInOutSize];
  RingEntInOut ring_ent_in_out;
};
static_assert(sizeof(RingReqHeader) == 288);

// The command (sqe->cmd_op) of an IORING_OP_URING_CMD on /dev/fuse.
constexpr std::uint32_t kCmdRegister = 1;        // register an entry, wait for a request
constexpr std::uint32_t kCmdCommitAndFetch = 2;  // answer its request, wait for the next

// The command area of the 128-byte SQE (its last 80 bytes).
struct RingCmdReq {
  std::uint64_t flags;
  std::uint64_t commit_id;  // COMMIT_AND_FETCH: the request answered
  std::uint16_t qid;        // the queue (CPU) the entry belongs to
  std::uint8_t padding[6];
};
static_assert(sizeof(RingCmdReq) == 24);
static_assert(sizeof(fuse_in_header) <= kInOutHeaderSize);

// user_data of the eventfd poll that wakes a queue thread to stop.
constexpr std::uint64_t kStopTag = 0;

// The request is laid out contiguously just before the payload buffer:
// this much of the page before it is ours.
constexpr std::size_t kSlack = sizeof(fuse_in_header) + kOpInOutSize;

// strerror() is not thread-safe (clang-tidy: concurrency-mt-unsafe); the
// queue threads may fail at the same time.
std::string errno_text(int e) { return std::generic_category().message(e); }

std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

// The number of queues the kernel expects: one per possible CPU id
// (fuse_uring_create() uses num_possible_cpus(); a request goes to the
// queue of the CPU its caller runs on).  From "0-1" or "0,2-3": highest + 1.
unsigned possible_cpus() {
  std::ifstream f("/sys/devices/system/cpu/possible");
  std::string s;
  unsigned highest = 0;
  if (f >> s) {
    std::size_t cut = s.find_last_of(",-");
    highest = static_cast<unsigned>(
        std::strtoul(s.c_str() + (cut == std::string::npos ? 0 : cut + 1), nullptr, 10));
  } else {
    highest = std::max(1u, std::thread::hardware_concurrency()) - 1;
  }
  return highest + 1;
}

// Opcodes libfuse 3.14 never answers.  FORGET and BATCH_FORGET come through
// /dev/fuse (the kernel's send_forget), INTERRUPT too; NOTIFY_REPLY (the
// answer to a retrieve) would come over the ring.
bool never_answered(std::uint32_t opcode) {
  return opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET || opcode == FUSE_INTERRUPT ||
         opcode == FUSE_NOTIFY_REPLY;
}

[[noreturn]] void die(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: FUSE over io_uring: %s\n", file, line, what.c_str());
  std::abort();
}
#define NOREFS_URING_DIE(what) die(__FILE__, __LINE__, (what))

}  // namespace

// One ring entry: its two buffers (one mapping: the header block at the
// start of the first page, the slack at that page's end, the payload from
// the second page on) and the request it holds.  Touched only by its
// queue's thread.
struct FuseUring::Entry {
  Queue* queue = nullptr;
  RingReqHeader* header = nullptr;
  char* payload = nullptr;
  void* mapping = nullptr;
  std::size_t mapping_bytes = 0;
  iovec iov[2]{};
  std::uint32_t last_cmd = 0;  // what to resubmit after EAGAIN/EINTR
  std::uint64_t commit_id = 0;
  std::uint64_t unique = 0;  // of the request being served
  bool replied = false;
};

struct FuseUring::Queue {
  unsigned qid = 0;
  io_uring ring{};
  bool ring_ok = false;
  int stop_fd = -1;  // eventfd
  std::vector<Entry> entries;
  std::thread thread;
  // Relaxed: a statistic, read for messages and after join.
  std::atomic<std::uint64_t> served{0};
};

namespace {
// The entry whose request this thread is serving, inside
// fuse_session_process_buf() only.  reply() on any other thread, or for
// another unique, finds no match and the reply goes to /dev/fuse.
thread_local FuseUring::Entry* tls_entry = nullptr;
}  // namespace

std::string FuseUring::available() {
  std::ifstream param("/sys/module/fuse/parameters/enable_uring");
  std::string v;
  if (!(param >> v)) {
    return "this kernel has no FUSE over io_uring (needs Linux 6.14+ with CONFIG_FUSE_IO_URING: "
           "/sys/module/fuse/parameters/enable_uring is missing)";
  }
  if (v != "Y" && v != "1") {
    return "the kernel does not allow FUSE over io_uring: /sys/module/fuse/parameters/enable_uring "
           "is " +
           v + " (as root: echo Y > /sys/module/fuse/parameters/enable_uring)";
  }
  std::ifstream disabled("/proc/sys/kernel/io_uring_disabled");
  int d = 0;
  if (disabled >> d && d == 2)
    return "io_uring is disabled (/proc/sys/kernel/io_uring_disabled is 2)";
  return "";
}

FuseUring::FuseUring(fuse_session* se, unsigned depth, const char* log_name)
    : se_(se),
      fuse_fd_(fuse_session_fd(se)),
      depth_(depth),
      log_name_(log_name),
      creator_(pthread_self()) {}

std::unique_ptr<FuseUring> FuseUring::create(fuse_session* se, unsigned depth, const char* log_name,
                                             std::string* error) {
  std::unique_ptr<FuseUring> u(new FuseUring(se, std::max(1u, depth), log_name));
  const unsigned n = possible_cpus();
  for (unsigned qid = 0; qid < n; qid++) {
    auto q = std::make_unique<Queue>();
    q->qid = qid;
    q->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (q->stop_fd < 0) {
      *error = std::string("eventfd: ") + errno_text(errno);
      return nullptr;
    }
    io_uring_params p{};
    // SQE128: the fuse command lives in the 80-byte command area.
    p.flags = IORING_SETUP_SQE128;
    // depth entries plus the stop poll.
    int r = io_uring_queue_init_params(u->depth_ + 1, &q->ring, &p);
    if (r < 0) {
      *error = std::string("io_uring_setup (128-byte SQEs): ") + errno_text(-r);
      close(q->stop_fd);
      return nullptr;
    }
    q->ring_ok = true;
    u->queues_.push_back(std::move(q));
  }
  // Every signal blocked in the queue threads (see the header).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (auto& q : u->queues_) {
    Queue* qp = q.get();
    FuseUring* self = u.get();
    q->thread = std::thread([self, qp] { self->serve_queue(*qp); });
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return u;
}

FuseUring::~FuseUring() {
  stop();
  // The queue threads have exited, and io_uring cancelled the commands each
  // had submitted when it did (a task's requests end with the task): no
  // entry can be handed a request any more, so its buffers can go.
  for (auto& q : queues_) {
    if (q->ring_ok) io_uring_queue_exit(&q->ring);
    if (q->stop_fd >= 0) close(q->stop_fd);
    for (Entry& e : q->entries) {
      if (e.mapping) munmap(e.mapping, e.mapping_bytes);
    }
  }
}

void FuseUring::on_init_replied(std::size_t max_payload) {
  std::lock_guard lock(mu_);
  if (phase_ != Phase::waiting_for_init) return;
  max_payload_ = max_payload;
  phase_ = Phase::serving;
  phase_cv_.notify_all();
}

void FuseUring::on_init_refused(const char* why) { fail(why); }

void FuseUring::stop() {
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::stopping;
    phase_cv_.notify_all();
  }
  for (auto& q : queues_) {
    std::uint64_t one = 1;
    // Fails only on a full counter (2^64 - 2 writes): one per call here.
    (void)!write(q->stop_fd, &one, sizeof one);
  }
  for (auto& q : queues_) {
    if (q->thread.joinable()) q->thread.join();
  }
}

std::uint64_t FuseUring::requests_served() const {
  std::uint64_t n = 0;
  for (const auto& q : queues_) n += q->served.load(std::memory_order_relaxed);
  return n;
}

void FuseUring::fail(const std::string& why) {
  std::fprintf(stderr, "%s: io_uring: %s\n", log_name_.c_str(), why.c_str());
  if (failed_.exchange(true, std::memory_order_relaxed)) return;
  fuse_session_exit(se_);
  // libfuse's handler (fuse_set_signal_handlers(), installed by both programs
  // before create()) catches it and ends the loop, not the process; the
  // loop's blocking call returns EINTR on that thread.
  // NOLINTNEXTLINE(bugprone-bad-signal-to-kill-thread)
  pthread_kill(creator_, SIGTERM);
}

// Fills a 128-byte SQE for a fuse command on entry `e`.
static void prep_fuse_cmd(io_uring_sqe* sqe, int fd, std::uint32_t cmd, std::uint16_t qid,
                          FuseUring::Entry& e) {
  std::memset(sqe, 0, 2 * sizeof(io_uring_sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = cmd;
  sqe->user_data = reinterpret_cast<std::uint64_t>(&e);
  if (cmd == kCmdRegister) {
    sqe->addr = reinterpret_cast<std::uint64_t>(e.iov);
    sqe->len = 2;
  }
  RingCmdReq req{};
  req.qid = qid;
  req.commit_id = cmd == kCmdCommitAndFetch ? e.commit_id : 0;
  std::memcpy(sqe->cmd, &req, sizeof req);
  e.last_cmd = cmd;
}

bool FuseUring::register_entries(Queue& q) {
  std::size_t max_payload;
  {
    std::lock_guard lock(mu_);
    max_payload = max_payload_;
  }
  const std::size_t page = page_size();
  const std::size_t payload_bytes = (max_payload + page - 1) / page * page;
  static_assert(sizeof(RingReqHeader) + kSlack <= 4096);
  q.entries.resize(depth_);
  for (Entry& e : q.entries) {
    e.queue = &q;
    e.mapping_bytes = page + payload_bytes;
    e.mapping =
        mmap(nullptr, e.mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (e.mapping == MAP_FAILED) {
      e.mapping = nullptr;
      fail(std::string("cannot map a ring entry: ") + errno_text(errno));
      return false;
    }
    e.header = static_cast<RingReqHeader*>(e.mapping);
    e.payload = static_cast<char*>(e.mapping) + page;
    e.iov[0] = {e.header, sizeof(RingReqHeader)};
    e.iov[1] = {e.payload, payload_bytes};
    io_uring_sqe* sqe = io_uring_get_sqe(&q.ring);
    if (!sqe) NOREFS_URING_DIE("no free SQE for REGISTER (ring smaller than its depth)");
    prep_fuse_cmd(sqe, fuse_fd_, kCmdRegister, static_cast<std::uint16_t>(q.qid), e);
  }
  io_uring_sqe* sqe = io_uring_get_sqe(&q.ring);
  if (!sqe) NOREFS_URING_DIE("no free SQE for the stop poll");
  io_uring_prep_poll_add(sqe, q.stop_fd, POLLIN);
  io_uring_sqe_set_data64(sqe, kStopTag);
  return true;
}

void FuseUring::serve_queue(Queue& q) {
  // The queue serves the callers on CPU qid: its thread runs there too
  // (the caller sleeps while it waits, so they do not compete).
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(q.qid, &cpus);
  (void)sched_setaffinity(0, sizeof cpus, &cpus);
  {
    std::unique_lock lock(mu_);
    phase_cv_.wait(lock, [&] { return phase_ != Phase::waiting_for_init; });
    if (phase_ == Phase::stopping) return;
  }
  if (!register_entries(q)) return;
  bool stopping = false;
  while (!stopping) {
    int r = io_uring_submit_and_wait(&q.ring, 1);
    if (r < 0 && r != -EINTR) {
      fail(std::string("io_uring_enter: ") + errno_text(-r));
      break;
    }
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&q.ring, head, cqe) {
      seen++;
      std::uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kStopTag) {
        stopping = true;
        continue;
      }
      // NOLINTNEXTLINE(performance-no-int-to-ptr): user_data carries the entry.
      Entry& e = *reinterpret_cast<Entry*>(tag);
      const int res = cqe->res;
      if (res == 0) {
        handle(q, e);
      } else if (res == -EAGAIN || res == -EINTR) {
        io_uring_sqe* sqe = io_uring_get_sqe(&q.ring);
        if (!sqe) NOREFS_URING_DIE("no free SQE to resubmit an entry");
        prep_fuse_cmd(sqe, fuse_fd_, e.last_cmd, static_cast<std::uint16_t>(q.qid), e);
      } else if (res == -ENOTCONN || res == -ECONNABORTED || res == -ECANCELED) {
        // The connection ended (unmount, abort): nothing more will come.
        stopping = true;
      } else {
        fail(std::string("the kernel refused ") +
             (e.last_cmd == kCmdRegister ? "FUSE_IO_URING_CMD_REGISTER" : "COMMIT_AND_FETCH") +
             " on queue " + std::to_string(q.qid) + ": " + errno_text(-res));
        stopping = true;
      }
    }
    io_uring_cq_advance(&q.ring, seen);
  }
  // The io_uring itself is closed by the destructor; the commands still
  // registered in it are cancelled when this thread exits.
}

void FuseUring::handle(Queue& q, Entry& e) {
  fuse_in_header in;
  std::memcpy(&in, e.header->in_out, sizeof in);
  RingEntInOut io;
  std::memcpy(&io, &e.header->ring_ent_in_out, sizeof io);
  // The op argument's size is not sent; it is what the length leaves.
  const std::size_t payload = io.payload_sz;
  if (in.len < sizeof in + payload || in.len - sizeof in - payload > kOpInOutSize ||
      payload > e.iov[1].iov_len) {
    NOREFS_URING_DIE("malformed request from the kernel: len " + std::to_string(in.len) +
                     ", payload " + std::to_string(payload));
  }
  const std::size_t op = in.len - sizeof in - payload;
  char* start = e.payload - sizeof in - op;
  std::memcpy(start, &in, sizeof in);
  std::memcpy(start + sizeof in, e.header->op_in, op);
  e.commit_id = io.commit_id;
  e.unique = in.unique;
  e.replied = false;

  fuse_buf buf{};
  buf.size = in.len;
  buf.mem = start;
  buf.fd = -1;
  tls_entry = &e;
  fuse_session_process_buf(se_, &buf);
  tls_entry = nullptr;
  q.served.fetch_add(1, std::memory_order_relaxed);

  if (!e.replied) {
    if (!never_answered(in.opcode)) {
      NOREFS_URING_DIE("request " + std::to_string(in.unique) + " (opcode " +
                       std::to_string(in.opcode) +
                       ") returned without a reply: requests served over io_uring must be "
                       "answered by their callback, on its thread");
    }
    // Hands the entry back: an empty success ends a no-reply request.
    fuse_out_header out{};
    out.len = sizeof out;
    out.unique = in.unique;
    std::memcpy(e.header->in_out, &out, sizeof out);
    RingEntInOut back{};
    back.commit_id = e.commit_id;
    std::memcpy(&e.header->ring_ent_in_out, &back, sizeof back);
    queue_commit(e);
  }
}

void FuseUring::queue_commit(Entry& e) {
  io_uring_sqe* sqe = io_uring_get_sqe(&e.queue->ring);
  // One SQE per entry in flight, and the ring has depth + 1.
  if (!sqe) NOREFS_URING_DIE("no free SQE for COMMIT_AND_FETCH");
  prep_fuse_cmd(sqe, fuse_fd_, kCmdCommitAndFetch, static_cast<std::uint16_t>(e.queue->qid), e);
  e.replied = true;
  // Submitted by serve_queue() with its wait for the next completion.
}

bool FuseUring::reply(const iovec* iov, int count, ssize_t* written) {
  Entry* e = tls_entry;
  if (e == nullptr || count < 1 || iov[0].iov_len != sizeof(fuse_out_header)) return false;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  if (out.unique != e->unique || e->replied) return false;
  std::size_t total = 0;
  bool too_big = false;
  for (int i = 1; i < count; i++) {
    if (iov[i].iov_len > e->iov[1].iov_len - total) {
      too_big = true;
      break;
    }
    std::memcpy(e->payload + total, iov[i].iov_base, iov[i].iov_len);
    total += iov[i].iov_len;
  }
  if (too_big) {
    // Cannot happen for replies within the INIT limits; the caller still
    // gets an answer.
    std::fprintf(stderr, "%s: io_uring: a reply larger than the ring's payload buffer (%zu)\n",
                 log_name_.c_str(), e->iov[1].iov_len);
    out.error = -EIO;
    total = 0;
  }
  out.len = static_cast<std::uint32_t>(sizeof out + total);
  std::memcpy(e->header->in_out, &out, sizeof out);
  RingEntInOut back{};
  back.commit_id = e->commit_id;
  back.payload_sz = static_cast<std::uint32_t>(total);
  std::memcpy(&e->header->ring_ent_in_out, &back, sizeof back);
  queue_commit(*e);
  if (too_big) {
    errno = EINVAL;
    *written = -1;
  } else {
    *written = static_cast<ssize_t>(out.len);
  }
  return true;
}

}  // namespace norefs::fs
