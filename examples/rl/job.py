"""A GRPO job under loomd, split the way RL teams split theirs: a rollout worker process
(sampling, on the rollout pool: CPU 0) and a trainer process (log-probs, GRPO loss, optimizer
step, on the training pool: CPU 1). Every phase runs under a loomd run permit through the
Python package; the trainer publishes each new version of the weights through loom's sync
engine and the rollout worker pulls it before its next rollout.

    job.py launch --warmup-only --task reverse --size m --dir DIR --cache CACHE
    job.py launch --url URL --job ID --task reverse --size m --steps 20 --dir DIR --cache CACHE
    job.py rollout DIR      (started by launch, pinned to CPU 0; restarted if killed)
    job.py trainer DIR      (started by launch, pinned to CPU 1; restarted if killed)

Rollouts reach the trainer as files in DIR (batch-<it>.pt, written atomically); weights go
through loom (job.publish / job.pull). The trainer checkpoints at the end of every train permit
(TrainerState) and a restarted one resumes from the checkpoint of loomd's count. Each process
appends what it did to DIR/<role>.jsonl; launch folds those into DIR/result.json.

The supervised warm-up is the job's initialisation: run it (--warmup-only) before submitting
the job, since loomd's first permit expires if nobody claims it within one lease timeout. It
is deterministic and cached in CACHE by its inputs, so a rerun of the job (alone, say) starts
from the same bits without redoing it.

--device cpu (default), cuda or auto (cuda when torch sees a CUDA device) puts the policy, the
reference model and Adam's state on that device; there the sync engine publishes from and
pulls into GPU memory (--gpu-sync off: through host copies, as on a CPU), and with --residency
loom-state the Adam moments and master weights go through loom-state's CUDA tier
(docs/gpu.md). The bf16 digests both sides log are then read off the GPU for the log only.
--size 100m / 350m are models for a GPU.
"""

import argparse
import copy
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import loom  # noqa: E402

CPU_ROLLOUT, CPU_TRAIN = 0, 1
DEFAULTS = {
    "task": "reverse", "size": "m", "steps": 20, "seed": 1, "prompts": 8, "group": 8,
    "lr": 1e-3, "beta": 0.02, "warmup_steps": 30, "eval_prompts": 128, "bucket_elems": 4096,
    "residency": "file", "max_restarts": 2, "lease_wait_s": 60.0, "device": "cpu",
    "gpu_sync": "on",
}


# ---- shared helpers -------------------------------------------------------------------------

def t0():
    return float(os.environ.get("LOOM_T0", "0") or 0)


def say(cfg, what):
    """One timeline line, stamped with seconds since LOOM_T0, in one write(2)."""
    line = f"{time.monotonic() - t0():8.3f}  {cfg['name']:<8} {what}\n"
    os.write(1, line.encode())


def log(path, rec):
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def pin(cpu):
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        pass  # best effort: fewer CPUs than pools


