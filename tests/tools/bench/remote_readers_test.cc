// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/bench/remote_readers.h: a reader process that cannot start, or
// ends before it answers, is an exception naming what happened, never a
// hang; an idle reader takes a registry slot and gives it back when it
// ends.  (Its reading side is checked through pread_scaling's noref-remote
// rows, pread_scaling_test.cc.)
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "alloc/reader_registry.h"
#include "tools/bench/remote_readers.h"

namespace norefs::tools {
namespace {

TEST(RemoteReaderTest, NoProgramOrAnEarlyExitIsAnError) {
  EXPECT_THROW(RemoteReader::idle_reader("", alloc::process_registry().fd(), -1),
               std::runtime_error);
  EXPECT_THROW(RemoteReader::idle_reader("/nonexistent/norefs_remote_reader",
                                         alloc::process_registry().fd(), -1),
               std::system_error);
  try {
    RemoteReader::idle_reader("/bin/true", alloc::process_registry().fd(), -1);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 0 before answering"),
              std::string::npos)
        << e.what();
  }
}

#ifdef NOREFS_REMOTE_READER
TEST(RemoteReaderTest, IdleReaderHoldsASlotAndGivesItBack) {
  alloc::ReaderRegistry& reg = alloc::process_registry();
  const std::uint64_t before = reg.stats().slots_in_use;
  {
    RemoteReader r = RemoteReader::idle_reader(NOREFS_REMOTE_READER, reg.fd(), -1);
    EXPECT_GT(r.pid(), 0);
    EXPECT_GE(r.slot(), 0);
    EXPECT_EQ(reg.stats().slots_in_use, before + 1);
    // Inside a section, a grace period waits for it; out again, it does not.
    r.send('e');
    r.expect("in");
    std::atomic<bool> done{false};
    std::thread gp([&] {
      reg.synchronize();
      done.store(true);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done.load()) << "a grace period ended under a reader's section";
    r.send('l');
    r.expect("out");
    gp.join();
    EXPECT_TRUE(done.load());
    r.finish();
  }
  // Its process exited: the slot comes back (thread-exit destructor).
  for (int i = 0; i < 300 && reg.stats().slots_in_use != before; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(reg.stats().slots_in_use, before);
}
#endif

}  // namespace
}  // namespace norefs::tools
