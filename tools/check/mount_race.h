// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/check/mount_race.h — the evict-race checker through a norefs mount
// (docs/races.md): readers check every byte they read through the mount
// while other threads evict the files (the control ioctl), punch holes in
// them, rewrite them and truncate + rewrite them, under a cache smaller than
// the data.
//
// Content.  The 8-byte word at offset 8w of file f at version v is
// mix(0xb7 << 56 | f << 48 | v << 32 | w) (mix: tools/check/evict_race.h's
// bijection), so a wrong word read back decodes to the file, version and
// offset it came from.  A rewrite writes the whole file at a new version.
//
// What a reader may see.  Files change while they are read, so "the one
// valid value" of the in-process checker becomes a set, per byte: the byte
// the file held when the read started, or any byte that a change which
// overlapped the read wrote there (a rewrite's version, a punch's or a
// truncate's zero).  Changes of one file are serialized by this tool, and
// each is logged before its syscall starts and applied to the tool's model
// of the file after it returns; a reader copies the model (with the count
// of completed changes) before its pread and the log of every change
// started since then after it.  So per byte the allowed set is exact, and
// a byte outside it was never in the file during the read: a stale page, a
// freed page reused by another file or offset, or garbage.  The byte count
// must lie between what the smallest and the largest size the file had
// during the read allow.  Eviction changes nothing a reader may see.
//
// Reads are reported by variant: what overlapped them (nothing, a punch, a
// rewrite, a truncate, several kinds).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace norefs::tools {

struct MountRaceParams {
  std::string dir;  // a directory on a norefs mount; the files go in a new subdirectory
  double seconds = 2.0;
  unsigned readers = 4;
  unsigned files = 8;
  std::size_t file_pages = 32;      // pages per file (files > 0 lose a few bytes)
  std::size_t max_read = 16384;     // longest read, bytes
  bool evict = true;                // an evictor: NOREFS_IOC_EVICT over the files
  bool punch = true;                // a puncher: fallocate(PUNCH_HOLE|KEEP_SIZE) of page ranges
  bool rewrite = true;              // a rewriter: pwrite of the whole file at a new version
  bool truncate = true;             // ftruncate to a page boundary, then a rewrite
  unsigned evict_pause_us = 1000;   // the evictor sleeps this long after each ioctl
  unsigned mutate_pause_us = 1000;  // each changer sleeps this long after each change
  std::uint64_t seed = 1;
  unsigned keep_bad = 8;
  // The run is the unsafe control (defer=off with the noref path and the
  // widened window): bad reads, or the daemon's death, are expected.
  bool control = false;
  // End the run once this many bad reads were seen (0: never): the control
  // needs only a few to make its point.
  std::uint64_t stop_after_bad = 0;
  // Polled by every thread: a signal handler may set it to end the run early.
  const std::atomic<bool>* cancel = nullptr;
};

enum class RaceVariant : std::uint8_t { stable, punch, rewrite, truncate, several, kCount };
inline constexpr std::size_t kRaceVariants = static_cast<std::size_t>(RaceVariant::kCount);
std::string_view race_variant_name(RaceVariant v);

enum class MountBadKind : std::uint8_t {
  error,          // the read failed (e.g. ENOTCONN: the daemon died)
  length,         // a byte count no size the file had allows
  stale_version,  // this file and offset, a version not held during the read
  other_offset,   // this file's data from another offset
  other_file,     // another file's data
  zeros,          // zeros where the file held none
  unknown,        // none of the above
  kCount,
};
inline constexpr std::size_t kMountBadKinds = static_cast<std::size_t>(MountBadKind::kCount);
std::string_view mount_bad_kind_name(MountBadKind k);

struct MountBadRead {
  double at_seconds = 0;
  unsigned reader = 0, file = 0;
  std::uint64_t pos = 0;
  std::size_t len = 0;
  ssize_t returned = 0;
  std::uint64_t offset = 0;  // first wrong byte
  MountBadKind kind = MountBadKind::unknown;
  RaceVariant variant = RaceVariant::stable;
  std::string what;
};

struct MountRaceResult {
  double seconds = 0;
  struct PerVariant {
    std::uint64_t reads = 0, bytes_checked = 0, bad_reads = 0, bad_bytes = 0;
  };
  std::array<PerVariant, kRaceVariants> by_variant{};
  std::array<std::uint64_t, kMountBadKinds> bad_by_kind{};
  std::uint64_t reads = 0, bytes_checked = 0, bad_reads = 0, bad_bytes = 0;
  std::uint64_t unchecked = 0;  // reads overlapping more changes than the log keeps
  std::uint64_t evict_calls = 0, pages_evicted = 0, evict_errors = 0;
  std::uint64_t punches = 0, rewrites = 0, truncates = 0;
  std::string tool_error;  // a change failed: the model is unknown, the run stopped
  // Daemon counters over the run (NOREFS_IOC_INFO's cache stats block), if readable.
  bool have_daemon_counters = false;
  std::uint64_t daemon_reads = 0, daemon_fast_pages = 0, daemon_misses = 0;
  std::vector<MountBadRead> first_bad;
};

// Creates the files in a new subdirectory of p.dir, runs, removes them.
// Throws std::invalid_argument on a bad configuration, std::system_error if
// the files cannot be set up.
MountRaceResult run_mount_race(const MountRaceParams& p);

// Exit status and sentence, as norefs_evict_race prints them:
//  0: no bad read (and reads, and evictions); or the control detected bad reads;
//  1: bad reads where none may be, nothing read, or a change failed;
//  2: the control detected nothing (inconclusive).
struct MountRaceVerdict {
  int exit_code = 0;
  std::string message;
};
MountRaceVerdict mount_race_verdict(const MountRaceParams& p, const MountRaceResult& r);
std::string describe_mount_race_config(const MountRaceParams& p);
std::string format_mount_race_report(const MountRaceResult& r);
std::string mount_race_json(const MountRaceParams& p, const MountRaceResult& r,
                            const MountRaceVerdict& v, const std::string& daemon_options);

// The content function (exposed for tests) and its decoding.
std::uint64_t mount_race_word(unsigned file, unsigned version, std::uint64_t w);
bool mount_race_decode(std::uint64_t word, unsigned* file, unsigned* version, std::uint64_t* w);

// A norefs daemon on a temporary tree (/tmp/norefs-race-XXXXXX: mnt,
// stats, and backing unless one is given), for `norefs_evict_race --daemon`.
// start() waits for the mount; the destructor unmounts (fusermount3 -u,
// then SIGKILL and umount -l if the daemon does not exit) and removes the
// tree, in every outcome.
class DaemonMount {
 public:
  DaemonMount(std::string daemon, std::string options, std::string backing = "");
  ~DaemonMount();
  DaemonMount(const DaemonMount&) = delete;
  DaemonMount& operator=(const DaemonMount&) = delete;
  // Throws std::runtime_error with the daemon's log if it does not mount.
  void start(std::chrono::milliseconds limit = std::chrono::seconds(20));
  // Unmounts and reaps: the daemon's wait status, or nullopt if it had to
  // be killed.  Idempotent.
  std::optional<int> stop();
  // The daemon exited on its own (crashed): its wait status.
  std::optional<int> exited();
  const std::string& mountpoint() const { return mnt_; }
  std::string log() const;

 private:
  std::string daemon_, options_, root_, backing_, mnt_, stats_, log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  bool mounted_ = false;
};

std::string describe_wait_status(int status);

}  // namespace norefs::tools
