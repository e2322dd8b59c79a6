// SPDX-License-Identifier: LGPL-2.1-or-later
//
// fill_free_bench's library (tools/bench/fill_free.h): the variants it runs, the
// arithmetic of its rows and targets on made-up rounds, the CSV and JSON it
// writes; and a tiny real run for the structure, never the speed.
#include "tools/bench/fill_free.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace norefs::tools {
namespace {

TEST(FillFree, VariantsPerTcache) {
  FillFreeBenchParams p;
  p.tcaches = {"private", "none"};
  p.expedite_pages = 77;
  std::vector<FillFreeVariant> v = fill_free_variants(p);
  ASSERT_EQ(v.size(), 2u * 3);
  const char* names[] = {"immediate", "deferred", "deferred-noexp"};
  for (std::size_t i = 0; i < v.size(); i++) {
    SCOPED_TRACE(i);
    EXPECT_EQ(v[i].name, names[i % 3]);
    EXPECT_EQ(v[i].tcache, i < 3 ? "private" : "none");
    EXPECT_EQ(v[i].cfg.tcache, i < 3 ? alloc::TcacheMode::private_ : alloc::TcacheMode::none);
    EXPECT_EQ(v[i].cfg.expedite_pages, 77u);
    EXPECT_EQ(v[i].cfg.defer, i % 3 != 0);
    EXPECT_EQ(v[i].cfg.expedite, i % 3 == 1);
  }
}

// A row of `threads` x the variant named `name` (tcache private) with one round per rate; mean
// waiting `wait` pages in every round.
FillFreeRow fake(unsigned threads, const std::string& name, std::vector<double> rates, double wait,
                 std::uint64_t peak = 0) {
  FillFreeRow row;
  row.threads = threads;
  row.variant.name = name;
  row.variant.tcache = "private";
  for (double rate : rates) {
    FillFreeResult x;
    x.seconds = 0.5;
    x.pages_per_sec = rate;
    x.pages = static_cast<std::uint64_t>(rate / 2);
    x.mean_waiting = wait;
    x.peak_waiting = peak++;
    x.grace_periods = 10;
    x.expedites = 4;
    row.rounds.push_back(x);
  }
  return row;
}

TEST(FillFree, RowsAndTargetsFromMadeUpRounds) {
  FillFreeBenchParams p;
  p.threads = {1, 4};
  std::vector<FillFreeRow> rows = {
      fake(1, "immediate", {100, 300, 200}, 0),
      fake(1, "deferred", {50, 60, 70}, 10),
      fake(4, "immediate", {1000, 900, 1100}, 0),
      fake(4, "deferred", {950, 800, 990}, 100, 7),
      fake(4, "deferred-noexp", {900, 900, 900}, 2500),
  };
  aggregate_fill_free_rows(rows);
  EXPECT_DOUBLE_EQ(rows[0].pages_per_sec, 200);
  EXPECT_DOUBLE_EQ(rows[0].pages_per_sec_min, 100);
  EXPECT_DOUBLE_EQ(rows[0].pages_per_sec_max, 300);
  EXPECT_DOUBLE_EQ(rows[0].ratio_to_immediate, 1.0);
  EXPECT_DOUBLE_EQ(rows[1].ratio_to_immediate, 60.0 / 200);  // against N = 1's immediate
  EXPECT_DOUBLE_EQ(rows[3].ratio_to_immediate, 950.0 / 1000);
  EXPECT_EQ(rows[3].peak_waiting, 9u);                  // max over rounds
  EXPECT_DOUBLE_EQ(rows[3].grace_periods_per_sec, 20);  // 30 over 1.5 s
  EXPECT_DOUBLE_EQ(rows[3].expedites_per_sec, 8);

  // At N = 4 (the largest): 950 / 1000 >= 0.90, 2500 / 100 >= 20.
  std::vector<report::Target> ts = evaluate_fill_free_targets(p, rows);
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].id, "rate");
  EXPECT_TRUE(ts[0].measured);
  EXPECT_DOUBLE_EQ(ts[0].value, 0.95);
  EXPECT_TRUE(ts[0].met);
  EXPECT_EQ(ts[1].id, "wait");
  EXPECT_DOUBLE_EQ(ts[1].value, 25);
  EXPECT_TRUE(ts[1].met);

  // Slower deferred, less waiting without expedite: neither is met.
  rows[3] = fake(4, "deferred", {850, 850, 850}, 200);
  aggregate_fill_free_rows(rows);
  ts = evaluate_fill_free_targets(p, rows);
  EXPECT_DOUBLE_EQ(ts[0].value, 0.85);
  EXPECT_FALSE(ts[0].met);
  EXPECT_DOUBLE_EQ(ts[1].value, 12.5);
  EXPECT_FALSE(ts[1].met);

  // Without the noexp row at N = 4, (wait) is not measured; (rate) still is.
  rows.pop_back();
  ts = evaluate_fill_free_targets(p, rows);
  EXPECT_TRUE(ts[0].measured);
  EXPECT_FALSE(ts[1].measured);

  FillFreeBenchResult r;
  r.params = p;
  r.rows = rows;
  r.targets = ts;
  EXPECT_NE(format_fill_free_targets(r).find("targets at N=4 (private tcache):"), std::string::npos)
      << format_fill_free_targets(r);
  EXPECT_NE(format_fill_free_targets(r).find("not measured"), std::string::npos);
  EXPECT_NE(format_fill_free_table(r).find("deferred"), std::string::npos);

  // The CSV's columns are the ones the docs and earlier runs have.
  std::istringstream csv(fill_free_csv(r));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line,
            "threads,variant,tcache,pages_per_sec,pages_per_sec_min,pages_per_sec_max,"
            "ratio_to_immediate,mean_waiting_pages,peak_waiting_pages,grace_periods_per_sec,"
            "expedites_per_sec,rounds");
  std::size_t n = 0;
  while (std::getline(csv, line)) n++;
  EXPECT_EQ(n, rows.size());
  nlohmann::json j = nlohmann::json::parse(fill_free_json(r));
  ASSERT_EQ(j["rows"].size(), rows.size());
  EXPECT_EQ(j["rows"][3]["variant"], "deferred");
  EXPECT_DOUBLE_EQ(j["rows"][3]["pages_per_sec"].get<double>(), 850);
  EXPECT_EQ(j["rows"][3]["rounds"], 3);
  ASSERT_EQ(j["targets"].size(), 2u);
  EXPECT_EQ(j["targets"][0]["met"], false);
  EXPECT_TRUE(j["targets"][1]["met"].is_null());
}

