// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs_punch_wait's library (tools/bench/punch_wait.h): behaviour, never speed.
// A short in-process run per variant checks that the load wrote and freed
// through the cache (write-allocate counted), that the bound mode never had
// cached + waiting above B in any sample, that the counters are consistent
// (peaks >= means, samples taken, the ratio against defer=off computed),
// and that the CSV, JSON and per-sample series describe the same cells.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/bench/punch_wait.h"

namespace norefs::tools::punch_wait {
namespace {

Params short_params() {
  Params p;
#ifdef NOREFS_REMOTE_READER
  p.remote_reader = NOREFS_REMOTE_READER;
#endif
  p.threads = {2};
  p.gp_intervals_us = {1000};
  p.file_bytes = 2 << 20;  // 512 pages per loader
  p.write_bytes = 256 << 10;
  p.bound_bytes = 1 << 20;  // 256 pages: well below what 2 loaders fill
  p.seconds = 0.2;
  p.settle_seconds = 0;
  return p;
}

TEST(PunchWaitStress, BoundNeverExceededAndCountersConsistent) {
  Params p = short_params();
  p.variants = {Variant::punch, Variant::truncate, Variant::evict};
  p.modes = {Mode::off, Mode::bound};
  std::ostringstream samples;
  p.samples_csv = &samples;
  std::vector<Cell> cells = run(p);
  ASSERT_EQ(cells.size(), 6u);
  for (const Cell& c : cells) {
    SCOPED_TRACE(std::string(variant_name(c.variant)) + " " + std::string(mode_name(c.mode)));
    EXPECT_GT(c.bytes, 0u);
    EXPECT_GT(c.samples, 0u);
    EXPECT_GT(c.write_alloc, 0u) << "the writes must have populated the cache";
    EXPECT_GE(static_cast<double>(c.peak_waiting), c.mean_waiting);
    EXPECT_GE(static_cast<double>(c.peak_cached), c.mean_cached);
    EXPECT_GE(c.peak_total, c.peak_cached);
    EXPECT_GT(c.peak_rss_kib, 0u);
    if (c.mode == Mode::off) {
      EXPECT_EQ(c.grace_periods, 0u) << "defer=off waits for no grace period";
      EXPECT_EQ(c.peak_waiting, 0u);
      EXPECT_EQ(c.bound_pages, 0u);
    } else {
      EXPECT_EQ(c.bound_pages, p.bound_bytes / 4096);
      EXPECT_EQ(c.samples_over_bound, 0u) << "peak live pages " << c.peak_live;
      EXPECT_LE(c.peak_live, c.bound_pages);
      EXPECT_GT(c.peak_live, 0u);
      EXPECT_GT(c.write_skipped + c.limit_drains + c.write_alloc, 0u);
    }
  }
  // One CSV line per sample, each naming a cell of the run.
  std::istringstream in(samples.str());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("t_ms,variant,mode,N,", 0), 0u) << line;
  std::uint64_t rows = 0, load_rows = 0;
  while (std::getline(in, line)) {
    rows++;
    load_rows += line.find(",load,") != std::string::npos;
  }
  std::uint64_t want = 0;
  for (const Cell& c : cells) want += c.samples;
  EXPECT_EQ(load_rows, want);
  EXPECT_EQ(rows, load_rows) << "settle_seconds = 0: no settle samples";

