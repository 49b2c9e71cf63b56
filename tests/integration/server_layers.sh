#!/usr/bin/env bash
# src/server reads in one direction (docs/architecture.md, "src/server's layers"): from the
# symbols each file of libloom_server.a defines and uses, no file calls a file of a layer above
# its own. A new upward call fails here, naming the caller, the callee and the symbol.
# $1: build directory.
set -euo pipefail
build=$1
[ -f "$build/libloom_server.a" ] || { echo "SKIP: $build/libloom_server.a not built"; exit 77; }
command -v nm >/dev/null || { echo "SKIP: nm not installed"; exit 77; }
nm -A "$build/libloom_server.a" | python3 -c '
import re, sys
# layer of each file, bottom (0) up; files not named here are the top (wiring).
layers = [
    ["clock", "reply", "jobs", "store", "replog", "notify", "readfile", "dashboard_assets"],  # 0: data
    ["auth", "tokenlist", "scope", "quota", "degrade", "learn", "regroup", "options"],  # 1: on the state
    ["metrics", "retry", "compact", "statehook"],                         # 2: policies
    ["engine", "exechook", "dashboard"],                                  # 3: the scheduler thread
    ["http", "redirect"],                                                 # 4: HTTP
    ["server"],                                                           # 5: wiring
]
level = {f: i for i, fs in enumerate(layers) for f in fs}
defs, uses = {}, []
for line in sys.stdin:
    m = re.match(r"[^:]+:(\w+)\.c\.o:\s*(?:[0-9a-f]+\s+)?(\w)\s+(\S+)", line)
    if not m:
        continue
    f, kind, sym = m.groups()
    if kind in "TDBR":
        defs[sym] = f
    elif kind == "U":
        uses.append((f, sym))
# the arrows up that remain (docs/architecture.md says why each is there)
allowed = {("retry", "engine"), ("compact", "server"), ("compact", "engine"),
           ("options", "server"), ("engine", "http"), ("engine", "server")}
bad = sorted({(f, defs[s], s) for f, s in uses if s in defs and defs[s] != f
              and level.get(defs[s], 9) > level.get(f, 9) and f in level and defs[s] in level and (f, defs[s]) not in allowed})
files = sorted({f for f, _ in uses} | set(defs.values()))
missing = [f for f in files if f not in level]
for f, g, s in bad:
    print("FAIL: %s.c (layer %d) calls %s (%s.c, layer %d)" % (f, level[f], s, g, level[g]))
for f in missing:
    print("FAIL: %s.c has no layer in this test (docs/architecture.md)" % f)
if bad or missing:
    sys.exit(1)
print("%d files, no call up a layer but the %d listed" % (len(files), len(allowed)))
'