TEST(FillFreeStress, TinyRunHasEveryRow) {
  FillFreeBenchParams p;
  p.threads = {1};
  p.seconds = 0.05;
  p.rounds = 1;
  p.fill_pages = 16;
  std::vector<std::pair<std::string, bool>> progress;
  FillFreeBenchResult r = run_fill_free_bench(
      p, [&](const std::string& line, bool done) { progress.emplace_back(line, done); });
  ASSERT_EQ(r.rows.size(), 3u);
  ASSERT_EQ(progress.size(), 4u);
  EXPECT_EQ(progress[0].first.rfind("round 1/1  1/3  immediate private 1 thread: ", 0), 0u)
      << progress[0].first;
  EXPECT_TRUE(progress.back().second);
  for (const auto& row : r.rows) {
    SCOPED_TRACE(row.variant.name);
    ASSERT_EQ(row.rounds.size(), 1u);
    EXPECT_GT(row.rounds[0].pages, 0u);
    EXPECT_GT(row.pages_per_sec, 0);
    EXPECT_TRUE(std::isfinite(row.ratio_to_immediate));
  }
  EXPECT_EQ(r.rows[0].rounds[0].grace_periods, 0u) << "immediate free waits for no grace period";
  ASSERT_EQ(r.targets.size(), 2u);
  EXPECT_TRUE(r.targets[0].measured);
  EXPECT_TRUE(r.targets[1].measured);
}

}  // namespace
}  // namespace norefs::tools
