// SPDX-License-Identifier: LGPL-2.1-or-later
//
// norefs [options] <backing-dir> <mountpoint> — see fs/options.h and
// `norefs --help`.
#include "fs/daemon.h"
#include "fs/options.h"

int main(int argc, char* argv[]) {
  using namespace norefs::fs;
  ParseResult pr = parse_command_line(argc, argv);
  switch (pr.action) {
    case ParseResult::exit_ok:
      return kExitOk;
    case ParseResult::exit_usage:
      return kExitUsage;
    case ParseResult::run:
      break;
  }
  return run(pr);
}
