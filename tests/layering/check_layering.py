#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""check_layering.py [ROOT]: the include rules of norefs, checked.

Exit 0 if every #include under ROOT (default: the source tree this file is
in) keeps the rules below, else print one line per violation,
"file:line: what is wrong", and exit 1.

Layers (tools -> fs -> cache -> alloc; nothing includes upwards):
  alloc/  includes only alloc/
  cache/  includes alloc/ and cache/
  fs/     includes alloc/, cache/ and fs/
  tools/ is four groups (tools/README.md), each a layer of its own above
  alloc/ and cache/:
    tools/lib/    includes alloc/, cache/, tools/lib/
    tools/ctl/    also tools/ctl/
    tools/bench/  also tools/ctl/ and tools/bench/
    tools/check/  also tools/ctl/ and tools/check/
  so bench/ and check/ never include each other, and ctl/ includes neither.
  From fs/ the tools include only fs/control.h (the ioctl ABI: tools reach
  the daemon only through a mount), and the minimal FUSE server
  tools/bench/minimal_fuse.cc the transport fs/fuse_io.h, fs/fuse_uring.h
  (libfuse and liburing only: it serves over it).  A C++ file directly in
  tools/ is in no group, and wrong.
Project includes are written from the project root ("alloc/page.h"), never
with "..".
The tests are held to what their binary links by the compiler instead
(each library exports only its own include root, see alloc/CMakeLists.txt).

Third-party headers (everywhere: product code and tests):
  liburcu  (<urcu.h>, <urcu-*.h>, <urcu/...>)  only in alloc/rcu.h, alloc/rcu.cc
  jemalloc (<jemalloc.h>, <jemalloc/...>)       only in alloc/page_arena.cc
  libfuse  (<fuse*.h>, <fuse3/...>)             only in fs/ and the standalone
           FUSE servers: tools/bench/minimal_fuse.cc and tests/<dir>/helpers/*_fuse.cc
           (<linux/fuse.h>, the kernel's protocol, is not libfuse)
"""
import pathlib
import re
import sys

PRODUCT = ("alloc", "cache", "fs", "tools")
SCANNED = PRODUCT + ("tests",)
TOOL_GROUPS = ("lib", "ctl", "bench", "check")
# What each layer may include from the project (a layer: alloc, cache, fs,
# or tools/<group>).
MAY_INCLUDE = {
    "alloc": {"alloc"},
    "cache": {"alloc", "cache"},
    "fs": {"alloc", "cache", "fs"},
    "tools/lib": {"alloc", "cache", "tools/lib"},
    "tools/ctl": {"alloc", "cache", "tools/lib", "tools/ctl"},
    "tools/bench": {"alloc", "cache", "tools/lib", "tools/ctl", "tools/bench"},
    "tools/check": {"alloc", "cache", "tools/lib", "tools/ctl", "tools/check"},
}
# Single headers allowed across a layer boundary, and why: (layer or file,
# header).
EXCEPTIONS = {
    ("tools/ctl", "fs/control.h"): "the ioctl ABI",
    ("tools/bench", "fs/control.h"): "the ioctl ABI",
    ("tools/check", "fs/control.h"): "the ioctl ABI",
    ("tools/bench/minimal_fuse.cc", "fs/fuse_io.h"): "the FUSE transport (norefs_fuse_io)",
    ("tools/bench/minimal_fuse.cc", "fs/fuse_uring.h"): "the FUSE transport (norefs_fuse_io)",
}


def layer_of(path):
    """The layer of a file or an included header ("tools/bench/x.h" -> "tools/bench"),
    None for a path outside the product."""
    parts = path.split("/")
    if parts[0] == "tools":
        return "tools/" + parts[1] if len(parts) > 2 else "tools"
    return parts[0] if parts[0] in PRODUCT and len(parts) > 1 else None

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
URCU = re.compile(r"^(urcu(\.h|-[^/]*\.h)|urcu/)")
JEMALLOC = re.compile(r"^jemalloc(\.h|/)")
LIBFUSE = re.compile(r"^(fuse[^/]*\.h|fuse3?/)")


def fuse_allowed(rel):
    parts = rel.split("/")
    if parts[0] == "fs" or rel == "tools/bench/minimal_fuse.cc":
        return True
    return (len(parts) == 4 and parts[0] == "tests" and parts[2] == "helpers"
            and parts[3].endswith("_fuse.cc"))


THIRD_PARTY = (
    (URCU, "liburcu", lambda rel: rel in ("alloc/rcu.h", "alloc/rcu.cc"),
     "only alloc/rcu.h and alloc/rcu.cc include liburcu (use alloc/rcu.h)"),
    (JEMALLOC, "jemalloc", lambda rel: rel == "alloc/page_arena.cc",
     "only alloc/page_arena.cc includes jemalloc (use alloc/page_arena.h)"),
    (LIBFUSE, "libfuse", fuse_allowed,
     "libfuse only in fs/, tools/bench/minimal_fuse.cc and tests/*/helpers/*_fuse.cc"),
)


def check_file(root, path):
    rel = path.relative_to(root).as_posix()
    top = layer_of(rel)
    errors = []
    if top == "tools" or (top or "").startswith("tools/") and top[6:] not in TOOL_GROUPS:
        errors.append(f"{rel}:1: a tools/ source belongs in one of the groups "
                      f"tools/{{{','.join(TOOL_GROUPS)}}}/ (tools/README.md)")
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header = m.group(2).strip()
            where = f"{rel}:{lineno}"
            if m.group(1) == "<":
                for pattern, lib, allowed, rule in THIRD_PARTY:
                    if pattern.match(header) and not allowed(rel):
                        errors.append(f"{where}: #include <{header}>: {rule}")
            if m.group(1) == '"' and ".." in header.split("/"):
                errors.append(f'{where}: #include "{header}": write project includes from '
                              f'the project root ("alloc/page.h"), without ..')
            target = layer_of(header) if "/" in header else None
            if top in MAY_INCLUDE and target is not None:
                if (target not in MAY_INCLUDE[top] and (top, header) not in EXCEPTIONS
                        and (rel, header) not in EXCEPTIONS):
                    allowed = ", ".join(f"{d}/" for d in sorted(MAY_INCLUDE[top]))
                    errors.append(f"{where}: #include {m.group(1)}{header}: a {top}/ file "
                                  f"includes only from {allowed} (layers: tools -> fs -> "
                                  f"cache -> alloc; tools/bench and tools/check -> "
                                  f"tools/ctl -> tools/lib)")
    return errors


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        pathlib.Path(__file__).resolve().parents[2]).resolve()
    files = sorted(p for d in SCANNED if (root / d).is_dir()
                   for p in (root / d).rglob("*") if p.suffix in (".cc", ".h") and p.is_file())
    if not any((root / d).is_dir() for d in PRODUCT):
        print(f"check_layering: {root} has none of {', '.join(PRODUCT)}", file=sys.stderr)
        return 2
    errors = [e for p in files for e in check_file(root, p)]
    return report("check_layering", errors, f"{len(files)} files",
                  "tests/layering/check_layering.py, docs/testing.md")


def report(tool, errors, checked, rules):
    """Prints the violations, one a line, then the verdict; the exit status.
    Also check_links.py's."""
    for e in errors:
        print(e)
    if errors:
        print(f"{tool}: {len(errors)} violation(s) in {checked} (rules: {rules})")
        return 1
    print(f"{tool}: ok ({checked})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
