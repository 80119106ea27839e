#!/usr/bin/env python3
"""check.py — the house rules of harness/ and model/ (issue 36), measured.

  python3 tests/house/check.py BUILD_DIR [--list] [--root DIR]

1. No file over 1,200 lines unless its header comment (the text before the
   first #include) says why it stays whole, with the words "stays whole".
2. At most 10 functions over 80 lines, each with a comment in the 12 lines
   above its definition that says why it reads best whole ("reads best whole").
3. No dependency circle between files: file A depends on file B when A's
   object refers to a function or variable B's object defines (nm on
   BUILD_DIR/harness/*.o and BUILD_DIR/model/*.o). Any strongly connected
   set of more than one file is a circle.

Prints one line per finding and "house: N problem(s)"; exit 1 when any.
--list prints every function over 80 lines and the layers of the graph;
--root DIR checks the harness/ and model/ of another tree (tests/cli/test_house.sh
plants defects in a copy).
"""
import os, re, subprocess, sys
from collections import defaultdict

MAX_FILE, MAX_FN, MAX_LONG = 1200, 80, 10
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRS = ("harness", "model")

def sources(ext):
    out = []
    for d in DIRS:
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith(ext):
                out.append(os.path.join(d, f))
    return out

# A definition starts at column 0 with a name and "(" and is not a
# declaration (ends in ";") nor a preprocessor line; its body ends at the
# first "}" at column 0.
DEF = re.compile(r"^[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\s*\(")

def functions(path):
    lines = open(os.path.join(ROOT, path), encoding="utf-8").read().split("\n")
    i, n = 0, len(lines)
    while i < n:
        m = DEF.match(lines[i])
        if m and not lines[i].startswith(("typedef", "struct ", "enum ", "union ")) \
                or (m and re.match(r"^(static |const )*(struct|enum|union) \w+ \**\w+\(", lines[i])):
            # find the opening brace before any ";" at depth 0
            j, is_def = i, False
            while j < n:
                s = lines[j]
                if s.rstrip().endswith(";") and "{" not in s: break
                if "{" in s: is_def = True; break
                j += 1
            if is_def:
                k = j
                while k < n and lines[k] != "}": k += 1
                length = k - i + 1
                above = "\n".join(lines[max(0, i - 12):i])
                yield m.group(1), i + 1, length, "reads best whole" in above
                i = k + 1
                continue
        i += 1

def header(path):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    return text.split("#include", 1)[0]

def graph(build):
    defs, refs = {}, defaultdict(set)
    objs = {}
    for src in sources(".c"):
        o = os.path.join(build, src[:-2] + ".o")
        if os.path.exists(o) and os.path.exists(os.path.join(ROOT, src)):
            objs[src] = o
    for src, o in objs.items():
        out = subprocess.run(["nm", "--defined-only", "-g", o], capture_output=True, text=True).stdout
        for line in out.split("\n"):
            p = line.split()
            if len(p) == 3: defs[p[2]] = src
    for src, o in objs.items():
        out = subprocess.run(["nm", "-u", o], capture_output=True, text=True).stdout
        for line in out.split("\n"):
            p = line.split()
            if p and p[-1] in defs and defs[p[-1]] != src:
                refs[src].add(defs[p[-1]])
    return objs, refs

def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(comp)
    for v in nodes:
        if v not in index: visit(v)
    return out

def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n")[2].strip(), file=sys.stderr); return 2
    global ROOT
    build, listing = sys.argv[1], "--list" in sys.argv
    if "--root" in sys.argv:
        ROOT = sys.argv[sys.argv.index("--root") + 1]
    problems = []
    for src in sources(".c") + sources(".h"):
        n = open(os.path.join(ROOT, src), encoding="utf-8").read().count("\n")
        if n > MAX_FILE and "stays whole" not in header(src):
            problems.append(f"{src}: {n} lines (over {MAX_FILE}, and its header does not say why it stays whole)")
    long_fns = []
    for src in sources(".c"):
        for name, line, length, why in functions(src):
            if length > MAX_FN:
                long_fns.append((length, src, line, name, why))
    long_fns.sort(reverse=True)
    for length, src, line, name, why in long_fns:
        if listing: print(f"  {length:4d}  {src}:{line} {name}{'' if why else '  (no why-comment)'}")
        if not why:
            problems.append(f"{src}:{line}: {name} is {length} lines, with no comment above it saying why it reads best whole")
    if len(long_fns) > MAX_LONG:
        problems.append(f"{len(long_fns)} functions over {MAX_FN} lines (at most {MAX_LONG})")
    objs, refs = graph(build)
    if not objs:
        problems.append(f"{build}: no object files under harness/ or model/ (build first)")
    for comp in sccs(sorted(objs), refs):
        if len(comp) > 1:
            problems.append("dependency circle between files: " + " <-> ".join(sorted(comp)))
    if listing:
        depth = {}
        def d(v, seen=()):
            if v in depth: return depth[v]
            if v in seen: return 0
            depth[v] = 1 + max([d(w, seen + (v,)) for w in refs.get(v, ())] or [0])
            return depth[v]
        for v in objs: d(v)
        print(f"  longest chain of file dependencies: {max(depth.values() or [0])} levels")
        for lv in range(1, max(depth.values() or [0]) + 1):
            names = sorted(os.path.basename(v) for v in objs if depth[v] == lv)
            print(f"  level {lv:2d}: " + " ".join(names))
    for p in problems: print(p)
    print(f"house: {len(problems)} problem(s); {len(long_fns)} function(s) over {MAX_FN} lines")
    return 1 if problems else 0

if __name__ == "__main__":
    sys.exit(main())
