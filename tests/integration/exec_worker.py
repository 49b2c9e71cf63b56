#!/usr/bin/env python3
"""The worker the executor tests launch: the installed program's source, src/exec/loom-worker
(docs/slurm.md), run with the same arguments and environment."""
import os
import sys

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "exec",
                      "loom-worker")
os.execv(sys.executable, [sys.executable, WORKER] + sys.argv[1:])
