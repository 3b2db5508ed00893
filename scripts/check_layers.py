#!/usr/bin/env python3
"""The include arrows between fp8moe's folders (issue 17 item 4), checked.

Every `#include "folder/..."` of the sources (not tests/ or notebooks/, which sit on top) must be
an arrow the table below allows; the table is the architecture CMakeLists.txt and the README
state. Exit 1 naming each file and include that breaks it, 0 otherwise.
"""
import os
import re
import sys

# Folder -> the folders it may include (itself always). sim/ is split into its sub-folders.
ALLOWED = {
    "reference": set(),
    "results": {"reference"},
    "scenarios": {"reference"},
    "kernels": {"reference"},
    "kernels/bench": {"kernels", "reference", "results"},
    "sim/limits": {"reference"},
    "sim/mesh": {"reference", "sim/limits"},
    "sim/comm": {"reference", "kernels", "sim/mesh", "sim/limits"},
    "sim/dtensor": {"reference", "sim/mesh", "sim/comm"},
    "sim/spec": {"reference", "sim/mesh"},
    "sim/backend": {"reference", "kernels"},
    "sim/rules": {"reference", "sim/mesh", "sim/dtensor", "sim/spec"},
    "sim/runner": {"reference", "sim/mesh", "sim/comm", "sim/dtensor", "sim/spec", "sim/rules", "sim/backend"},
    "sim/plans": {"reference", "sim/mesh", "sim/comm", "sim/dtensor", "sim/spec", "sim/rules", "sim/backend"},
    # fp8moe rules verify: executes a framework's rule table on the fake mesh (issue 21).
    "sim/verify": {"reference", "sim/mesh", "sim/comm", "sim/dtensor", "sim/rules"},
    "sim/sweep": {"reference", "results", "scenarios", "kernels", "sim/limits", "sim/mesh", "sim/comm", "sim/dtensor",
                  "sim/spec", "sim/backend", "sim/rules", "sim/runner", "sim/plans"},
    "sim/cli": {"reference", "results", "scenarios", "kernels", "kernels/bench", "sim/limits", "sim/mesh", "sim/comm",
                "sim/dtensor", "sim/spec", "sim/backend", "sim/rules", "sim/verify", "sim/runner", "sim/plans", "sim/sweep"},
}
SOURCE = re.compile(r"\.(hpp|cpp|cu|cuh|in)$")
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def folder(path):
    parts = path.split("/")
    if parts[0] == "sim" and len(parts) > 2:
        return "sim/" + parts[1]
    if parts[0] == "kernels" and len(parts) > 2 and parts[1] == "bench":
        return "kernels/bench"
    return parts[0]


def main(root):
    os.chdir(root)
    bad = []
    seen = 0
    for top in ("reference", "results", "scenarios", "kernels", "sim"):
        for dirpath, _, files in os.walk(top):
            for name in files:
                path = os.path.join(dirpath, name)
                if not SOURCE.search(name):
                    continue
                src = folder(path)
                if src not in ALLOWED:
                    bad.append(f"{path}: folder {src} is not in scripts/check_layers.py's table: add it with its arrows")
                    continue
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or "/" not in m.group(1) or not os.path.exists(m.group(1)):
                            continue
                        seen += 1
                        dst = folder(m.group(1))
                        if dst != src and dst not in ALLOWED[src]:
                            bad.append(f"{path}:{n}: {src} includes {m.group(1)} ({dst}): not an arrow of the layering")
    for b in bad:
        print(b)
    print(f"# {seen} includes between project folders checked, {len(bad)} against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