  std::ostringstream csv;
  write_csv(csv, cells);
  std::istringstream cin(csv.str());
  std::uint64_t csv_rows = 0;
  while (std::getline(cin, line)) csv_rows++;
  EXPECT_EQ(csv_rows, cells.size() + 1);
  nlohmann::json j = to_json(p, cells);
  ASSERT_EQ(j["cells"].size(), cells.size());
  for (std::size_t i = 0; i < cells.size(); i++) {
    EXPECT_EQ(j["cells"][i]["bytes"].get<std::uint64_t>(), cells[i].bytes);
    EXPECT_EQ(j["cells"][i]["samples_over_bound"].get<std::uint64_t>(),
              cells[i].samples_over_bound);
    if (cells[i].mode == Mode::off) {
      EXPECT_DOUBLE_EQ(j["cells"][i]["ratio_vs_off"].get<double>(), 1.0);
    } else {
      EXPECT_GT(j["cells"][i]["ratio_vs_off"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(j["config"]["bound_bytes"].get<std::uint64_t>(), p.bound_bytes);
}

// After the load the pages come back: with the files punched, the settle
// samples see the live pages fall to (nearly) none.
TEST(PunchWaitStress, SettleSamplesFollowTheLoad) {
  Params p = short_params();
  p.variants = {Variant::punch};
  p.modes = {Mode::expedite};
  p.settle_seconds = 0.1;
  std::ostringstream samples;
  p.samples_csv = &samples;
  std::vector<Cell> cells = run(p);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_NE(samples.str().find(",settle,"), std::string::npos);
  EXPECT_GT(cells[0].end_rss_kib, 0u);
  // At most the two files' pages (a loader may stop mid-fill).
  EXPECT_LE(cells[0].end_live_pages, 2 * p.file_bytes / 4096);
}

// The mount target: the tool starts the daemon for each cell, loads files
// through real FUSE requests (pwrite, fallocate punch), samples the
// daemon's counter blocks, and unmounts in every case.  The bound holds
// through the mount as in-process.
TEST(PunchWaitStress, MountTargetBoundHoldsAndNothingStaysMounted) {
#ifndef NOREFS_DAEMON
  GTEST_SKIP() << "the daemon was not built";
#else
  if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) != 0) {
    GTEST_SKIP() << "needs root and /dev/fuse to mount";
  }
  Params p = short_params();
  p.target = Target::mount;
  p.daemon = NOREFS_DAEMON;
  p.variants = {Variant::punch};
  p.modes = {Mode::off, Mode::bound};
  std::vector<Cell> cells = run(p);
  ASSERT_EQ(cells.size(), 2u);
  for (const Cell& c : cells) {
    SCOPED_TRACE(std::string(mode_name(c.mode)));
    EXPECT_GT(c.bytes, 0u);
    EXPECT_GT(c.samples, 0u);
    EXPECT_GT(c.write_alloc, 0u) << "the daemon's writes must have populated its cache";
    EXPECT_GT(c.peak_rss_kib, 0u) << "the daemon's RSS was sampled";
    if (c.mode == Mode::off) {
      EXPECT_EQ(c.grace_periods, 0u);
      EXPECT_EQ(c.peak_waiting, 0u);
    } else {
      EXPECT_EQ(c.bound_pages, p.bound_bytes / 4096);
      EXPECT_EQ(c.samples_over_bound, 0u) << "peak live pages " << c.peak_live;
      EXPECT_LE(c.peak_live, c.bound_pages);
      EXPECT_GT(c.peak_live, 0u);
    }
  }
  // No mount of the tool's is left under the work directory.
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    EXPECT_EQ(line.find(" " + p.work_dir + "/norefs_punch_wait."), std::string::npos)
        << "left mounted: " << line;
  }
#endif
}

// Idle readers in other processes (--remote-readers): the cell with 2 of
// them runs with their 2 registry slots taken and every grace period pays
// the registry's membarriers; the one with 0 runs after they left (its
// slots back: the registry is empty, no membarrier).  Interleaved in one
// run, each against the other.
TEST(PunchWaitStress, IdleRemoteReadersTakeSlotsAndGracePeriodsPayForThem) {
  Params p = short_params();
  p.variants = {Variant::punch};
  p.modes = {Mode::bound};
  p.remote_readers = {2, 0};
  std::vector<Cell> cells = run(p);
  ASSERT_EQ(cells.size(), 2u);
  for (const Cell& c : cells) {
    SCOPED_TRACE("remote readers " + std::to_string(c.remote_readers));
    EXPECT_GT(c.bytes, 0u);
    EXPECT_EQ(c.registry_slots, c.remote_readers) << "this process holds no slot of its own";
    EXPECT_GT(c.grace_periods, 0u);
    if (c.remote_readers > 0) {
      EXPECT_GT(c.membarriers, 0u) << "a registered reader makes grace periods pay";
    } else {
      EXPECT_EQ(c.membarriers, 0u) << "no reader, nothing to pay";
    }
    EXPECT_EQ(c.registry_waited, 0u) << "idle readers are never inside a section";
    EXPECT_EQ(c.samples_over_bound, 0u) << "peak live pages " << c.peak_live;
    EXPECT_EQ(c.stop_ms, 0.0);
  }
  EXPECT_EQ(cells[0].remote_readers, 2u);  // in the order given (round 0)
  EXPECT_EQ(cells[1].remote_readers, 0u);
  nlohmann::json j = to_json(p, cells);
  EXPECT_EQ(j["cells"][0]["remote_readers"].get<unsigned>(), 2u);
  EXPECT_GT(j["cells"][0]["gib_vs_no_readers"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["cells"][1]["gib_vs_no_readers"].get<double>(), 1.0);
  std::ostringstream table;
  print_table(table, cells);
  EXPECT_NE(table.str().find("membar/s"), std::string::npos) << table.str();
}

// --stop-reader-ms: a reader stopped inside its section holds every grace
// period back; the bound still holds in every sample (the limit gives up
// waiting and leaves pages uncached), the registry names the stopped pid,
// and after it continues the load goes on.
TEST(PunchWaitStress, StoppedRemoteReaderHoldsGracePeriodsAndTheBoundHolds) {
  Params p = short_params();
  p.variants = {Variant::punch};
  p.modes = {Mode::bound};
  p.remote_readers = {1};
  p.stop_reader_ms = 300;
  p.seconds = 0.9;  // the stop: 0.3 s to 0.6 s
  std::vector<Cell> cells = run(p);
  ASSERT_EQ(cells.size(), 1u);
  const Cell& c = cells[0];
  EXPECT_GE(c.stop_ms, 300.0);
  EXPECT_GT(c.stop_samples, 0u);
  EXPECT_EQ(c.samples_over_bound, 0u) << "peak live pages " << c.peak_live;
  EXPECT_LE(c.peak_live, c.bound_pages);
  EXPECT_TRUE(c.stop_blocker_named) << "the registry names the stopped reader's pid";
  EXPECT_GE(c.max_gp_blocked_ms, 200u);
  EXPECT_GE(c.registry_waited, 1u);
  EXPECT_GT(c.limit_blocked, 0u) << "the limit gave up waiting for grace periods that could "
                                    "not end";
  EXPECT_GT(c.write_skipped, 0u);
}

TEST(PunchWaitTest, BadInputIsRejected) {
  Params p = short_params();
  p.threads.clear();
  EXPECT_THROW(run(p), std::invalid_argument);
  p = short_params();
  p.target = Target::mount;  // neither --daemon nor --mount
  EXPECT_THROW(run(p), std::invalid_argument);
  p = short_params();
  p.target = Target::mount;
  p.daemon = "/nonexistent/norefs";
  p.remote_readers = {1};  // the daemon hands out no registry
  EXPECT_THROW(run(p), std::invalid_argument);
  p = short_params();
  p.stop_reader_ms = 10;  // no reader to stop
  EXPECT_THROW(run(p), std::invalid_argument);
  p.remote_readers = {1};
  p.modes = {Mode::expedite};  // no bound: the stop would pile up every freed page
  EXPECT_THROW(run(p), std::invalid_argument);
  p.modes = {Mode::bound};
  p.stop_reader_ms = 150;  // not over before the load (0.2 s) is
  EXPECT_THROW(run(p), std::invalid_argument);
  EXPECT_FALSE(parse_mode("bogus").has_value());
  EXPECT_FALSE(parse_variant("bogus").has_value());
}

}  // namespace
}  // namespace norefs::tools::punch_wait
