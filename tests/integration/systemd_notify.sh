#!/usr/bin/env bash
# loomd and loom-state speak systemd's readiness protocol: READY=1 once they serve, WATCHDOG=1
# under WATCHDOG_USEC, STOPPING=1 on SIGTERM, to the datagram socket named by $NOTIFY_SOCKET.
# Usage: systemd_notify.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
exec python3 "$2/tests/integration/systemd_notify_test.py" "$1" "$2"
