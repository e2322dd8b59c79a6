#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""check_links.py REPLY_DIR: the link rules of the tools, checked on a
configured build's targets.

REPLY_DIR is a build's CMake file-API reply directory
(BUILD/.cmake/api/v1/reply; tests/CMakeLists.txt asks CMake for the
codemodel).  A target belongs to the directory of its CMakeLists.txt.
Exit 0 if every rule holds, else print one line per violation,
"target: what is wrong", and exit 1.

  - no target of tools/ctl depends, directly or through the libraries it
    links, on a target of tools/bench or tools/check (norefsctl does not
    carry the benchmarks);
  - no target of tools/bench depends on one of tools/check, nor the other
    way round;
  - of the tools' targets only norefs_minimal_fuse (the ceiling server)
    links libfuse, and no tool links the daemon's library norefs_fs.
The include rules are check_layering.py's.
"""
import json
import pathlib
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from check_layering import report  # noqa: E402

LIBFUSE = re.compile(r"(^|[/\s])(lib)?fuse3(\.so|\.a|\b)|-lfuse3\b")
CEILING = "norefs_minimal_fuse"


def load(reply):
    reply = pathlib.Path(reply)
    index = sorted(reply.glob("index-*.json"))
    if not index:
        raise SystemExit(f"check_links: no index-*.json in {reply} (configure the build first)")
    idx = json.loads(index[-1].read_text())
    cm = next(o for o in idx["objects"] if o["kind"] == "codemodel")
    model = json.loads((reply / cm["jsonFile"]).read_text())
    config = model["configurations"][0]
    dirs = config["directories"]
    targets = {}
    for t in config["targets"]:
        data = json.loads((reply / t["jsonFile"]).read_text())
        frags = [f["fragment"] for f in data.get("link", {}).get("commandFragments", [])]
        targets[t["id"]] = {
            "name": t["name"],
            "dir": dirs[t["directoryIndex"]]["source"],
            "deps": [d["id"] for d in data.get("dependencies", [])],
            "link": frags,
        }
    return targets


def closure(targets, tid):
    seen, todo = set(), list(targets[tid]["deps"])
    while todo:
        d = todo.pop()
        if d in seen or d not in targets:
            continue
        seen.add(d)
        todo.extend(targets[d]["deps"])
    return seen


def group(t):
    parts = t["dir"].split("/")
    return parts[1] if parts[0] == "tools" and len(parts) > 1 else None


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    targets = load(sys.argv[1])
    forbidden = {"ctl": {"bench", "check"}, "bench": {"check"}, "check": {"bench"}}
    errors = []
    tools = [tid for tid, t in targets.items() if t["dir"].split("/")[0] == "tools"]
    if not tools:
        print(f"check_links: no target of tools/ in {sys.argv[1]}", file=sys.stderr)
        return 2
    for tid in sorted(tools, key=lambda i: targets[i]["name"]):
        t = targets[tid]
        deps = [targets[d] for d in closure(targets, tid)]
        for d in deps:
            if group(d) in forbidden.get(group(t), ()):
                errors.append(f"{t['name']}: a tools/{group(t)} target depends on "
                              f"{d['name']} (tools/{group(d)})")
            if d["name"] == "norefs_fs":
                errors.append(f"{t['name']}: a tool links norefs_fs, the daemon's library "
                              f"(tools reach the daemon through a mount)")
        if t["name"] != CEILING:
            if any(LIBFUSE.search(f) for f in t["link"]):
                errors.append(f"{t['name']}: links libfuse; of the tools only {CEILING} does")
            if any(d["name"] == "norefs_fuse_io" for d in deps):
                errors.append(f"{t['name']}: links norefs_fuse_io (libfuse); of the tools only "
                              f"{CEILING} does")
    return report("check_links", errors, f"{len(tools)} targets of tools/",
                  "tests/layering/check_links.py, docs/testing.md")


if __name__ == "__main__":
    sys.exit(main())
