// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tests/fs/top_test.cc — `norefsctl top` used the way a person uses it: in
// a terminal (a tmux pane, 100x30, running sh), on a live mount.  The test
// types the command, reads the screen (capture-pane) before and while reads
// go through the mount, and checks that every field is shown and that the
// reads/s shown changed between the two frames; then it presses q (and, in
// a second run, Ctrl-C) and checks that norefsctl exited 0 and left the
// terminal as it found it: the alternate screen left, the cursor shown, and
// `stty -g` identical before and after.
//
// The arithmetic behind the numbers is tests/tools/ctl/top_test.cc.  Frames are
// drawn every 0.2 s here (the default is 1 s) to keep the test short.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "fs_test_util.h"

namespace norefs::fs::test {
namespace {

#ifdef NOREFS_CTL
constexpr const char* kCtl = NOREFS_CTL;
#else
constexpr const char* kCtl = "";
#endif

// A tmux server of its own (its socket in the test's tree), one session
// running sh.  The server is killed on destruction; if this process is
// killed instead, the tree's stale cleanup kills it (note_daemon: its
// command line names the tree).
class Tmux {
 public:
  explicit Tmux(const TempTree& tree) : sock_(tree.root + "/tmux.sock") {
    RunResult r =
        cmd({"-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "100", "-y", "30", "sh"});
    if (!r.exited(0)) throw std::runtime_error("tmux new-session: " + r.output);
    started_ = true;
    std::string pid = display("#{pid}");
    if (!pid.empty()) tree.note_daemon(static_cast<pid_t>(std::stol(pid)));
  }
  ~Tmux() {
    if (started_) cmd({"kill-server"});
  }
  Tmux(const Tmux&) = delete;
  Tmux& operator=(const Tmux&) = delete;

  // Types `text` literally, then Enter.
  void type_line(const std::string& text) {
    cmd({"send-keys", "-t", "t", "-l", text});
    cmd({"send-keys", "-t", "t", "Enter"});
  }
  void key(const std::string& k) { cmd({"send-keys", "-t", "t", k}); }
  std::string screen() { return cmd({"capture-pane", "-p", "-t", "t"}).output; }
  std::string display(const std::string& format) {
    std::string out = cmd({"display-message", "-p", "-t", "t", format}).output;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

 private:
  RunResult cmd(std::vector<std::string> args) {
    args.insert(args.begin(), {"tmux", "-S", sock_});
    return run(args, 10s);
  }
  std::string sock_;
  bool started_ = false;
};

// The file's text, "" if it does not exist (yet).
std::string read_file_or(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The reads/s on the screen ("reads    12.3k/s ..."), or -1 when the screen
// shows no frame with a rate yet.
double reads_per_s(const std::string& screen) {
  static const std::regex re(R"(\nreads +([0-9.]+)([kMG]?)/s )");
  std::smatch m;
  std::string s = "\n" + screen;
  if (!std::regex_search(s, m, re)) return -1;
  double v = std::stod(m[1].str());
  const std::string unit = m[2].str();
  return v * (unit == "k" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : 1);
}

// Polls the screen until `ok` holds; the last screen either way.
std::string wait_screen(Tmux& t, const std::function<bool(const std::string&)>& ok,
                        std::chrono::milliseconds limit, bool* met) {
  auto end = std::chrono::steady_clock::now() + limit;
  std::string s;
  for (;;) {
    s = t.screen();
    if (ok(s)) {
      *met = true;
      return s;
    }
    if (std::chrono::steady_clock::now() > end) {
      *met = false;
      return s;
    }
    std::this_thread::sleep_for(30ms);
  }
}

class TopTest : public MountTest {
 protected:
  std::chrono::seconds budget() const override { return std::chrono::seconds(30 * kSlow); }
  std::string top_cmd() const { return std::string(kCtl) + " top " + m() + " --interval 0.2"; }
};

TEST_F(TopTest, RedrawsInATerminalAndQuitsCleanly) {
  ASSERT_TRUE(*kCtl) << "norefsctl was not built (NOREFS_CTL)";
  ASSERT_TRUE(have_program("tmux")) << "tmux is not installed: run tools/setup-deps.sh";
  write_file(m("f"), random_bytes(kPage, 11));
  Tmux t(tree());
  const std::string before = tree().root + "/stty.before", after = tree().root + "/stty.after";
  // Bounds the wait for a broken top, never decides a pass (a healthy one
  // redraws every 0.2 s).
  const auto limit = std::chrono::milliseconds(10000 * kSlow);
  bool met = false;

  // ---- q ----
  t.type_line("stty -g > " + before + "; " + top_cmd() + "; echo first-exit=$?; stty -g > " +
              after);
  // A frame with rates (the first has none), idle: no reads yet.
  std::string a = wait_screen(
      t, [](const std::string& s) { return reads_per_s(s) >= 0; }, limit, &met);
  ASSERT_TRUE(met) << "no frame with a reads/s rate on the screen:\n" << a;
  EXPECT_EQ(t.display("#{alternate_on}"), "1") << "top draws on the alternate screen";
  EXPECT_EQ(t.display("#{cursor_flag}"), "0") << "top hides the cursor";
  // The mountpoint outlives the loop (a temporary in the range's initializer
  // would not, before C++23).
  const std::string mnt = m();
  for (const char* field :
       {"norefs top", mnt.c_str(), "noref batch 31", "hit ", "fast path ", "stops ", "cache ",
        " pages (", " active, limit ", "waiting ", " pages now (", "peak ", "grace periods ",
        "expedites ", "evictions ", "RSS ", "q quits"}) {
    EXPECT_NE(a.find(field), std::string::npos) << "\"" << field << "\" missing from\n" << a;
  }
  const double idle = reads_per_s(a);

  // Reads through the mount: the next frames must show a different rate.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0};
  std::thread reader([&] {
    Fd f(m("f"), O_RDONLY);
    char buf[16];
    while (!stop.load(std::memory_order_relaxed)) {  // a flag, orders nothing
      if (::pread(f.get(), buf, sizeof buf, 0) == static_cast<ssize_t>(sizeof buf)) {
        reads.fetch_add(1, std::memory_order_relaxed);  // a count, read after join
      }
    }
  });
  std::string b = wait_screen(
      t, [idle](const std::string& s) { return reads_per_s(s) > 0 && reads_per_s(s) != idle; },
      limit, &met);
  stop = true;
  reader.join();
  EXPECT_GT(reads.load(), 0u);
  ASSERT_TRUE(met) << "reads/s did not change from " << idle << " while reading; first frame:\n"
                   << a << "\nlast:\n"
                   << b;
  EXPECT_NE(a, b);

  t.key("q");
  std::string done = wait_screen(
      t,
      [&](const std::string& s) {
        return std::regex_search(s, std::regex("first-exit=[0-9]")) && !read_file_or(after).empty();
      },
      limit, &met);
  ASSERT_TRUE(met) << "top did not quit on q:\n" << done;
  EXPECT_NE(done.find("first-exit=0"), std::string::npos) << done;
  EXPECT_EQ(t.display("#{alternate_on}"), "0") << "the alternate screen was not left";
  EXPECT_EQ(t.display("#{cursor_flag}"), "1") << "the cursor was not shown again";
  EXPECT_EQ(done.find("fast path"), std::string::npos) << "top's frame is still on the screen:\n"
                                                       << done;
  EXPECT_EQ(read_file_or(before), read_file_or(after)) << "stty settings differ after top";

  // ---- Ctrl-C ----
  t.type_line(top_cmd() + "; echo second-exit=$?; stty -g > " + after + ".2");
  a = wait_screen(
      t, [](const std::string& s) { return reads_per_s(s) >= 0; }, limit, &met);
  ASSERT_TRUE(met) << "second run: no frame:\n" << a;
  t.key("C-c");
  done = wait_screen(
      t,
      [&](const std::string& s) {
        return std::regex_search(s, std::regex("second-exit=[0-9]")) &&
               !read_file_or(after + ".2").empty();
      },
      limit, &met);
  ASSERT_TRUE(met) << "top did not quit on Ctrl-C:\n" << done;
  EXPECT_NE(done.find("second-exit=0"), std::string::npos) << done;
  EXPECT_EQ(t.display("#{alternate_on}"), "0");
  EXPECT_EQ(t.display("#{cursor_flag}"), "1");
  EXPECT_EQ(read_file_or(before), read_file_or(after + ".2")) << "stty settings differ after ^C";
}

// Without a terminal: plain frames, --count ends it, no escape sequence.
TEST_F(TopTest, CountFramesWithoutATerminal) {
  ASSERT_TRUE(*kCtl) << "norefsctl was not built (NOREFS_CTL)";
  RunResult r = run({kCtl, "top", m(), "--interval", "0.05", "--count", "3"}, 10s * kSlow);
  ASSERT_TRUE(r.exited(0)) << describe_status(r.status) << "\n" << r.output;
  std::size_t frames = 0;
  for (std::size_t at = 0; (at = r.output.find("norefs top ", at)) != std::string::npos; at++) {
    frames++;
  }
  EXPECT_EQ(frames, 3u) << r.output;
  EXPECT_EQ(r.output.find('\033'), std::string::npos) << "escape sequences in a pipe";
  EXPECT_GE(reads_per_s(r.output.substr(r.output.find("over "))), 0) << r.output;
}

TEST_F(TopTest, NotAMountFailsWithAMessage) {
  ASSERT_TRUE(*kCtl) << "norefsctl was not built (NOREFS_CTL)";
  RunResult r = run({kCtl, "top", tree().root, "--count", "1"}, 10s);
  EXPECT_TRUE(r.exited(1)) << describe_status(r.status) << "\n" << r.output;
  EXPECT_NE(r.output.find("not a norefs mount"), std::string::npos) << r.output;
  r = run({kCtl, "top", m(), "--interval", "0"}, 10s);
  EXPECT_TRUE(r.exited(2)) << describe_status(r.status) << "\n" << r.output;
}

}  // namespace
}  // namespace norefs::fs::test
