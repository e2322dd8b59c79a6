// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/addressing.h: the structure of what norefs_addressing_bench
// measures and writes, never its speed.  A tiny run has every (shape,
// reader) row; each reader read the page's right bytes through its own
// chain (run() throws otherwise) and the ratios are to copy-pointers.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "tools/bench/addressing.h"

namespace norefs::tools::addressing {
namespace {

TEST(AddressingStress, TinyRunHasEveryRowAndWritesCsvAndJson) {
  Params p;
  p.rounds = 2;
  p.seconds = 0.01;
  p.cpu = -1;  // unpinned: the test machine is busy
  int lines = 0;
  Result r = run(p, [&](const std::string&) { lines++; });
  EXPECT_EQ(lines, 2);
  ASSERT_EQ(r.rows.size(), 6u);
  for (std::size_t i = 0; i < r.rows.size(); i++) {
    const Row& row = r.rows[i];
    SCOPED_TRACE(std::string(shape_name(row.shape)) + " " + std::string(reader_name(row.reader)));
    EXPECT_EQ(row.shape, i < 3 ? Shape::throughput : Shape::latency);
    ASSERT_EQ(row.rounds.size(), 2u);
    for (const Measurement& m : row.rounds) {
      EXPECT_GT(m.reads, 0u);
      EXPECT_GT(m.ns_per_read, 0.0);
      EXPECT_GT(m.cpu_ns_per_read, 0.0);
    }
    EXPECT_GT(row.vs_pointers, 0.0);
    if (row.reader == Reader::copy_pointers) EXPECT_DOUBLE_EQ(row.vs_pointers, 1.0);
  }
  EXPECT_EQ(r.rows[2].reader, Reader::copy_offsets);
  std::string c = csv(r);
  EXPECT_EQ(std::count(c.begin(), c.end(), '\n'), 7) << c;
  EXPECT_EQ(c.rfind("shape,reader,", 0), 0u) << c;
  nlohmann::json j = nlohmann::json::parse(json(r));
  ASSERT_EQ(j["rows"].size(), 6u);
  EXPECT_EQ(j["rows"][2]["reader"], "copy-offsets");
  EXPECT_EQ(j["rows"][0]["rounds"].size(), 2u);
  EXPECT_NE(format_table(r).find("copy-offsets"), std::string::npos);
}

TEST(AddressingTest, BadParamsAreRejected) {
  Params p;
  p.rounds = 0;
  EXPECT_THROW(run(p), std::invalid_argument);
  p.rounds = 1;
  p.seconds = 0;
  EXPECT_THROW(run(p), std::invalid_argument);
}

}  // namespace
}  // namespace norefs::tools::addressing
