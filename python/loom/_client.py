"""Job, the phase decorator and progress reporting over libloomclient."""

import ctypes
import functools
import json
import threading
from dataclasses import dataclass, field

from . import _native

class LoomError(Exception):
    """A call to loomd failed. code is the LOOM_E* value, status the HTTP status (0 if none)."""

    def __init__(self, message, code=0, status=0):
        super().__init__(message)
        self.code = code
        self.status = status


class JobEnded(LoomError):
    """The job is finished, failed or cancelled: there is no next phase to run."""


class LeaseLost(LoomError):
    """loomd no longer knows the lease (it expired, or loomd restarted): redo the phase."""


class Restarted(LoomError):
    """loomd re-admitted the job after a failure (its lease expired, a phase failed, or a new
    worker took it over): the iteration in flight is lost. Resume from the checkpoint of
    iteration `iterations_done` and run the rollout of `resume_iteration` next."""

    def __init__(self, message, iterations_done, restarts):
        super().__init__(message, _native.ESTATE, 409)
        self.iterations_done = iterations_done
        self.resume_iteration = iterations_done + 1
        self.restarts = restarts


@dataclass(frozen=True)
class Lease:
    """A run permit: which phase, on which nodes, with how many GPUs."""

    id: int
    job: int
    phase: str
    nodes: tuple
    gpus: int
    timeout_s: float
    iteration: int


@dataclass(frozen=True)
class Advice:
    """What the scheduler wants after a progress report."""

    action: str = "none"
    keep_gpus: int = 0

    @property
    def migrate_tail(self):
        return self.action == "migrate_tail"


class _Client(_native.Handle):
    """One libloomclient handle. Calls on one handle are serialised."""

    def __init__(self, url, retry_for_s=60.0, request_timeout_s=10.0, token=None, ca_file=None):
        self.lib = _native.load()
        opts = _native.Opts()
        self.lib.loom_client_opts_default(ctypes.byref(opts))
        opts.retry_for_s = retry_for_s
        opts.request_timeout_s = request_timeout_s
        # None: the C client reads $LOOM_TOKEN / $LOOM_TOKEN_FILE and $LOOM_CA_FILE
        opts.token = token.encode() if token else None
        opts.ca_file = str(ca_file).encode() if ca_file else None
        self.h = self.lib.loom_client_new(url.encode(), ctypes.byref(opts))
        if not self.h:
            raise LoomError(f"cannot create a client for {url!r}", _native.ENOMEM)
        self.lock = threading.Lock()

    def close(self):
        if self.h:
            self.lib.loom_client_free(self.h)
            self.h = None

    def error(self, rc, what):
        msg = self.lib.loom_client_error(self.h).decode(errors="replace")
        status = self.lib.loom_client_status(self.h)
        cls = LoomError
        if rc == _native.ENOENT and what in ("progress", "release", "heartbeat"):
            cls = LeaseLost
        elif rc == _native.ESTATE and what == "acquire":
            cls = JobEnded
        return cls(f"{what}: {msg}", rc, status)

    def take_string(self, p):
        try:
            return ctypes.string_at(p.value).decode() if p.value else None
        finally:
            if p.value:
                self.lib.loom_client_free_string(p)


def _lease(c):
    return Lease(c.id, c.job, c.phase.decode(), tuple(c.nodes[: c.n_nodes]), c.gpus,
                 c.timeout_s, c.iteration)


