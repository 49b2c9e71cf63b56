# Sourced by the integration tests that load loom's libraries into another process (state_*.sh,
# sync_cuda.sh from Python, install.sh).

need_py() { # python "modules" [why]: skip the test (77) unless python imports them
        if ! "$1" -c "import $2" 2>/dev/null; then
                echo "SKIP: $2 not importable from $1${3:+: $3}"
                exit 77
        fi
}

san_libs() { # library: the sanitizer runtimes it links (sanitized builds), for LD_PRELOAD
        ldd "$1" | awk '/lib(a|ub)san\.so/ {print $3}' | paste -sd: -
}

san_preload() { # library: export the preload a Python process needs to load it
        local pre
        pre=$(san_libs "$1")
        if [ -n "$pre" ]; then
                export LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0
        fi
}
