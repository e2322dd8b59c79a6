#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""check_man.py PAGE BLOCK=COMMAND... : a rendered man page and --help agree.

PAGE is a man page as rst2man writes it (roff).  It is cut into blocks: ""
is everything before the first subsection (.SS), and each subsection is a
block named by its title.  Each BLOCK=COMMAND pairs a block with the command
that prints the same program's help (a shell word list, e.g.
"stats=/usr/bin/norefsctl stats --help").  For each pair, the options the
help defines and the options the block's terms (.TP items) name must be the
same set: an option missing from either side is reported.  With
--subcommands=COMMAND, the subsections must also be exactly the subcommands
COMMAND's help lists (CLI11's "Subcommands:" section), each paired with
"COMMAND SUB --help".

What counts as an option: "-o NAME" (NAME up to '='), "-x" and "--long".
In --help, only the terms of a line are read: a line whose first character
is '-', up to a run of two spaces; the next run is read too if it is
nothing but one more option (libfuse's "-d   -o debug").  Exit 0 if every
block agrees, 1 with the differences otherwise, 2 on bad usage.
"""
import re
import shlex
import subprocess
import sys

O_OPT = re.compile(r"-o ([A-Za-z_][\w.*-]*)")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
ALIAS = re.compile(r"^(-o \S+|--?[A-Za-z][\w-]*)$")


def options(text):
    found = {"-o " + m for m in O_OPT.findall(text)}
    found |= {f for f in FLAG.findall(text) if f != "-o"}
    return found


def help_options(help_text):
    found = set()
    for line in help_text.splitlines():
        line = line.strip()
        if not line.startswith("-"):
            continue
        parts = re.split(r"\s{2,}", line)
        terms = [parts[0]]
        if len(parts) > 1 and ALIAS.match(parts[1]):
            terms.append(parts[1])
        for t in terms:
            found |= options(t)
    return found


def unroff(line):
    line = re.sub(r"\\f[BIRP]", "", line)
    line = line.replace("\\-", "-").replace("\\e", "\\").replace("\\(aq", "'")
    return re.sub(r"^\.B\s+", "", line)


def page_blocks(page_text):
    blocks = {"": set()}
    current = ""
    lines = page_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(".SS "):
            current = unroff(line[4:]).strip().strip('"')
            blocks.setdefault(current, set())
        elif line.startswith(".TP") and i + 1 < len(lines):
            blocks[current] |= options(unroff(lines[i + 1]))
    return blocks


def run_help(cmd):
    r = subprocess.run(shlex.split(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"check_man: '{cmd}' exited {r.returncode}:\n{r.stdout}")
    return r.stdout


def subcommands(help_text):
    subs, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
        elif inside and re.match(r"^\s+[\w-]+\s{2,}", line):
            subs.append(line.split()[0])
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
    return subs


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    page = argv[1]
    with open(page) as f:
        blocks = page_blocks(f.read())
    pairs = []
    for arg in argv[2:]:
        if arg.startswith("--subcommands="):
            cmd = arg[len("--subcommands="):]
            subs = subcommands(run_help(cmd + " --help"))
            if not subs:
                print(f"check_man: '{cmd} --help' lists no subcommands", file=sys.stderr)
                return 1
            pairs += [(s, f"{cmd} {s} --help") for s in subs]
        elif "=" in arg:
            pairs.append(tuple(arg.split("=", 1)))
        else:
            print(f"check_man: bad argument '{arg}'", file=sys.stderr)
            return 2
    bad = 0
    named = {b for b, _ in pairs}
    for title in sorted(set(blocks) - named - {""}):
        print(f"{page}: section '{title}' documents no program of the help checked here")
        bad += 1
    for block, cmd in pairs:
        if block not in blocks:
            print(f"{page}: no section '{block}' for '{cmd}'")
            bad += 1
            continue
        in_help = help_options(run_help(cmd))
        in_page = blocks[block]
        where = f"{page} [{block or 'top'}] vs '{cmd}'"
        for o in sorted(in_help - in_page):
            print(f"{where}: '{o}' is in --help but not in the man page")
            bad += 1
        for o in sorted(in_page - in_help):
            print(f"{where}: '{o}' is in the man page but not in --help")
            bad += 1
        if not in_help:
            print(f"{where}: no option found in --help (is the parser broken?)")
            bad += 1
        if bad == 0:
            print(f"{where}: {len(in_help)} options agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
