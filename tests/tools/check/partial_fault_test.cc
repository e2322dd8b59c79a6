// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The partial-fault test in-process (tools/check/partial_fault.h): PageCache::read
// of cached files into buffers whose pages are zapped, so that the fast
// path's copy faults inside the read-side section; every byte checked.
// (Through the mount: tests/fs/race_test.cc.)
#include <nlohmann/json.hpp>
#include <string>

#include <gtest/gtest.h>

#include "tools/check/partial_fault.h"

namespace norefs::tools {
namespace {

TEST(PartialFaultStress, InProcessReadsIntoZappedBuffersAreRight) {
  for (cache::ReadPath path : {cache::ReadPath::noref, cache::ReadPath::stackcopy}) {
    SCOPED_TRACE(std::string(cache::read_path_name(path)));
    PartialFaultParams p;
    p.read_path = path;
    p.seconds = 0.4;
    PartialFaultResult r = run_partial_fault(p);
    SCOPED_TRACE(describe_partial_fault_config(p) + format_partial_fault_report(r));
    EXPECT_GT(r.reads, 0u);
    EXPECT_EQ(r.bad_reads, 0u);
    for (const auto& b : r.by_buffer) {
      EXPECT_GT(b.reads, 0u);
      EXPECT_GT(b.faulted_reads, 0u) << "no copy into this buffer kind faulted";
    }
    // The copies ran on the fast path (inside the read-side section), and
    // every file stayed cached.
    ASSERT_TRUE(r.have_counters);
    EXPECT_GT(r.fast_pages, 0u);
    EXPECT_EQ(r.misses, 0u);
    EXPECT_EQ(partial_fault_exit_code(r), 0);
    nlohmann::json j = nlohmann::json::parse(partial_fault_json(p, r));
    EXPECT_EQ(j["result"]["bad_reads"], 0);
    EXPECT_EQ(j["config"]["mode"], "in-process");
  }
}

TEST(PartialFault, ExitCodes) {
  PartialFaultResult r;
  EXPECT_EQ(partial_fault_exit_code(r), 1);  // nothing read
  r.reads = 10;
  EXPECT_EQ(partial_fault_exit_code(r), 2);  // nothing faulted: inconclusive
  r.by_buffer[0].faulted_reads = 1;
  EXPECT_EQ(partial_fault_exit_code(r), 0);
  r.bad_reads = 1;
  EXPECT_EQ(partial_fault_exit_code(r), 1);
}

}  // namespace
}  // namespace norefs::tools
