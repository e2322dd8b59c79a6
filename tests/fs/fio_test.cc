// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/fio_test.cc — fio with verify=crc32c through the mount, for every
// read path and two block sizes: random writes then a verify pass, then,
// after a remount (cold cache), a verify_only pass of the same workload.
// Skipped with a message if fio is not installed (tools/setup-deps.sh
// installs it).
#include <string>
#include <tuple>
#include <vector>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

using Param = std::tuple<const char*, const char*>;  // read path, block size

class FioTest : public MountTest, public ::testing::WithParamInterface<Param> {
 protected:
  MountConfig config() const override {
    return {{std::string("read_path=") + std::get<0>(GetParam())}, {}};
  }
  void SetUp() override {
    if (!have_program("fio"))
      GTEST_SKIP() << "fio is not installed (tools/setup-deps.sh installs it)";
    MountTest::SetUp();
  }

  std::vector<std::string> fio_args(bool verify_only) const {
    std::vector<std::string> a{"fio",
                               "--name=norefs",
                               "--directory=" + tree_mnt(),
                               "--rw=randwrite",
                               std::string("--bs=") + std::get<1>(GetParam()),
                               "--size=8m",
                               "--numjobs=2",
                               "--ioengine=psync",
                               "--verify=crc32c",
                               "--do_verify=1",
                               "--verify_fatal=1",
                               "--randrepeat=1",
                               "--verify_state_save=0",
                               "--group_reporting"};
    if (verify_only) a.push_back("--verify_only");
    return a;
  }
  std::string tree_mnt() const { return m(); }
};

TEST_P(FioTest, RandomWriteThenVerifyThenVerifyAfterRemount) {
  RunResult w = run(fio_args(false), 80s);
  ASSERT_TRUE(w.exited(0)) << "fio write+verify: " << describe_status(w.status) << "\n" << w.output;
  EXPECT_EQ(w.output.find("verify:"), std::string::npos) << w.output;
  // The files fio wrote, byte for byte, in the backing dir.
  for (const char* f : {"norefs.0.0", "norefs.1.0"}) {
    ASSERT_BYTES_EQ(read_file(b(f)), read_file(m(f))) << f;
    EXPECT_EQ(lstat_or_throw(b(f)).st_size, 8 << 20) << f;
  }
  ASSERT_NO_FATAL_FAILURE(remount());
  RunResult v = run(fio_args(true), 80s);
  EXPECT_TRUE(v.exited(0)) << "fio verify_only after remount: " << describe_status(v.status) << "\n"
                           << v.output;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string s = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
  for (char& c : s) c = c == '-' ? '_' : c;
  return s;
}

INSTANTIATE_TEST_SUITE_P(ReadPaths, FioTest,
                         ::testing::Combine(::testing::Values("noref", "ref", "ref-fetchadd",
                                                              "stackcopy"),
                                            ::testing::Values("4k", "64k")),
                         param_name);

}  // namespace
}  // namespace norefs::fs::test