def load_cfg(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def wait_turn(job, phase, poll_s=0.03):
    """Block until it is this job's turn for `phase`: a lease of that phase is held (by this
    worker's dead predecessor, whose lease a new acquire takes over) or none is and the phase
    is next. Returns loomd's view of the job, or None once the job has ended."""
    while True:
        info = job.info()
        if info["state"] not in ("queued", "running"):
            return None
        if info.get("phase") == phase or (info.get("phase") is None
                                          and info.get("next_phase") == phase):
            return info
        time.sleep(poll_s)


def wait_file(path, poll_s=0.02, timeout_s=600):
    end = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(poll_s)


def atomic_save(obj, path):
    import torch
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def batch_path(d, it):
    return os.path.join(d, f"batch-{it:05d}.pt")


def note_published(d, version, epoch):
    """The trainer's last published version, for the rollout worker's cheap wait (a file, so
    that a waiting worker does not poll loomd while the other jobs run), and the trainer's
    incarnation (0, then 1, 2, ... for each restart)."""
    tmp = os.path.join(d, f"published.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"{version} {epoch}\n")
    os.replace(tmp, os.path.join(d, "published"))


def wait_published(d, version, epoch, poll_s=0.02, timeout_s=600):
    """Wait until version is published, or a trainer other than incarnation `epoch` wrote the
    file: a restarted trainer resumes at loomd's count, and what runs next is then loomd's
    to say. Returns the incarnation that wrote the file."""
    path, end = os.path.join(d, "published"), time.monotonic() + timeout_s
    while True:
        try:
            with open(path) as f:
                v, e = (int(x) for x in f.read().split())
            if v >= version or e != epoch:
                return e
        except (OSError, ValueError):
            pass
        if time.monotonic() > end:
            raise TimeoutError(f"version {version} was not published")
        time.sleep(poll_s)


def incarnation(role):
    """0 for the first process of a role, k for its k-th restart (set by launch)."""
    return int(os.environ.get(f"LOOM_{role.upper()}_RESTART", "0") or 0)


def fault(role, point, it):
    """A kill -9 placed exactly, for the tests: $LOOM_RL_KILL is a comma-separated list of
    role:point:iteration, and its j-th entry for a role kills (SIGKILL, no cleanup) that role's
    j-th incarnation when it reaches `point` of iteration `it`. Trainer points: step (after the
    optimizer step), publish (after the publish), checkpoint (the checkpoint is being written:
    the temporary file is complete but not renamed; before the offload for loom-state),
    release (the checkpoint is saved, the lease not yet released)."""
    spec = os.environ.get("LOOM_RL_KILL")
    if not spec:
        return
    mine = [x.split(":") for x in spec.split(",") if x.startswith(role + ":")]
    k = incarnation(role)
    if k < len(mine) and mine[k][1] == point and int(mine[k][2]) == it:
        os.kill(os.getpid(), signal.SIGKILL)


# ---- the trainer's state between permits, and its checkpoint ---------------------------------

class CheckpointError(RuntimeError):
    """The trainer cannot resume bit-exactly: a checkpoint is missing, behind loomd's count or
    does not match this job."""


CKPT_FORMAT = 1
HDR_BYTES = 2048  # the header (JSON, space-padded) is one fixed-size u8 tensor in loom-state
CKPT_CONFIG = ("task", "size", "seed", "prompts", "group", "lr", "beta", "warmup_steps",
               "eval_prompts")


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tensor_digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


class TrainerState:
    """Where the trainer's state lives between its train permits, and the checkpoint that lets
    a killed trainer resume bit-exactly.

    save(k, version, digest) runs when a train permit ends (the phase decorator's offload hook:
    after the optimizer step and the publish of version k, before the lease is released, which
    is when loomd counts iteration k). It writes checkpoint k, all or nothing: the fp32 master
    weights, Adam's moments and step counts, torch's RNG state and a header (the iteration, the
    published version and the SHA-256 of its bf16 bits, digests of the reference model and of
    the job's config). Then the moments leave the process; load(lease) brings them back from
    checkpoint k when the next permit is granted. Modes:

    - "loom-state": one offload to the node's loom-state daemon under (job key, version k); the
      daemon makes it all or nothing. The master weights ride along with the moments.
    - "file": DIR/ckpt-<k>.pt, written to a temporary file, fsync'd and renamed.
    - "keep": the moments stay in the process; the checkpoint still goes to DIR as for "file".

    Checkpoint k-1 is dropped only once iteration k is counted (prune(k), after the release), so
    a trainer killed between save and release finds the checkpoint of loomd's count.
    restore(n) is the resume path of a new trainer process: checkpoint n's master weights, step
    counts and RNG state (the moments follow at the next grant, as always). Every mode restores
    the same bits, so the job computes the same weights in all three, killed or not."""

    def __init__(self, model, opt, ref, cfg, d, key=None):
        mode = cfg["residency"]
        if mode not in ("loom-state", "file", "keep"):
            raise ValueError(f"residency: 'loom-state', 'file' or 'keep', not {mode!r}")
        self.model, self.opt, self.d, self.mode, self.key = model, opt, d, mode, key
        self.params = list(model.parameters())
        self.st = loom.state.Client(cfg["state_sock"]) if mode == "loom-state" else None
        self.k = 0          # the iteration the state in this process belongs to
        self.steps = {}     # param index -> Adam step count, while the moments are away
        self.ref = tensor_digest(ref.parameters())
        self.config = hashlib.sha256(json.dumps([cfg[c] for c in CKPT_CONFIG])
                                     .encode()).hexdigest()[:16]
        self.bytes, self.found, self.seconds = 0, None, 0.0   # last load of the moments
        self.save_bytes, self.save_s, self.verified = 0, 0.0, False  # last save

    def path(self, k):
        return os.path.join(self.d, f"ckpt-{k:05d}.pt")

    # -- what a checkpoint holds -----------------------------------------------------------

    def _header(self, k, version, digest):
        st = self.opt.state
        return {"format": CKPT_FORMAT, "iteration": k, "version": version, "digest": digest,
                "ref": self.ref, "config": self.config,
                "steps": {str(i): int(st[p]["step"]) for i, p in enumerate(self.params)
                          if p in st}}

    def _check(self, hdr, k, where):
        for f, want in (("format", CKPT_FORMAT), ("iteration", k), ("config", self.config),
                        ("ref", self.ref)):
            if hdr.get(f) != want:
                raise CheckpointError(f"checkpoint {where}: {f} is {hdr.get(f)!r}, this trainer "
                                      f"needs {want!r}: refusing to resume from it")

    def _tensors(self, hdr, weights=True, moments=True, rng=None):
        """The loom-state items of a checkpoint: fresh buffers when loading."""
        import torch
        out = {}
        if weights:
            for i, p in enumerate(self.params):
                out[f"w.{i}"] = p.detach()
        if moments:
            for i in map(int, hdr["steps"]):
                s = self.opt.state.get(self.params[i])
                shape = self.params[i].shape
                dev = self.params[i].device
                out[f"m.{i}"] = s["exp_avg"] if s else torch.empty(shape, device=dev)
                out[f"v.{i}"] = s["exp_avg_sq"] if s else torch.empty(shape, device=dev)
        if rng is not None:
            out["rng"] = rng
        return out

    # -- each permit ----------------------------------------------------------------------

    def load(self, lease):
        """warm_start: the moments of checkpoint k back into fresh tensors."""
        import torch
        want = lease.iteration - 1
        if want != self.k:
            raise CheckpointError(f"train permit for iteration {want}, but this trainer holds "
                                  f"the state of iteration {self.k}")
        t = time.monotonic()
        self.found, self.bytes = None, 0
        if self.mode == "file" and self.k > 0:
            self.opt.load_state_dict(torch.load(self.path(self.k))["optimizer"])
            self.found = "file"
        elif self.mode == "loom-state" and self.steps:
            bufs = {}
            for i, step in self.steps.items():
                # on the parameter's device: CUDA moments come back through loom-state's
                # CUDA tier (loom.state picks the path by the tensor's device)
                shape, dev = self.params[i].shape, self.params[i].device
                ea, eas = torch.empty(shape, device=dev), torch.empty(shape, device=dev)
                bufs[f"m.{i}"], bufs[f"v.{i}"] = ea, eas
                self.opt.state[self.params[i]] = {"step": torch.tensor(float(step)),
                                                  "exp_avg": ea, "exp_avg_sq": eas}
            self.found = self.st.load(bufs, job=self.key, version=self.k).found
        if self.found:
            self.bytes = sum(v.numel() * v.element_size() for s in self.opt.state.values()
                             for n, v in s.items() if n != "step")
        self.seconds = time.monotonic() - t

    def save(self, k, version, digest):
        """offload: checkpoint k (all or nothing), then the moments leave the process."""
        import torch
        t = time.monotonic()
        hdr = self._header(k, version, digest)
        rng = torch.get_rng_state()
        self.verified = False
        if self.mode == "loom-state":
            text = json.dumps(hdr).encode()
            if len(text) > HDR_BYTES:
                raise CheckpointError(f"checkpoint header of {len(text)} B > {HDR_BYTES} B")
            items = self._tensors(hdr, rng=rng)
            items["hdr"] = torch.frombuffer(bytearray(text.ljust(HDR_BYTES)), dtype=torch.uint8)
            fault("trainer", "checkpoint", k - 1)
            res = self.st.offload(items, job=self.key, version=k)
            if res.dedup_bytes:
                # A killed predecessor saved checkpoint k before loomd counted it; loom-state
                # keeps the first copy of a key, so it must hold these very bits.
                self._same_as_stored(k, items)
            self.save_bytes = res.bytes + res.dedup_bytes
        else:
            obj = {"header": hdr, "weights": [p.detach() for p in self.params],
                   "optimizer": self.opt.state_dict(), "rng": rng}
            path = self.path(k)
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                torch.save(obj, f)
                f.flush()
                os.fsync(f.fileno())
            fault("trainer", "checkpoint", k - 1)  # complete but not yet in place
            os.replace(tmp, path)
            fsync_dir(self.d)
            self.save_bytes = os.path.getsize(path)
        self.k = k
        if self.mode != "keep":
            self.steps = {int(i): s for i, s in hdr["steps"].items()}
            self.opt.state.clear()
        self.save_s = time.monotonic() - t

    def _same_as_stored(self, k, items):
        import torch
        back = {n: torch.empty_like(v) for n, v in items.items()}
        self.st.load(back, job=self.key, version=k)
        diff = [n for n in items if not torch.equal(items[n], back[n])]
        if diff:
            raise CheckpointError(f"loom-state already holds a different checkpoint of "
                                  f"iteration {k} ({self.key}, version {k}; {diff[0]} differs): "
                                  f"the rerun of iteration {k - 1} diverged")
        self.verified = True

    def prune(self, k):
        """Iteration k is counted: checkpoint k-1 (and any half-written file) can go."""
        if self.mode == "loom-state":
            if k >= 2:
                self.st.drop(self.key, version=k - 1)
            return
        for name in os.listdir(self.d):
            if name.startswith("ckpt-") and (".tmp" in name or name < f"ckpt-{k:05d}"):
                os.unlink(os.path.join(self.d, name))

    # -- a new trainer process ----------------------------------------------------------------

    def restore(self, n):
        """Resume at loomd's count n: checkpoint n's master weights, step counts and RNG state.
        n = 0 is the post-warm-up model and needs none. Returns checkpoint n's header (None for
        n = 0); raises CheckpointError when there is no checkpoint n or it is not this job's."""
        import torch
        self.k = 0
        if n == 0:
            return None
        if self.mode == "loom-state":
            where = f"of iteration {n} in loom-state ({self.key}, version {n})"
            raw = torch.empty(HDR_BYTES, dtype=torch.uint8)
            try:
                self.st.load({"hdr": raw}, job=self.key, version=n)
            except loom.state.StateError as err:
                behind = ""
                try:
                    self.st.load({"hdr": raw}, job=self.key, version=n - 1)
                    behind = f"; the newest is iteration {n - 1}, behind loomd's count"
                except loom.state.StateError:
                    pass
                raise CheckpointError(f"no checkpoint {where}: {err}{behind}") from None
            hdr = json.loads(bytes(raw.numpy()).decode())
            self._check(hdr, n, where)
            rng = torch.empty_like(torch.get_rng_state())
            try:
                self.st.load(self._tensors(hdr, moments=False, rng=rng), job=self.key,
                             version=n)
            except loom.state.StateError as err:
                raise CheckpointError(f"checkpoint {where}: {err}") from None
            self.steps = {int(i): s for i, s in hdr["steps"].items()}
        else:
            path = self.path(n)
            if not os.path.exists(path):
                have = sorted(int(x[5:10]) for x in os.listdir(self.d)
                              if x.startswith("ckpt-") and x.endswith(".pt"))
                why = (f"the newest is iteration {have[-1]}, behind loomd's count" if have and
                       have[-1] < n else f"checkpoints present: {have or 'none'}")
                raise CheckpointError(f"no checkpoint of iteration {n} at {path}: {why}")
            try:
                obj = torch.load(path)
                hdr, rng = obj["header"], obj["rng"]
            except Exception as err:  # noqa: BLE001 (whatever torch.load says, with the path)
                raise CheckpointError(f"checkpoint {path} is unreadable: {err}") from None
            self._check(hdr, n, path)
            with torch.no_grad():
                for p, w in zip(self.params, obj["weights"]):
                    p.copy_(w)
            if self.mode == "keep":
                self.opt.load_state_dict(obj["optimizer"])
            else:
                self.steps = {int(i): s for i, s in hdr["steps"].items()}
        torch.set_rng_state(rng)
        self.k = n
        return hdr


# ---- the trainer ----------------------------------------------------------------------------

def warm_policy(cfg, G):
    """The policy after the supervised warm-up. The warm-up is deterministic, so it is cached
    by its inputs: a solo run of the same job starts from the very same bits."""
    dev = G.pick_device(cfg.get("device", "cpu"))
    model = G.make_policy(cfg["size"], cfg["seed"]).to(dev)
    inputs = [cfg[k] for k in ("task", "size", "seed", "warmup_steps")]
    if dev.type != "cpu":  # another device computes other bits: its own cache entry
        inputs.append(dev.type)
    key = hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:16]
    cache = os.path.join(cfg.get("cache") or cfg["dir"], f"warm-{key}.pt")
    import torch
    if os.path.exists(cache):
        model.load_state_dict(torch.load(cache))
        return model, True
    G.warmup(model, G.TASKS[cfg["task"]], cfg["warmup_steps"], cfg["seed"])
    atomic_save(model.state_dict(), cache)
    return model, False


def gpu_sync_on(dev, cfg):
    """Whether the sync engine moves this side's weights straight from or into GPU memory."""
    return dev.type == "cuda" and cfg.get("gpu_sync", "on") == "on"


def bf16_digest(ps):
    """The digest of tensors' bf16 bits, read off the GPU when they are there (for the log)."""
    from loom import weights
    bits = weights.bf16_bits_cuda(ps).cpu().numpy() if weights.on_cuda(ps) else \
        weights.bf16_bits(ps)
    return weights.digest(bits)


def trainer_main(d):
    cfg = load_cfg(d)
    pin(CPU_TRAIN)
    import torch
    import grpo as G
    dev = G.pick_device(cfg.get("device", "cpu"))
    G.setup_torch(dev)
    # A restarted trainer (its predecessor died) takes over the train lease the dead one held,
    # if any: loomd fails it and restarts the job from its last counted iteration, whose
    # checkpoint this process loads. It never touches the rollout worker's lease.
    restarted = incarnation("trainer")
    ep = os.path.join(d, "weights.endpoint")
    if restarted:
        # The dead trainer's publisher is gone: a rollout granted after the takeover below
        # waits for this process's endpoint instead of trying the old one.
        try:
            os.unlink(ep)
        except FileNotFoundError:
            pass
    job = loom.Job.attach(cfg["url"], cfg["job"], takeover="train" if restarted else False)
    task = G.TASKS[cfg["task"]]
    t = time.monotonic()
    model, cached = warm_policy(cfg, G)
    say(cfg, f"trainer  warm-up {'from cache' if cached else 'done'} in "
             f"{time.monotonic() - t:.1f} s, {G.n_params(model)} parameters")
    ref = copy.deepcopy(model).eval()
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    res = TrainerState(model, opt, ref, cfg, d, key=f"{cfg['name']}-{cfg['job']}")
    params = list(model.parameters())

    gpu_sync = gpu_sync_on(dev, cfg)

    def host(ps):  # GPU weights are published from GPU memory, or from host copies
        return ps if dev.type == "cpu" or gpu_sync else [p.detach().cpu() for p in ps]

    def publish(ps, version, **kw):
        st = job.publish(host(ps), version, **kw)
        if st.get("digest") is None:  # the GPU path computes none: read the bits for the log
            st["digest"] = bf16_digest(ps)
        return st

    out = os.path.join(d, "trainer.jsonl")
    n = job.iterations_done
    t = time.monotonic()
    try:
        hdr = res.restore(n)
    except CheckpointError as err:
        say(cfg, f"trainer  cannot resume at iteration {n}: {err}")
        log(out, {"event": "resume_failed", "iterations_done": n, "error": str(err)})
        raise SystemExit(1)
    if restarted:
        say(cfg, f"trainer  restarted trainer attached: iterations done {n}, lease taken over: "
                 f"{'yes' if job.took_over else 'no'}, job restarts {job.restarts}; "
                 + (f"checkpoint {n} loaded in {time.monotonic() - t:.2f} s" if hdr else
                    "no checkpoint needed"))
    # Version n again, from this process: a rollout worker that holds it (from the dead
    # trainer) keeps it, verified against the new publisher's checksums; n + 1 is a delta.
    st = publish(params, n, endpoint_file=ep, bucket_elems=cfg["bucket_elems"])
    if hdr and st["digest"] != hdr["digest"]:
        say(cfg, f"trainer  checkpoint {n} restored weights whose bf16 digest "
                 f"{st['digest'][:12]} is not the published {hdr['digest'][:12]}")
        raise SystemExit(1)
    log(out, {"event": "publish", "version": n, "t": time.monotonic(), "pid": os.getpid(),
              "incarnation": restarted, "resumed_from": n if hdr else None, **st})
    note_published(d, n, restarted)

    published = [None]  # the digest of the version the running train phase published

    def end_permit(lease):
        # lease.iteration (1-based) = it + 1: the count loomd reaches when this lease is
        # released, and the version just published
        res.save(lease.iteration, lease.iteration, published[0])
        fault("trainer", "release", lease.iteration - 1)  # checkpoint ahead of loomd's count

    @job.phase("train", warm_start=res.load, offload=end_permit)
    def train(it, batch):
        t_start = time.monotonic()
        log(out, {"event": "start", "it": it, "pid": os.getpid(), "t": t_start})
        say(cfg, f"train    it {it:3d}  permit on nodes {list(job.lease.nodes)}")
        rec = {"event": "step", "it": it, "t_start": t_start}
        if it == 0:
            rec["heldout_start"] = G.evaluate(model, task, cfg["seed"], cfg["eval_prompts"])
        loss, kl = G.grpo_loss(model, ref, batch, cfg["beta"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        fault("trainer", "step", it)  # the master weights moved; nothing published or saved
        if it == cfg["steps"] - 1:
            rec["heldout_end"] = G.evaluate(model, task, cfg["seed"], cfg["eval_prompts"])
        st = publish(params, it + 1)
        published[0] = st["digest"]
        fault("trainer", "publish", it)  # version it + 1 served, not yet checkpointed
        rec.update(loss=float(loss), kl=kl, reward=float(batch["rewards"].mean()),
                   version=it + 1, density=st["density"], changed=st["changed"],
                   delta_bytes=st["delta_bytes"], dense_bytes=st["dense_bytes"],
                   digest=st["digest"], t_end=time.monotonic(), lease=job.lease.id,
                   pid=os.getpid())
        return rec

    while True:
        it = job.info()["iterations_done"]
        if it >= cfg["steps"]:
            break
        wait_file(batch_path(d, it))
        if wait_turn(job, "train") is None:
            break
        batch = torch.load(batch_path(d, it), map_location=dev)
        if batch["version"] != it:
            raise RuntimeError(f"rollout {it} used weights version {batch['version']}")
        try:
            rec = train(it, batch)
        except loom.Restarted as r:  # the job was re-admitted while we waited: redo rollout
            say(cfg, f"trainer  job restarted by loomd; resuming at iteration "
                     f"{r.iterations_done}")
            continue
        except CheckpointError as err:  # the lease was released as failed
            say(cfg, f"trainer  checkpoint: {err}")
            log(out, {"event": "checkpoint_failed", "it": it, "error": str(err)})
            raise SystemExit(1)
        res.prune(it + 1)  # iteration it + 1 is counted: checkpoint it can go
        rec.update(optimizer_offloaded_bytes=res.bytes, optimizer_found=res.found,
                   optimizer_load_s=res.seconds, ckpt_bytes=res.save_bytes,
                   ckpt_s=res.save_s, ckpt_verified=res.verified)
        log(out, rec)
        note_published(d, it + 1, restarted)
        say(cfg, f"train    it {it:3d}  done {rec['t_end'] - rec['t_start']:.2f} s, reward "
                 f"{rec['reward']:.3f}, delta {rec['density']:.1%} dense, "
                 f"{rec['delta_bytes']} of {rec['dense_bytes']} B, checkpoint "
                 f"{res.save_bytes} B in {res.save_s * 1e3:.0f} ms")
    job._pub.close()


# ---- the rollout worker ---------------------------------------------------------------------

def rollout_main(d):
    cfg = load_cfg(d)
    pin(CPU_ROLLOUT)
    import torch
    import grpo as G
    dev = G.pick_device(cfg.get("device", "cpu"))
    G.setup_torch(dev)
    # A restarted worker (its predecessor died) takes over the rollout lease the dead one held,
    # if any: loomd fails it at once and restarts the job from its last counted iteration,
    # instead of waiting for the lease to time out. It never touches the trainer's lease.
    restarted = incarnation("rollout")
    job = loom.Job.attach(cfg["url"], cfg["job"], takeover="rollout" if restarted else False)
    if restarted:
        say(cfg, f"rollout  restarted worker attached: iterations done {job.iterations_done}, "
                 f"lease taken over: {'yes' if job.took_over else 'no'}, "
                 f"job restarts {job.restarts}")
    task = G.TASKS[cfg["task"]]
    model = G.make_policy(cfg["size"], cfg["seed"] + 1)  # overwritten by the first pull
    params = list(model.parameters())  # host memory: the sync engine pulls into it
    run = model if dev.type == "cpu" else copy.deepcopy(model).to(dev)
    gpu_sync = gpu_sync_on(dev, cfg)
    if gpu_sync:  # or straight into the policy's GPU memory
        params = list(run.parameters())
    out = os.path.join(d, "rollout.jsonl")
    ep = os.path.join(d, "weights.endpoint")
    first = True

    @job.phase("rollout")
    def rollout(it):
        t_start = time.monotonic()
        log(out, {"event": "start", "it": it, "pid": os.getpid(), "t": t_start})
        say(cfg, f"rollout  it {it:3d}  permit on nodes {list(job.lease.nodes)}")
        st = job.pull(params, it, ep, timeout_s=cfg["lease_wait_s"])
        if st["version"] != it:
            raise RuntimeError(f"pulled version {st['version']}, rollout {it} needs {it}")
        # the bits the policy runs, read back from the model itself
        used = bf16_digest(params)
        g, rng = G.gen(cfg["seed"], "rollout", it)
        prompts = [p for p in task.draw(rng, cfg["prompts"]) for _ in range(cfg["group"])]
        if run is not model and not gpu_sync:
            run.load_state_dict(model.state_dict())  # the pulled weights onto the device
        toks, logp, mask = (t.cpu() for t in G.sample(run, prompts, task.max_new, g))
        rewards = torch.tensor([G.reward(task, p, t.tolist()) for p, t in zip(prompts, toks)])
        atomic_save({"prompts": prompts, "tokens": toks, "logp": logp, "mask": mask,
                     "rewards": rewards, "group": cfg["group"], "version": st["version"]},
                    batch_path(d, it))
        return {"event": "done", "it": it, "pid": os.getpid(), "t_start": t_start,
                "t_end": time.monotonic(), "version": st["version"], "pulled_digest":
                st["digest"], "model_digest": used, "pull_bytes": st["bytes"],
                "pull_dense": st["dense"], "pull_changed": st["changed"],
                "pull_s": st["seconds"], "reward": float(rewards.mean()),
                "lease": job.lease.id}

    # Rollout `it` runs on version `it`, which the trainer publishes at the end of train it-1
    # (version 0: once it has its initial weights). Wait for it on a file before asking loomd
    # whose turn it is, so a waiting worker neither holds the rollout pool nor polls loomd.
    wait_file(ep)
    it = job.iterations_done
    trainer = 0  # the trainer incarnation whose publishes we have seen
    while True:
        trainer = wait_published(d, min(it, cfg["steps"] - 1), trainer)
        info = wait_turn(job, "rollout")
        if info is None or info["iterations_done"] >= cfg["steps"]:
            break
        it = info["iterations_done"]
        if first:
            first = False
            say(cfg, f"rollout  worker pid {os.getpid()} starts at iteration {it}")
        # the weights for rollout `it` are version `it`: published before train it-1 ended
        rec = rollout(it)
        log(out, rec)
        say(cfg, f"rollout  it {it:3d}  done {rec['t_end'] - rec['t_start']:.2f} s, reward "
                 f"{rec['reward']:.3f}, pulled v{rec['version']} "
                 f"{'dense' if rec['pull_dense'] else 'delta'} {rec['pull_bytes']} B")
        it += 1


# ---- the launcher ---------------------------------------------------------------------------

def spawn(role, d, env, restart=0):
    env = dict(env, **{f"LOOM_{role.upper()}_RESTART": str(restart)})
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), role, d], env=env)


