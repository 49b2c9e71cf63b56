#!/usr/bin/env bash
# loom-state: every figure of docs/state.md, from `loom-state bench`. A private daemon runs in a
# thread of the bench process; the worker side talks to it over its Unix socket with memfd
# buffers (the emulated device), exactly as a real worker. Baselines run in the same process
# (memcpy) or on the same file (dd iflag=direct), so each figure is a ratio under the same load.
# Targets: load >= 0.8x memcpy (1 GiB of 64 MiB tensors); O_DIRECT read >= 0.8x dd; DP=8
# footprint exactly 0.125; prefetch one phase ahead hides >= 90% of the switch; the 7B-class
# state's cold and warm switch are reported. Timings are best of 5 (the machine is shared).
# $1: build folder, $2: scratch folder on the disk to measure (default: the build folder).
# Prints text and a JSON line; never fails on timing.
set -uo pipefail
b=${1:-build}
dir=${2:-$b}
echo "\$ loom-state bench --dir $dir"
"$b/loom-state" bench --dir "$dir" || echo "(exit $?)"
echo "\$ loom-state bench --dir $dir --json"
"$b/loom-state" bench --dir "$dir" --json || echo "(exit $?)"
