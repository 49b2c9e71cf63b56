#!/usr/bin/env bash
# The man pages carry more than --help: each of loom.1, loomd.1 and loom-state.1 has a synopsis,
# its options (from --help), environment, files (the daemons), examples and exit status, and renders without
# warnings. Exit 77 (skipped) where help2man was missing at build time (no pages).
# Usage: man_pages.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
man=$1/man
[ -f "$man/loomd.1" ] || {
        echo "skip: no man pages in $man (help2man not installed at build time)"
        exit 77
}
fail() {
        echo "FAIL: $*" >&2
        exit 1
}
for page in loom loomd loom-state; do
        f=$man/$page.1
        want=(SYNOPSIS DESCRIPTION ENVIRONMENT "EXIT STATUS" EXAMPLES "SEE ALSO")
        [ $page = loom ] || want+=(FILES)
        for sec in "${want[@]}"; do
                grep -q "^\.SH \"\?$sec\"\?\$" "$f" || fail "$page.1 has no $sec section"
        done
        grep -q '^.*\\-\\-help' "$f" || fail "$page.1 does not list the options (--help)"
        # the sections hold text, not just a heading: each is followed by a line of content
        [ "$(awk '/^\.SH "?EXAMPLES"?$/ {on = 1; next} /^\.SH/ {on = 0} on' "$f" | wc -l)" -ge 5 ] ||
                fail "$page.1: EXAMPLES is nearly empty"
        if command -v groff >/dev/null; then
                err=$(groff -man -Tutf8 -ww -z "$f" 2>&1) || fail "$page.1 does not render: $err"
                [ -z "$err" ] || fail "$page.1: groff warns: $err"
        fi
done
echo "ok   loom.1, loomd.1, loom-state.1: synopsis, options, environment, files, examples, exit status"
