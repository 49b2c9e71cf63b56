# Sourced by the `loom harvest node` tests (harvest_node.sh, harvest_weights.sh): check
# bookkeeping, and starting, querying and stopping one node. Needs $loom and $tmp; sets
# node_pid and port, and counts into pass and fail.

check() { # name, condition...
        local name=$1
        shift
        if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}
field() { # json-line key -> value (the last occurrence of the key)
        sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
get() { # path: the node's JSON body for GET path, over bash's /dev/tcp (no HTTP client needed)
        local line
        exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
        printf 'GET %s HTTP/1.0\r\n\r\n' "$1" >&3
        while IFS= read -r line <&3; do
                case $line in "{"*) printf '%s\n' "$line" ;; esac
        done
        exec 3<&-
}
status() { # path: the HTTP status code and the body's first line, for GET path
        local line code= body=
        exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
        printf 'GET %s HTTP/1.0\r\n\r\n' "$1" >&3
        IFS= read -r line <&3
        code=$(awk '{print $2}' <<<"$line")
        while IFS= read -r line <&3; do
                [ "$line" = $'\r' ] && break
        done
        IFS= read -r body <&3
        exec 3<&-
        printf '%s %s\n' "$code" "$body"
}
wait_for() { # key min [path]: poll the node (up to 20 s) until key >= min; the body is in $st
        for _ in $(seq 400); do
                st=$(get "${3:-/v1/stats}")
                ge "$(field "$st" "$1")" "$2" && return 0
                sleep 0.05
        done
        return 1
}
listen_port() { # file prefix: wait for "PREFIX on 127.0.0.1:PORT" in file and print PORT
        local p
        for _ in $(seq 100); do
                p=$(sed -n "s/^$2 on 127.0.0.1:\([0-9]*\)$/\1/p" "$1")
                [ -n "$p" ] && { echo "$p"; return 0; }
                sleep 0.05
        done
        return 1
}
start_node() { # args...: a node in the background; its port in $port (empty if it never listened)
        : >"$tmp/node.out" # truncated here: the child's redirection may run after our first read
        "$loom" harvest node "$@" >"$tmp/node.out" 2>"$tmp/node.err" &
        node_pid=$!
        port=$(listen_port "$tmp/node.out" listening)
}
stop_node() { # SIGTERM, and the node's exit status
        kill -TERM "$node_pid"
        wait "$node_pid"
        local rc=$?
        node_pid=
        return $rc
}