def summarize(cfg, d, restarts):
    def read(name):
        p = os.path.join(d, name)
        return [json.loads(x) for x in open(p)] if os.path.exists(p) else []
    tr, ro = read("trainer.jsonl"), read("rollout.jsonl")
    steps = [r for r in tr if r["event"] == "step"]
    done = [r for r in ro if r["event"] == "done"]
    pubs = {r["version"]: r["digest"] for r in tr if "digest" in r}
    resumes = [r for r in tr if r["event"] == "publish" and r.get("incarnation")]
    first = min([r["t_start"] for r in done] or [0])
    last = max([r["t_end"] for r in steps] or [0])
    res = {
        "name": cfg["name"], "job": cfg["job"], "task": cfg["task"], "size": cfg["size"],
        "seed": cfg["seed"], "steps": len(steps), "restarts": restarts,
        "rewards": [r["reward"] for r in steps],
        "heldout_start": next((r["heldout_start"] for r in steps if "heldout_start" in r), None),
        "heldout_end": next((r["heldout_end"] for r in steps if "heldout_end" in r), None),
        "density": [r["density"] for r in steps],
        "delta_bytes": [r["delta_bytes"] for r in steps],
        "dense_bytes": [r["dense_bytes"] for r in steps],
        "t_first": first, "t_last": last, "wall_s": last - first,
        "busy_rollout_s": sum(r["t_end"] - r["t_start"] for r in done),
        "busy_train_s": sum(r["t_end"] - r["t_start"] for r in steps),
        "steps_counted": [r["it"] for r in steps],
        "rollouts_done": [r["it"] for r in done],
        "rollouts_started": [r["it"] for r in ro if r["event"] == "start"],
        "pulls_bit_exact": all(r["pulled_digest"] == pubs.get(r["version"])
                               and r["model_digest"] == r["pulled_digest"] for r in done),
        "pulls_dense": [r["it"] for r in done if r["pull_dense"]],
        "final_digest": pubs.get(max(pubs) if pubs else None),
        "optimizer_residency": cfg["residency"],
        "optimizer_found": [r.get("optimizer_found") for r in steps],
        # the checkpoint written at the end of every train permit
        "ckpt_bytes": [r.get("ckpt_bytes") for r in steps],
        "ckpt_s": [r.get("ckpt_s") for r in steps],
        # restarted trainers: the iteration each resumed at, and whether each version was
        # always published with the same bits (by every trainer process that published it)
        "trainer_resumed_at": [r["resumed_from"] or 0 for r in resumes],
        "republished_same": all(r["digest"] == pubs[r["version"]] for r in tr if "digest" in r),
    }
    try:
        info = loom.Job.attach(cfg["url"], cfg["job"]).info()
        res["loomd"] = {k: info.get(k) for k in ("state", "iterations_done", "restarts")}
    except loom.LoomError:
        res["loomd"] = None
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def launch(a):
    if a.warmup_only:
        import grpo as G
        cfg = dict(DEFAULTS)
        cfg.update({k: getattr(a, k) for k in DEFAULTS if getattr(a, k, None) is not None})
        G.setup_torch(G.pick_device(cfg["device"]))
        cfg.update(dir=a.dir, cache=a.cache, name=a.name or cfg["task"])
        os.makedirs(a.cache or a.dir, exist_ok=True)
        t = time.monotonic()
        model, cached = warm_policy(cfg, G)
        say(cfg, f"warm-up  {G.n_params(model)} parameters, {cfg['warmup_steps']} supervised "
                 f"steps: {'cached' if cached else f'{time.monotonic() - t:.1f} s'}")
        return 0
    if a.url is None or a.job is None:
        print("job.py launch: --url and --job are required (or --warmup-only)", file=sys.stderr)
        return 2
    cfg = dict(DEFAULTS)
    for k in DEFAULTS:
        v = getattr(a, k, None)
        if v is not None:
            cfg[k] = v
    os.makedirs(a.dir, exist_ok=True)
    cfg.update(url=a.url, job=a.job, dir=os.path.abspath(a.dir), name=a.name or cfg["task"],
               cache=a.cache, state_sock=a.state_sock)
    if a.state_sock and a.residency is None:
        cfg["residency"] = "loom-state"
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("LOOM_T0", str(time.monotonic()))
    procs = {"trainer": spawn("trainer", a.dir, env), "rollout": spawn("rollout", a.dir, env)}
    restarts = {"rollout": 0, "trainer": 0}

    def note_pids():
        with open(os.path.join(a.dir, "pids"), "w") as f:
            f.write(" ".join(str(procs[r].pid if procs[r] else 0)
                             for r in ("trainer", "rollout")) + "\n")

    note_pids()
    rc = 0
    # A process killed by a signal (kill -9, the OOM killer) is started again, up to
    # max_restarts times per role; it attaches taking over its own phase's lease and resumes
    # at loomd's count (the trainer from its checkpoint). Any other exit is final.
    while any(procs.values()):
        for role in ("rollout", "trainer"):
            p = procs[role]
            if not p or p.poll() is None:
                continue
            if p.returncode < 0 and restarts[role] < cfg["max_restarts"] and not rc:
                restarts[role] += 1
                who = "worker" if role == "rollout" else "process"
                say(cfg, f"{role:<8} {who} killed by signal {-p.returncode}; restart "
                         f"{restarts[role]} of {cfg['max_restarts']}")
                procs[role] = spawn(role, a.dir, env, restart=restarts[role])
                note_pids()
                continue
            if p.returncode:
                say(cfg, f"{role:<8} exited with status {p.returncode}")
            rc = rc or p.returncode
            procs[role] = None
            other = procs["rollout" if role == "trainer" else "trainer"]
            if rc and role == "trainer" and other:
                other.kill()
        time.sleep(0.05)
    res = summarize(cfg, a.dir, restarts)
    if res["steps"] != cfg["steps"]:
        state = loom.Job.attach(cfg["url"], cfg["job"]).info()["state"]
        say(cfg, f"job      ended {state} after {res['steps']} of {cfg['steps']} steps")
    return 0 if rc == 0 and res["steps"] == cfg["steps"] else 1


