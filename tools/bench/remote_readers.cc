// SPDX-License-Identifier: LGPL-2.1-or-later
#include "tools/bench/remote_readers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

extern char** environ;

namespace norefs::tools {
namespace {

[[noreturn]] void sys_fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string self(buf, static_cast<std::size_t>(n));
  return self.substr(0, self.rfind('/'));
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st));
  return "ended (status " + std::to_string(st) + ")";
}

}  // namespace

std::uint64_t fnv1a_64(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; i++) {
    h = (h ^ std::to_integer<std::uint64_t>(p[i])) * 0x100000001b3ULL;
  }
  return h;
}

std::string default_remote_reader() {
  std::string dir = self_dir();
  if (dir.empty()) return "";
  for (const std::string& cand :
       {dir + "/norefs_remote_reader", dir + "/../lib/norefs/norefs_remote_reader"}) {
    if (access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

RemoteReader::RemoteReader(const std::string& program, std::vector<std::string> args,
                           const std::vector<int>& fds) {
  if (program.empty()) {
    throw std::runtime_error(
        "no norefs_remote_reader to start readers in other processes (it is built beside the "
        "benchmarks in tools/bench; --remote-reader PATH names it)");
  }
  // One socket pair, its end the child's stdin and stdout: a socket so
  // that writing to a reader that died is EPIPE (MSG_NOSIGNAL), not a
  // SIGPIPE that would end the benchmark.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) sys_fail("socketpair");
  // The fds it needs go to 3, 4, ...: first copied above any of those
  // numbers (close-on-exec), so that no dup2 below overwrites a source
  // another one still needs; dup2 clears close-on-exec on the copy.
  std::vector<int> high;
  for (int fd : fds) {
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    if (h < 0) {
      for (int x : high) close(x);
      close(sv[0]);
      close(sv[1]);
      sys_fail("fcntl(F_DUPFD_CLOEXEC)");
    }
    high.push_back(h);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  for (std::size_t i = 0; i < high.size(); i++) {
    posix_spawn_file_actions_adddup2(&fa, high[i], 3 + static_cast<int>(i));
  }
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int err = posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  for (int x : high) close(x);
  close(sv[1]);
  sock_ = sv[0];
  if (err != 0) {
    pid_ = -1;
    end();
    errno = err;
    sys_fail("cannot start " + program);
  }
  try {
    std::istringstream is(expect("ready"));
    std::string word;
    pid_t pid = 0;
    is >> word >> pid >> slot_ >> first_hash_;
  } catch (...) {
    end();
    throw;
  }
}

RemoteReader::RemoteReader(RemoteReader&& o) noexcept
    : pid_(o.pid_),
      sock_(o.sock_),
      slot_(o.slot_),
      first_hash_(o.first_hash_),
      pending_(std::move(o.pending_)) {
  o.pid_ = -1;
  o.sock_ = -1;
}

RemoteReader::~RemoteReader() { end(); }

void RemoteReader::end() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);  // a stopped reader would never see the EOF
  }
  if (sock_ >= 0) shutdown(sock_, SHUT_WR);  // EOF: the reader leaves its loop and exits
  if (pid_ > 0) {
    int st = 0;
    bool reaped = false;
    for (int i = 0; i < 500 && !reaped; i++) {  // 5 s
      reaped = waitpid(pid_, &st, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!reaped) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &st, 0);
    }
    pid_ = -1;
  }
  if (sock_ >= 0) close(sock_);
  sock_ = -1;
}

RemoteReader RemoteReader::fast_reader(const std::string& program, int region_fd, int registry_fd,
                                       const cache::SharedFile* file, std::size_t size,
                                       unsigned batch, int cpu) {
  char addr[32];
  std::snprintf(addr, sizeof addr, "%" PRIxPTR, reinterpret_cast<std::uintptr_t>(file));
  return RemoteReader(
      program,
      {"read", "3", "4", addr, std::to_string(size), std::to_string(batch), std::to_string(cpu)},
      {region_fd, registry_fd});
}

RemoteReader RemoteReader::idle_reader(const std::string& program, int registry_fd, int cpu) {
  return RemoteReader(program, {"idle", "3", std::to_string(cpu)}, {registry_fd});
}

void RemoteReader::send(char command) {
  char line[2] = {command, '\n'};
  for (std::size_t done = 0; done < sizeof line;) {
    ssize_t w = ::send(sock_, line + done, sizeof line - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) sys_fail("write to the remote reader " + std::to_string(pid_));
    done += static_cast<std::size_t>(w);
  }
}

std::string RemoteReader::expect(const char* word, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line.rfind(word, 0) != 0) {
        throw std::runtime_error("remote reader " + std::to_string(pid_) + ": expected \"" + word +
                                 "\", got \"" + line + "\"");
      }
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw std::runtime_error("remote reader " + std::to_string(pid_) + " did not answer \"" +
                               word + "\" within " + std::to_string(timeout.count()) + " ms");
    }
    pollfd p{sock_, POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) sys_fail("poll");
    if (n == 0) continue;
    char buf[512];
    ssize_t r = read(sock_, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) sys_fail("read from the remote reader");
    if (r == 0) {
      int st = 0;
      std::string how = "closed its output";
      if (pid_ > 0 && waitpid(pid_, &st, 0) == pid_) {
        how = describe_status(st);
        pid_ = -1;
      }
      throw std::runtime_error("remote reader " + how + " before answering \"" + word + "\"");
    }
    pending_.append(buf, static_cast<std::size_t>(r));
  }
}

RemoteReadSnapshot RemoteReader::read_snapshot() {
  std::istringstream is(expect("snap"));
  std::string word;
  RemoteReadSnapshot s;
  is >> word >> s.reads >> s.cpu_ns >> s.cache_reads >> s.fast_reads >> s.short_reads;
  for (auto& x : s.stops) is >> x;
  if (!is) throw std::runtime_error("remote reader " + std::to_string(pid_) + ": bad snapshot");
  return s;
}

std::uint64_t RemoteReader::finish() {
  send('q');
  std::istringstream is(expect("bye"));
  std::string word;
  std::uint64_t reads = 0, hash = 0;
  is >> word >> reads >> hash;
  int st = 0;
  if (pid_ > 0 && waitpid(pid_, &st, 0) == pid_) {
    pid_ = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      throw std::runtime_error("remote reader " + describe_status(st));
    }
  }
  end();
  return hash;
}

}  // namespace norefs::tools
