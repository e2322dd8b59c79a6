// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/lib/report.h: the statistics, the CSV/JSON rows, the aligned table and
// the target lines the measuring tools share.
#include "tools/lib/report.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace norefs::tools::report {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Report, MedianAndSpread) {
  EXPECT_TRUE(std::isnan(median({})));
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  Spread s = spread({5, 1, 9, 2});
  EXPECT_DOUBLE_EQ(s.median, 3.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 9);
  s = spread({});
  EXPECT_TRUE(std::isnan(s.median) && std::isnan(s.min) && std::isnan(s.max));
}

TEST(Report, Si) {
  EXPECT_EQ(si(65312345), "65.31M");
  EXPECT_EQ(si(2.5e9), "2.50G");
  EXPECT_EQ(si(1234), "1.2k");
  EXPECT_EQ(si(12), "12");
  EXPECT_EQ(si(kNaN), "-");
}

TEST(Report, RecordsWriteTheSameNamesToCsvAndJson) {
  Records r({"n", "name", "rate", "ok", "stops"});
  nlohmann::ordered_json stops = nlohmann::ordered_json::object();
  stops["zeta"] = 1.5;  // inserted first: first in the CSV, though not in sorted order
  stops["alpha"] = 0;
  r.add({std::uint64_t{16}, "shared", 0.1, true, stops});
  r.add({std::uint64_t{4096}, "a,\"b\"", kNaN, false, stops});
  EXPECT_EQ(r.csv(),
            "n,name,rate,ok,stops_zeta,stops_alpha\n"
            "16,shared,0.1,1,1.5,0\n"
            "4096,\"a,\"\"b\"\"\",,0,1.5,0\n");
  nlohmann::json j = r.json();
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["n"], 16);
  EXPECT_EQ(j[0]["rate"], 0.1);
  EXPECT_EQ(j[0]["ok"], true);
  EXPECT_EQ(j[0]["stops"]["zeta"], 1.5);
  EXPECT_TRUE(j[1]["rate"].is_null()) << "NaN is unknown: null";
  EXPECT_EQ(j[1]["name"], "a,\"b\"");
  EXPECT_EQ(r.json_row(1), j[1]);
  // Doubles keep every digit (the shortest form that reads back the same).
  Records d({"x"});
  d.add({1234567.891});
  EXPECT_EQ(d.csv(), "x\n1234567.891\n");
  EXPECT_DEATH(d.add({1, 2}), "2 values for 1 columns");
}

TEST(Report, TableAlignsColumnsToTheWidestCell) {
  using A = Table::Align;
  Table t({{"size", A::left}, {"reads/s", A::right}, {"stops", A::left}});
  t.add_row({"16", "65.31M", "-"});
  t.add_gap();
  t.add_row({"65536", "1.2k", "accessed=3"});
  t.add_note("  (a note)");
  EXPECT_EQ(t.str(),
            "size  reads/s stops\n"
            "16     65.31M -\n"
            "\n"
            "65536    1.2k accessed=3\n"
            "  (a note)\n");
  EXPECT_DEATH(t.add_row({"1"}), "1 cells for 3 columns");
}

TEST(Report, TargetsSayMetNotMetOrNotMeasured) {
  Targets ts;
  ts.add("a", "x >= 2", 2).measure(3, true, "x = 3");
  ts.add("b", "y <= 1", 1).measure(1.5, false, "y = 1.5");
  ts.add("c", "z >= 1", 1);  // its rows were not measured
  ts.add_if_none("a", "not added: there is an (a)", 0);
  ts.add_if_none("d", "per row, none measured", 4);
  std::vector<Target> v = ts.take();
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(format_targets("targets:", v, "not in this run"),
            "targets:\n"
            "  (a) x >= 2\n      x = 3: met\n"
            "  (b) y <= 1\n      y = 1.5: NOT met\n"
            "  (c) z >= 1\n      not measured (not in this run)\n"
            "  (d) per row, none measured\n      not measured (not in this run)\n");
  nlohmann::json j = targets_json(v);
  EXPECT_EQ(j[0]["met"], true);
  EXPECT_EQ(j[1]["met"], false);
  EXPECT_EQ(j[1]["value"], 1.5);
  EXPECT_TRUE(j[2]["met"].is_null());
  EXPECT_TRUE(j[2]["value"].is_null());
  EXPECT_EQ(j[3]["threshold"], 4);
}

}  // namespace
}  // namespace norefs::tools::report
