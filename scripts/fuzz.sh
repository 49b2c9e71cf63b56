#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/fuzz_*.c, built with LOOM_FUZZ) from its seed corpus in
# fuzz/corpus/<target>/ for a set time or number of executions, at the lowest CPU priority, and
# prints one line per target: executions, coverage (edges, features), corpus size, seconds, and
# the crash/leak/timeout artifacts it left (in BUILD/fuzz-artifacts/). New inputs a campaign
# finds go to BUILD/fuzz-work/<target>/, not into the repository: a crash worth keeping is
# copied into fuzz/corpus/<target>/ with its fix, where `make test` replays it.
# Usage: scripts/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET [RUNS_PER_TARGET [TARGET...]]]
set -uo pipefail
b=${1:?usage: fuzz.sh BUILD_DIR [SECONDS [RUNS [TARGET...]]]}
secs=${2:-60}
runs=${3:-0}
shift $(($# < 3 ? $# : 3))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$b"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f" | sed 's/^fuzz_//')"); done
fi
mkdir -p "$b/fuzz-artifacts"
fail=0
printf '%-11s %12s %8s %8s %8s %8s %s\n' target execs cov ft corpus seconds result
for t in "${targets[@]}"; do
  work="$b/fuzz-work/$t"
  mkdir -p "$work"
  log="$b/fuzz-artifacts/$t.log"
  # -timeout: a unit that runs 30 s is a hang; at nice 19 on a loaded machine 10 s is not
  args=(-max_total_time="$secs" -max_len=65536 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="$b/fuzz-artifacts/$t-")
  [ "$runs" -gt 0 ] && args+=(-runs="$runs")
  before=$(ls "$b/fuzz-artifacts" | grep -c "^$t-" || true)
  t0=$(date +%s)
  nice -n 19 "$b/fuzz_$t" "${args[@]}" "$work" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  after=$(ls "$b/fuzz-artifacts" | grep -c "^$t-" || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)
  cov=$(echo "$line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  corp=$(echo "$line" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
  result=ok
  if [ $rc -ne 0 ] || [ "$after" -gt "$before" ]; then
    result="FAIL (exit $rc; see $log and $b/fuzz-artifacts/$t-*)"
    fail=1
  fi
  printf '%-11s %12s %8s %8s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
    "$took" "$result"
done
exit $fail
