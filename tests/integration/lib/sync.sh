# Sourced by the `loom sync` tests (sync_cli.sh, sync_keyed.sh, sync_netns.sh): check
# bookkeeping and reading JSON lines. Counts into pass and fail.

check() { # name, condition...
        local name=$1
        shift
        if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}
field() { # json-line key -> value
        sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"
}
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
