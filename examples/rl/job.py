"""A GRPO job under loomd, split the way RL teams split theirs: a rollout worker process
(sampling, on the rollout pool: CPU 0) and a trainer process (log-probs, GRPO loss, optimizer
step, on the training pool: CPU 1). Every phase runs under a loomd run permit through the
Python package; the trainer publishes each new version of the weights through loom's sync
engine and the rollout worker pulls it before its next rollout.

    job.py launch --warmup-only --task reverse --size m --dir DIR --cache CACHE
    job.py launch --url URL --job ID --task reverse --size m --steps 20 --dir DIR --cache CACHE
    job.py rollout DIR      (started by launch, pinned to CPU 0; restarted if it dies)
    job.py trainer DIR      (started by launch, pinned to CPU 1)

Rollouts reach the trainer as files in DIR (batch-<it>.pt, written atomically); weights go
through loom (job.publish / job.pull). Each process appends what it did to DIR/<role>.jsonl;
launch folds those into DIR/result.json.

The supervised warm-up is the job's initialisation: run it (--warmup-only) before submitting
the job, since loomd's first permit expires if nobody claims it within one lease timeout. It
is deterministic and cached in CACHE by its inputs, so a rerun of the job (alone, say) starts
from the same bits without redoing it.
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
    "residency": "file", "max_restarts": 2, "lease_wait_s": 60.0,
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


def note_published(d, version):
    """The trainer's last published version, for the rollout worker's cheap wait (a file, so
    that a waiting worker does not poll loomd while the other jobs run)."""
    tmp = os.path.join(d, f"published.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(f"{version}\n")
    os.replace(tmp, os.path.join(d, "published"))


def wait_published(d, version, poll_s=0.02, timeout_s=600):
    path, end = os.path.join(d, "published"), time.monotonic() + timeout_s
    while True:
        try:
            with open(path) as f:
                if int(f.read() or -1) >= version:
                    return
        except (OSError, ValueError):
            pass
        if time.monotonic() > end:
            raise TimeoutError(f"version {version} was not published")
        time.sleep(poll_s)


# ---- optimizer residency: the hook for loom-state -------------------------------------------

class OptimizerResidency:
    """Where the trainer's optimizer state lives between its train permits, so that jobs that
    share the training pool do not hold each other's state while they wait.

    offload(lease) runs when a train permit ends, load(lease) when the next one is granted
    (the phase decorator's offload / warm_start). Modes:

    - "loom-state": the Adam moments go to the node's loom-state daemon (host tier) under the
      job's key and a version that grows with every offload (the previous one is dropped);
      the process keeps only the step counters. load() asks for them back into fresh tensors.
    - "file": the state is saved to the job's directory and dropped from memory.
    - "keep": it stays in the process.

    Every mode restores the state exactly, so the job computes the same bits in all three."""

    def __init__(self, opt, path, mode, key=None, sock=None):
        if mode not in ("loom-state", "file", "keep"):
            raise ValueError(f"residency: 'loom-state', 'file' or 'keep', not {mode!r}")
        self.opt, self.path, self.mode, self.key = opt, path, mode, key
        self.st = loom.state.Client(sock) if mode == "loom-state" else None
        self.version, self.meta = 0, None
        self.bytes, self.found, self.seconds = 0, None, 0.0

    def _params(self):
        return [p for g in self.opt.param_groups for p in g["params"]]

    def load(self, lease):
        import torch
        t = time.monotonic()
        if self.mode == "file" and os.path.exists(self.path):
            self.opt.load_state_dict(torch.load(self.path))
            self.found = "file"
        elif self.mode == "loom-state" and self.meta:
            bufs, params = {}, self._params()
            for i, (step, shape) in self.meta.items():
                ea, eas = torch.empty(shape), torch.empty(shape)
                bufs[f"{i}.exp_avg"], bufs[f"{i}.exp_avg_sq"] = ea, eas
                self.opt.state[params[i]] = {"step": step, "exp_avg": ea, "exp_avg_sq": eas}
            self.found = self.st.load(bufs, job=self.key, version=self.version).found
        self.seconds = time.monotonic() - t

    def offload(self, lease):
        if self.mode == "keep":
            return
        state = {i: self.opt.state[p] for i, p in enumerate(self._params())
                 if p in self.opt.state}
        self.bytes = sum(v.numel() * v.element_size() for s in state.values()
                         for k, v in s.items() if k != "step")
        if self.mode == "file":
            atomic_save(self.opt.state_dict(), self.path)
        else:
            tensors = {f"{i}.{k}": v for i, s in state.items() for k, v in s.items()
                       if k != "step"}
            self.meta = {i: (s["step"], tuple(s["exp_avg"].shape)) for i, s in state.items()}
            self.version += 1
            self.st.offload(tensors, job=self.key, version=self.version)
            if self.version > 1:
                self.st.drop(self.key, version=self.version - 1)
        self.opt.state.clear()


# ---- the trainer ----------------------------------------------------------------------------

def warm_policy(cfg, G):
    """The policy after the supervised warm-up. The warm-up is deterministic, so it is cached
    by its inputs: a solo run of the same job starts from the very same bits."""
    model = G.make_policy(cfg["size"], cfg["seed"])
    key = hashlib.sha256(json.dumps([cfg[k] for k in ("task", "size", "seed", "warmup_steps")])
                         .encode()).hexdigest()[:16]
    cache = os.path.join(cfg.get("cache") or cfg["dir"], f"warm-{key}.pt")
    import torch
    if os.path.exists(cache):
        model.load_state_dict(torch.load(cache))
        return model, True
    G.warmup(model, G.TASKS[cfg["task"]], cfg["warmup_steps"], cfg["seed"])
    atomic_save(model.state_dict(), cache)
    return model, False


def trainer_main(d):
    cfg = load_cfg(d)
    pin(CPU_TRAIN)
    import torch
    import grpo as G
    G.setup_torch()
    job = loom.Job.attach(cfg["url"], cfg["job"])
    task = G.TASKS[cfg["task"]]
    t = time.monotonic()
    model, cached = warm_policy(cfg, G)
    say(cfg, f"trainer  warm-up {'from cache' if cached else 'done'} in "
             f"{time.monotonic() - t:.1f} s, {G.n_params(model)} parameters")
    ref = copy.deepcopy(model).eval()
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    res = OptimizerResidency(opt, os.path.join(d, "optimizer.pt"), cfg["residency"],
                             key=f"{cfg['name']}-{cfg['job']}", sock=cfg.get("state_sock"))
    params = list(model.parameters())
    out = os.path.join(d, "trainer.jsonl")
    ep = os.path.join(d, "weights.endpoint")
    st = job.publish(params, 0, endpoint_file=ep, bucket_elems=cfg["bucket_elems"])
    log(out, {"event": "publish", "version": 0, "t": time.monotonic(), **st})
    note_published(d, 0)

    @job.phase("train", warm_start=res.load, offload=res.offload)
    def train(it, batch):
        t_start = time.monotonic()
        say(cfg, f"train    it {it:3d}  permit on nodes {list(job.lease.nodes)}")
        rec = {"event": "step", "it": it, "t_start": t_start}
        if it == 0:
            rec["heldout_start"] = G.evaluate(model, task, cfg["seed"], cfg["eval_prompts"])
        loss, kl = G.grpo_loss(model, ref, batch, cfg["beta"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it == cfg["steps"] - 1:
            rec["heldout_end"] = G.evaluate(model, task, cfg["seed"], cfg["eval_prompts"])
        st = job.publish(params, it + 1)
        rec.update(loss=float(loss), kl=kl, reward=float(batch["rewards"].mean()),
                   version=it + 1, density=st["density"], changed=st["changed"],
                   delta_bytes=st["delta_bytes"], dense_bytes=st["dense_bytes"],
                   digest=st["digest"], t_end=time.monotonic(), lease=job.lease.id)
        return rec

    while True:
        it = job.info()["iterations_done"]
        if it >= cfg["steps"]:
            break
        wait_file(batch_path(d, it))
        if wait_turn(job, "train") is None:
            break
        batch = torch.load(batch_path(d, it))
        if batch["version"] != it:
            raise RuntimeError(f"rollout {it} used weights version {batch['version']}")
        try:
            rec = train(it, batch)
        except loom.Restarted as r:  # the job was re-admitted while we waited: redo rollout
            say(cfg, f"trainer  job restarted by loomd; resuming at iteration "
                     f"{r.iterations_done}")
            continue
        rec.update(optimizer_offloaded_bytes=res.bytes, optimizer_found=res.found,
                   optimizer_load_s=res.seconds)
        log(out, rec)
        note_published(d, it + 1)
        say(cfg, f"train    it {it:3d}  done {rec['t_end'] - rec['t_start']:.2f} s, reward "
                 f"{rec['reward']:.3f}, delta {rec['density']:.1%} dense, "
                 f"{rec['delta_bytes']} of {rec['dense_bytes']} B")
    job._pub.close()


# ---- the rollout worker ---------------------------------------------------------------------

def rollout_main(d):
    cfg = load_cfg(d)
    pin(CPU_ROLLOUT)
    import torch
    import grpo as G
    from loom import weights
    G.setup_torch()
    # A restarted worker (its predecessor died) takes over the rollout lease the dead one held,
    # if any: loomd fails it at once and restarts the job from its last counted iteration,
    # instead of waiting for the lease to time out. It never touches the trainer's lease.
    restarted = int(os.environ.get("LOOM_ROLLOUT_RESTART", "0"))
    job = loom.Job.attach(cfg["url"], cfg["job"], takeover="rollout" if restarted else False)
    if restarted:
        say(cfg, f"rollout  restarted worker attached: iterations done {job.iterations_done}, "
                 f"lease taken over: {'yes' if job.took_over else 'no'}, "
                 f"job restarts {job.restarts}")
    task = G.TASKS[cfg["task"]]
    model = G.make_policy(cfg["size"], cfg["seed"] + 1)  # overwritten by the first pull
    params = list(model.parameters())
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
        used = weights.digest(weights.bf16_bits(params))
        g, rng = G.gen(cfg["seed"], "rollout", it)
        prompts = [p for p in task.draw(rng, cfg["prompts"]) for _ in range(cfg["group"])]
        toks, logp, mask = G.sample(model, prompts, task.max_new, g)
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
    while True:
        wait_published(d, min(it, cfg["steps"] - 1))
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
    env = dict(env, LOOM_ROLLOUT_RESTART=str(restart))
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), role, d], env=env)


def summarize(cfg, d, restarts):
    def read(name):
        p = os.path.join(d, name)
        return [json.loads(x) for x in open(p)] if os.path.exists(p) else []
    tr, ro = read("trainer.jsonl"), read("rollout.jsonl")
    steps = [r for r in tr if r["event"] == "step"]
    done = [r for r in ro if r["event"] == "done"]
    pubs = {r["version"]: r["digest"] for r in tr if "digest" in r}
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
        G.setup_torch()
        cfg = dict(DEFAULTS)
        cfg.update({k: getattr(a, k) for k in DEFAULTS if getattr(a, k, None) is not None})
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
    trainer, roll = spawn("trainer", a.dir, env), spawn("rollout", a.dir, env)
    with open(os.path.join(a.dir, "pids"), "w") as f:
        f.write(f"{trainer.pid} {roll.pid}\n")
    restarts, rc = 0, 0
    while True:
        if roll and roll.poll() is not None:
            if roll.returncode < 0 and restarts < cfg["max_restarts"]:
                restarts += 1
                say(cfg, f"rollout  worker killed by signal {-roll.returncode}; restart "
                         f"{restarts} of {cfg['max_restarts']}")
                roll = spawn("rollout", a.dir, env, restart=restarts)
                with open(os.path.join(a.dir, "pids"), "w") as f:
                    f.write(f"{trainer.pid} {roll.pid}\n")
            else:
                if roll.returncode:
                    say(cfg, f"rollout  worker exited with status {roll.returncode}")
                rc = rc or roll.returncode
                roll = None
        if trainer and trainer.poll() is not None:
            if trainer.returncode:
                say(cfg, f"trainer  exited with status {trainer.returncode}")
            rc = rc or trainer.returncode
            trainer = None
            if rc and roll:
                roll.kill()
        if not roll and not trainer:
            break
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
    la.add_argument("--state-sock", help="the node's loom-state socket: the trainer offloads "
                    "its optimizer state there between train permits (--residency loom-state)")
    for k, v in DEFAULTS.items():
        la.add_argument("--" + k.replace("_", "-"), dest=k, type=type(v),
                        help=f"default {v}")
    for role in ("rollout", "trainer"):
        sub.add_parser(role, help=f"the {role} process (started by launch)").add_argument("dir")
    a = p.parse_args(argv)
    if a.cmd == "launch":
        if a.task is not None and a.task not in ("add", "sort", "reverse", "rotate"):
            p.error(f"--task: add, sort, reverse or rotate, not {a.task!r}")
        if a.size is not None and a.size not in ("s", "m", "l"):
            p.error(f"--size: s, m or l, not {a.size!r}")
        if a.steps is not None and not 1 <= a.steps <= 10000:
            p.error("--steps: 1 to 10000")
        if a.group is not None and a.group < 2:
            p.error("--group: at least 2")
        if a.residency not in (None, "loom-state", "file", "keep"):
            p.error(f"--residency: loom-state, file or keep, not {a.residency!r}")
        if a.residency == "loom-state" and not a.state_sock:
            p.error("--residency loom-state needs --state-sock")
        return launch(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    (rollout_main if a.cmd == "rollout" else trainer_main)(a.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