def main(argv):
    p = argparse.ArgumentParser(prog="job.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    la = sub.add_parser("launch", help="run one job's rollout worker and trainer under loomd")
    la.add_argument("--url", help="loomd, e.g. http://127.0.0.1:7480")
    la.add_argument("--job", type=int, help="the job's id in loomd (submitted)")
    la.add_argument("--warmup-only", action="store_true",
                    help="only run (or find cached) the supervised warm-up, then exit")
    la.add_argument("--dir", required=True, help="the job's working directory")
    la.add_argument("--name", help="name in the timeline (default: the task)")
    la.add_argument("--cache", help="directory for warm-up checkpoints (default: --dir)")
    la.add_argument("--state-sock", help="the node's loom-state socket: the trainer's "
                    "checkpoint (fp32 weights, Adam state) goes there at the end of every train "
                    "permit (--residency loom-state; file: the job's directory; keep: the Adam "
                    "state stays in the process, the checkpoint goes to the directory)")
    for k, v in DEFAULTS.items():
        la.add_argument("--" + k.replace("_", "-"), dest=k, type=type(v),
                        help=f"default {v}")
    for role in ("rollout", "trainer"):
        sub.add_parser(role, help=f"the {role} process (started by launch)").add_argument("dir")
    a = p.parse_args(argv)
    if a.cmd == "launch":
        if a.task is not None and a.task not in ("add", "sort", "reverse", "rotate"):
            p.error(f"--task: add, sort, reverse or rotate, not {a.task!r}")
        if a.size is not None and a.size not in ("s", "m", "l", "xl", "100m", "350m"):
            p.error(f"--size: s, m, l, xl, 100m or 350m (grpo.SIZES), not {a.size!r}")
        if a.steps is not None and not 1 <= a.steps <= 10000:
            p.error("--steps: 1 to 10000")
        if a.group is not None and a.group < 2:
            p.error("--group: at least 2")
        if a.residency not in (None, "loom-state", "file", "keep"):
            p.error(f"--residency: loom-state, file or keep, not {a.residency!r}")
        if a.device is not None and a.device not in ("cpu", "cuda", "auto"):
            p.error(f"--device: cpu, cuda or auto, not {a.device!r}")
        if a.gpu_sync is not None and a.gpu_sync not in ("on", "off"):
            p.error(f"--gpu-sync: on or off, not {a.gpu_sync!r}")
        if a.residency == "loom-state" and not a.state_sock:
            p.error("--residency loom-state needs --state-sock")
        return launch(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    (rollout_main if a.cmd == "rollout" else trainer_main)(a.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
