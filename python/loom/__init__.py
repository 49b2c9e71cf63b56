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
must be safe to repeat from the job's last checkpoint).

When the worker process dies (kill -9, out of memory, a lost node), loomd restarts the job: a
new admission with its remaining iterations, at most ``max_restarts`` times (job spec, default
3). loomd notices when the lease stops being renewed, or at once when the worker started in
the dead one's place attaches. Run the worker under a supervisor that starts it again
(systemd ``Restart=on-failure``, a Kubernetes pod, or ``python -m loom.supervise``) and
let it resume::

    job = loom.Job.attach(url, job_id, takeover=True)  # the dead worker's lease fails now
    state = load_checkpoint(job.iterations_done)  # the last iteration loomd counted
    while not job.done:
        try:
            rollout()
            train()          # saves checkpoint lease.iteration before returning
        except loom.Restarted as r:
            state = load_checkpoint(r.iterations_done)

loomd counts an iteration when its train lease is released, after the checkpoint was saved,
so a crash anywhere redoes at most the iteration in flight and counts none twice (see
``Job.attach``). Standard library + ctypes only; the
work is done by libloomclient.so (see ``loom._native`` for how it is found).

Weights move through loom's sync engine: the trainer calls ``job.publish(tensors, version)``
after each step, the rollout worker ``job.pull(tensors, version, endpoint)`` before its next
rollout (sparse bf16 deltas, checksums; see ``loom.weights``, which needs numpy and torch).
"""

from . import state
from ._client import Advice, Job, JobEnded, Lease, LeaseLost, LoomError, Restarted
from .weights import SyncError

__all__ = ["Advice", "Job", "JobEnded", "Lease", "LeaseLost", "LoomError", "Restarted", "state",
           "SyncError"]
