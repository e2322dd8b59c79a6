// SPDX-License-Identifier: LGPL-2.1-or-later
//
// tools/lib/progress.h — the progress line of the long-running tools
// (norefs_pread_scaling, fill_free_bench, norefs_evict_race): always on
// stderr, so that what goes to stdout (the table, or CSV/JSON sent to
// /dev/stdout) stays clean.  On a terminal each update overwrites the last
// ("\r" + erase to the end of the line) and finish() ends the line; in a
// log each update is its own line, so a log shows how far a run got.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace norefs::tools {

class Progress {
 public:
  explicit Progress(std::FILE* out = stderr) : out_(out), tty_(::isatty(::fileno(out)) != 0) {}
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Shows `line` as the current state.
  void update(const std::string& line) {
    if (tty_) {
      std::fprintf(out_, "\r%s\033[K", line.c_str());
      open_ = true;
    } else {
      std::fprintf(out_, "%s\n", line.c_str());
    }
    std::fflush(out_);
  }
  // Shows `line` and keeps it: the next update starts a new line.
  void keep(const std::string& line) {
    update(line);
    finish();
  }
  // Ends an open terminal line, if any.
  void finish() {
    if (open_) {
      std::fputc('\n', out_);
      std::fflush(out_);
      open_ = false;
    }
  }

 private:
  std::FILE* out_;
  bool tty_;
  bool open_ = false;
};

}  // namespace norefs::tools
