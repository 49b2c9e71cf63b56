#!/usr/bin/env bash
# Installs the Debian packages loom needs to build, test and run. Idempotent: when every package
# is already present it prints nothing and touches nothing. Run as root (or with sudo available).
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config   # toolchain
  libjansson-dev                                 # JSON
  libsqlite3-dev                                 # loomd store
  libmicrohttpd-dev                              # loomd HTTP server (HTTPS through GnuTLS)
  nettle-dev                                     # SHA-256 / HMAC: tokens, authenticated sync frames
  libsystemd-dev                                 # sd_notify: Type=notify units, watchdog
  openssl                                        # test certificates for the TLS tests
  libcurl4-openssl-dev                           # client library
  libcairo2-dev                                  # plots (SVG/PNG)
  libcriterion-dev                               # unit tests
  iproute2                                       # network namespaces + tc for sync bench
  python3                                        # Python client shim and its tests
  python3-setuptools python3-wheel python3-build # the Python package's wheel (python3 -m build)
  python3-venv python3-pip                       # install test: the wheel in a clean venv
  help2man                                       # man pages from --help
  python3-numpy python3-torch                    # real example RL jobs (CPU PyTorch), tensor buffers
  slurmctld slurmd slurm-client munge            # the Slurm executor's local test cluster
  perl util-linux                                # its power-up script (signal mask, time namespace)
  clang libclang-rt-14-dev                       # make fuzz: libFuzzer and the sanitizer runtimes
  chromium                                       # headless browser for the dashboard test
  prometheus                                     # promtool: checks loomd's /metrics page
  etcd-server etcd-client                        # replication on etcd: its tests and bench
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when an install from the current lists fails.
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
