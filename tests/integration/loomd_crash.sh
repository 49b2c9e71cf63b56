#!/usr/bin/env bash
# Crash safety: `loom demo --crash 3` kills loomd with SIGKILL at three random (seeded) moments
# of a live run with real workers and restarts it. Every accepted job must finish, each with
# exactly its iterations: loomd's count, the workers' acknowledged count and the store's
# released train leases all agree, so no iteration was lost or counted twice.
# Usage: loomd_crash.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
b=$1
dir=$(mktemp -d /tmp/loom-crash-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$b/loom" demo --crash 3 --seed "${LOOM_CRASH_SEED:-3}" --jobs 3 --alone 1 --quiet \
  --data-dir "$dir/data" | tee "$dir/out"
grep -q "every job finished with exactly its iterations: yes" "$dir/out"
python3 - "$dir/data/loom.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT id, name, state, target, done FROM jobs").fetchall()
assert len(rows) >= 3, rows
for jid, name, state, target, done in rows:
    trains = db.execute("SELECT count(*) FROM leases WHERE job=? AND phase='train' "
                        "AND state='released'", (jid,)).fetchone()[0]
    assert state == "finished" and done == target == trains, (name, state, target, done, trains)
    print(f"ok   job {jid} ({name}): finished, {done} iterations, {trains} train releases")
lost = db.execute("SELECT count(*) FROM leases WHERE state='lost'").fetchone()[0]
print(f"ok   {lost} leases were lost to the crashes and redone")
subs = db.execute("SELECT count(*) FROM log WHERE kind='submit'").fetchone()[0]
assert subs == len(rows), (subs, len(rows))
PY