class Job:
    """A job known to loomd. Create with Job.submit or Job.attach."""

    def __init__(self, url, job_id, client=None, reply=None):
        self.url = url
        self.id = int(job_id)
        self._c = client or _Client(url)
        self._lease = None
        self._clease = None
        self._state = (reply or {}).get("state", "queued")
        self.decision = (reply or {}).get("decision")
        self._pub = self._puller = self._bits = None
        self._note((reply or {}))
        self.took_over = False
        # From the submit reply (or info()): what the job's processes need under tokens
        # (docs/security.md): pass them as LOOM_TOKEN and LOOM_SYNC_KEY.
        self.worker_token = (reply or {}).get("worker_token")
        self.sync_key = (reply or {}).get("sync_key")

    def _note(self, info):
        """Remember where the job stands (from a job reply)."""
        self.iterations_done = int(info.get("iterations_done", 0))
        self.restarts = int(info.get("restarts", 0))
        self.resubmits = int(info.get("resubmits", 0))
        self.next_phase = info.get("next_phase") or None

    @classmethod
    def submit(cls, url, spec, key=None, **client_opts):
        """Submit spec (a dict or JSON text, as in `loom place`, plus iterations and name).
        key makes a retried submit return the same job. Raises LoomError on refusal."""
        c = _Client(url, **client_opts)
        text = spec if isinstance(spec, str) else json.dumps(spec)
        jid = ctypes.c_uint32()
        out = ctypes.c_void_p()
        with c.lock:
            rc = c.lib.loom_client_submit(c.h, text.encode(), key.encode() if key else None,
                                          ctypes.byref(jid), ctypes.byref(out))
            if rc:
                raise c.error(rc, "submit")
            reply = json.loads(c.take_string(out) or "{}")
        return cls(url, jid.value, c, reply)

    @classmethod
    def attach(cls, url, job_id, takeover=False, **client_opts):
        """Attach this process to an existing job; the resume path of a worker that a
        supervisor (systemd, Kubernetes, ``python -m loom.supervise``) started again after
        the previous worker process died.

        takeover=True says the job's previous worker process is gone: a lease it still holds is
        failed at once, and loomd restarts the job (a new admission with the job's remaining
        iterations, counted against its ``max_restarts``) instead of waiting for the lease to
        time out. Pass it from a worker its supervisor started again. takeover="rollout" (or
        "train") does the same only for a lease of that phase: for a job whose rollout and
        training run in separate processes, the restarted process takes over its own phase
        and never the other's. The default (False) changes nothing: right for a job's other
        processes, and for a worker that would rather pick up a lease its predecessor still
        holds (acquiring that phase returns the same lease; the phase is redone, no restart).

        Afterwards ``job.iterations_done`` is the last iteration loomd counted and
        ``job.resume_iteration`` (= iterations_done + 1) the one to run, starting with
        ``job.next_phase`` (a rollout after a restart). Exactly-once iterations need one
        habit: save the checkpoint of iteration ``lease.iteration`` inside the train phase,
        before it returns (the decorator then releases the lease, which is when loomd counts
        the iteration), keep the previous checkpoint too, and on attach load the checkpoint of
        ``iterations_done``. Dying between the save and the release then redoes that iteration
        from the previous checkpoint, counted once. Raises LoomError if the job is unknown."""
        if takeover not in (False, True, "rollout", "train"):
            raise ValueError(f"takeover must be False, True, 'rollout' or 'train', not {takeover!r}")
        how = None if takeover is False else b"any" if takeover is True else takeover.encode()
        c = _Client(url, **client_opts)
        r = _native.CResume()
        with c.lock:
            rc = c.lib.loom_client_attach(c.h, int(job_id), how, ctypes.byref(r))
            if rc:
                raise c.error(rc, "attach")
        job = cls(url, job_id, c)
        job._state = r.state.decode()
        job.iterations_done = r.iterations_done
        job.restarts = r.restarts
        job.resubmits = r.resubmits
        job.next_phase = r.next_phase.decode() or None
        job.took_over = bool(r.took_over)
        return job

    @property
    def resume_iteration(self):
        """The iteration to run next (iterations_done + 1), as last seen."""
        return self.iterations_done + 1

    # -- queries -----------------------------------------------------------------------------

    def info(self):
        """The job as GET /v1/jobs/{id} describes it (a dict)."""
        out = ctypes.c_void_p()
        with self._c.lock:
            rc = self._c.lib.loom_client_get(self._c.h, f"/v1/jobs/{self.id}".encode(),
                                             ctypes.byref(out))
            if rc:
                raise self._c.error(rc, "info")
            return json.loads(self._c.take_string(out))

    def _acquire_refused(self, err):
        """An acquire answered 409: the job ended, or was restarted under us, or the caller
        asked for the wrong phase."""
        try:
            info = self.info()
        except LoomError:
            return err
        seen = self.restarts
        self._state = info.get("state", self._state)
        self._note(info)
        if self.done:
            return JobEnded(str(err), err.code, err.status)
        if self.restarts > seen:
            return Restarted(f"job {self.id} was restarted ({info.get('readmission') or {}}); "
                             f"resume at iteration {self.resume_iteration}",
                             self.iterations_done, self.restarts)
        return LoomError(str(err), err.code, err.status)

    @property
    def done(self):
        """True once the job is finished, failed or cancelled (as last seen)."""
        return self._state not in ("queued", "running")

    @property
    def lease(self):
        """The lease of the phase running now, or None."""
        return self._lease

    def cancel(self):
        with self._c.lock:
            rc = self._c.lib.loom_client_cancel(self._c.h, self.id)
            if rc:
                raise self._c.error(rc, "cancel")
        self._state = "cancelled"

    # -- weights (loom.weights: the sync engine through libloomsync) ------------------------

    @property
    def model_id(self):
        """The id this job's weights are published under: "job <id>", the job's loomd id,
        which a restarted trainer or worker keeps."""
        return f"job {self.id}"

    def publish(self, tensors, version, endpoint_file=None, **opts):
        """Publish the bf16 bits of tensors (a list of torch tensors, one shard each) as
        `version`. The first call starts the publisher; its "host:port" is written to
        endpoint_file. It serves under the model id "job <id>" (see :attr:`model_id`).
        Returns the delta's statistics and the digest of the bits. CUDA tensors (all on one
        device) are published from GPU memory ("path": "cuda"; no digest, which would copy
        the model to the host)."""
        from . import weights
        cuda = weights.on_cuda(tensors)
        bits = weights.bf16_bits_cuda(tensors) if cuda else weights.bf16_bits(tensors)
        if self._pub is None:
            opts.setdefault("model", self.model_id)
            opts.setdefault("key", self.sync_key)  # None: $LOOM_SYNC_KEY, if set
            self._pub = weights.Publisher([t.numel() for t in tensors],
                                          endpoint_file=endpoint_file, **opts)
        st = self._pub.publish(version, bits)
        st["digest"] = None if cuda else weights.digest(bits)
        return st

    def pull(self, tensors, version, endpoint, timeout_s=60.0):
        """Bring tensors to the published version >= `version` (sparse delta when this process
        holds the previous one, dense otherwise) and set them to its bf16 values exactly.
        endpoint: "host:port" or the publisher's endpoint_file. Only this job's publisher
        (model id "job <id>") is accepted: after a trainer dies, whatever takes over its port
        is refused and the endpoint looked up again. Returns the pull's statistics
        and the digest of the bits now held. CUDA tensors (all on one device) are pulled into
        GPU memory ("path": "cuda"; no digest); the first call decides which."""
        from . import weights
        cuda = weights.on_cuda(tensors)
        if self._puller is None:
            self._puller = weights.Puller(endpoint, [t.numel() for t in tensors],
                                          model=self.model_id, key=self.sync_key)
            if cuda:
                import torch
                self._bits = torch.zeros(self._puller.elems, dtype=torch.int16,
                                         device=tensors[0].device)
            else:
                import numpy as np
                self._bits = np.zeros(self._puller.elems, dtype=np.uint16)
        st = self._puller.pull(self._bits, version, timeout_s)
        if st["changed"] or st["dense"]:
            (weights.load_bf16_bits_cuda if cuda else weights.load_bf16_bits)(tensors, self._bits)
        st["digest"] = None if cuda else weights.digest(self._bits)
        return st

    # -- phases ------------------------------------------------------------------------------

    def acquire(self, phase, wait_s=-1.0):
        """Block until loomd grants `phase` (rollout or train); returns the Lease, or None when
        wait_s >= 0 passed first. Raises JobEnded when the job has no next phase."""
        cl = _native.CLease()
        with self._c.lock:
            rc = self._c.lib.loom_client_acquire(self._c.h, self.id, phase.encode(),
                                                 float(wait_s), ctypes.byref(cl))
            if rc == _native.ETIMEDOUT:
                return None
            err = self._c.error(rc, "acquire") if rc else None
        if err is not None:
            if isinstance(err, JobEnded):
                err = self._acquire_refused(err)
            raise err
        self._clease = cl
        self._lease = _lease(cl)
        self._state = "running"
        if self._lease.iteration - 1 > self.iterations_done:
            self.iterations_done = self._lease.iteration - 1
        return self._lease

    def release(self, ok=True):
        """End the running phase; ok=False marks the job failed. Raises LeaseLost if loomd no
        longer knows the lease."""
        cl, self._clease, self._lease = self._clease, None, None
        if cl is None:
            raise LoomError("release: no phase is running")
        out = ctypes.c_void_p()
        with self._c.lock:
            rc = self._c.lib.loom_client_release(self._c.h, ctypes.byref(cl), bool(ok),
                                                 ctypes.byref(out))
            if rc:
                raise self._c.error(rc, "release")
            reply = json.loads(self._c.take_string(out) or "{}")
        self._state = reply.get("state", self._state)
        self._note(reply)
        return reply

    def progress(self, done, total):
        """Report done of total units of the running phase; returns the scheduler's Advice.
        Raises LeaseLost when the lease is gone (the phase will be redone)."""
        if self._clease is None:
            raise LoomError("progress: no phase is running")
        keep = ctypes.c_int(0)
        with self._c.lock:
            rc = self._c.lib.loom_client_progress(self._c.h, ctypes.byref(self._clease),
                                                  int(done), int(total), ctypes.byref(keep))
            if rc < 0:
                raise self._c.error(rc, "progress")
        return Advice("migrate_tail", keep.value) if rc == 1 else Advice()

    def phase(self, name, warm_start=None, offload=None):
        """Decorator: the function runs only under a run permit for phase `name`.

        Each call blocks for the permit, calls warm_start(lease) if given (load the phase's
        resident state from host memory onto the granted devices), runs the function, calls
        offload(lease) if given (move the state back to host memory), then releases the lease
        (as failed if anything raised; the exception propagates, and loomd restarts the job
        while it has restarts left). When the lease is lost (loomd restarted mid-phase, or the
        lease expired) the phase is acquired and run again; if loomd restarted the job in the
        meantime and the phase was a train, acquiring raises Restarted: go back to the
        checkpoint of ``err.iterations_done`` and run the rollout of ``err.resume_iteration``."""
        if name not in ("rollout", "train"):
            raise ValueError(f"phase must be 'rollout' or 'train', not {name!r}")

        def deco(fn):
            @functools.wraps(fn)
            def run(*args, **kwargs):
                while True:
                    lease = self.acquire(name)
                    try:
                        if warm_start:
                            warm_start(lease)
                        result = fn(*args, **kwargs)
                        if offload:
                            offload(lease)
                    except LeaseLost:
                        self._clease = self._lease = None
                        continue
                    except BaseException:
                        try:
                            self.release(ok=False)
                        except LoomError:
                            pass
                        raise
                    try:
                        self.release(ok=True)
                    except LeaseLost:
                        continue
                    return result

            return run

        return deco
