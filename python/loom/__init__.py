"""loom: the Python side of loom's phase-centric control model.

An RL job asks loomd for a run permit before each phase and gives the GPUs back after it::

    import loom

    job = loom.Job.submit("http://127.0.0.1:7480", {
        "name": "math-7b", "rollout_gpus": 8, "train_gpus": 8,
        "t_roll_s": 240, "t_train_s": 120, "slo": 1.5, "iterations": 100})

    @job.phase("rollout")
    def rollout():
        for i, batch in enumerate(batches):
            generate(batch)
            if job.progress(i + 1, len(batches)).migrate_tail:
                squeeze_tail()          # keep generating on fewer GPUs

    @job.phase("train")
    def train():
        step()

    while not job.done:
        rollout()
        train()

A decorated function blocks until loomd grants the permit, runs, and releases the lease
(as failed if it raised). While it runs, a background thread in the C library renews the
lease. If loomd was restarted while the phase ran, the phase is run again (the function
must be safe to repeat from the job's last checkpoint). Standard library + ctypes only; the
work is done by libloomclient.so (see ``loom._native`` for how it is found).

Weights move through loom's sync engine: the trainer calls ``job.publish(tensors, version)``
after each step, the rollout worker ``job.pull(tensors, version, endpoint)`` before its next
rollout (sparse bf16 deltas, checksums; see ``loom.weights``, which needs numpy and torch).
"""

from ._client import Advice, Job, JobEnded, Lease, LeaseLost, LoomError
from .weights import SyncError

__all__ = ["Advice", "Job", "JobEnded", "Lease", "LeaseLost", "LoomError", "SyncError"]
