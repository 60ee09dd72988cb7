#!/usr/bin/env python3
"""Checks that #include arrows point down.

The folders' order, top first, is the fenced block under "Which folder includes which" in
docs/architecture.md. A file may include a file of its own folder or of a folder listed below
its own; an include of a folder listed above is an arrow back up. A folder whose line says
"never included" may be included by no other folder (plugins: the runtime loads them). Inside a
folder, a module (x.hpp with x.cpp) may not include, directly or through others, a module that
includes it.

  scripts/check-layers.py [--root DIR]    exit 0 when clean, 1 with one line per arrow otherwise
"""
import argparse
import os
import re
import sys

SOURCES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')
HEADING = "Which folder includes which"


def read_order(root):
    lines = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("#") and HEADING in l)
    fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    order, sealed = [], set()
    for l in lines[fence + 1:]:
        if l.startswith("```"):
            return order, sealed
        if l.strip():
            order.append(l.split()[0].rstrip("/"))
            if "never included" in l:
                sealed.add(order[-1])
    raise SystemExit("docs/architecture.md: the block under '%s' is not closed" % HEADING)


def folder_of(path, order):
    """The longest listed folder that holds `path`, or None."""
    best = None
    for f in order:
        if path.startswith(f + "/") and (best is None or len(f) > len(best)):
            best = f
    return best


def resolve(root, includer, kind, name):
    bases = ([os.path.dirname(includer)] if kind == '"' else []) + ["runtime", "models", "sdk/include"]
    for b in bases:
        p = os.path.normpath(os.path.join(b, name))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def includes(root, order):
    """(includer, included) for every include between files of listed folders."""
    arrows = []
    for top in sorted({f.split("/")[0] for f in order}):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                src = os.path.relpath(os.path.join(dirpath, f), root)
                if folder_of(src, order) is None:
                    continue
                for line in open(os.path.join(root, src), encoding="utf-8", errors="replace"):
                    m = INCLUDE.match(line)
                    dst = m and resolve(root, src, m.group(1), m.group(2))
                    if dst and folder_of(dst, order) is not None:
                        arrows.append((src, dst))
    return arrows


def module_cycles(arrows, order):
    """Module loops inside one folder, each as the list of modules it passes."""
    graph = {}
    for a, b in arrows:
        ma, mb = os.path.splitext(a)[0], os.path.splitext(b)[0]
        if ma != mb and folder_of(a, order) == folder_of(b, order):
            graph.setdefault(ma, set()).add(mb)
    loops, state = [], {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loops.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return loops


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    root = os.path.abspath(ap.parse_args().root)
    order, sealed = read_order(root)
    rank = {f: i for i, f in enumerate(order)}
    arrows = includes(root, order)
    problems = []
    for a, b in arrows:
        fa, fb = folder_of(a, order), folder_of(b, order)
        if fb in sealed and fa != fb:
            problems.append("%s includes %s: nothing outside %s includes it (docs/architecture.md)" % (a, b, fb))
        elif rank[fb] < rank[fa]:
            problems.append("%s includes %s: %s is listed above %s (docs/architecture.md)" % (a, b, fb, fa))
    for loop in module_cycles(arrows, order):
        problems.append("include loop inside %s: %s" % (folder_of(loop[0], order), " -> ".join(loop)))
    for p in problems:
        print(p)
    print("%d includes between %d folders: %s" % (len(arrows), len(order),
                                                   "%d pointing up or in a loop" % len(problems) if problems else "all point down"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
