"""The trainer's checkpoint at the end of a train permit (examples/rl/job.py TrainerState):
bytes and seconds per permit end for the policy sizes of examples/rl (s, m, l), to loom-state
and to a file, against what a permit end moved before checkpoints existed (the Adam moments
alone: one loom-state offload, or torch.save + rename without fsync), in the same process.

    /usr/bin/python3 bench/trainer_ckpt.py BUILD_DIR STATE_SOCK [ROUNDS]

Each figure is the best and the median of ROUNDS (20) permit cycles (load the moments, save);
the machine is shared, so the best is the cost and the median shows the noise.
"""

import collections
import os
import statistics
import sys
import tempfile
import time

src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(src, "python"))
sys.path.insert(0, os.path.join(src, "examples", "rl"))
build, sock = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
os.environ.setdefault("LOOM_STATE_LIB", os.path.join(build, "libloomstate.so"))

import copy  # noqa: E402

import torch  # noqa: E402

import grpo as G  # noqa: E402
import job as J  # noqa: E402
import loom  # noqa: E402

G.setup_torch()
Lease = collections.namedtuple("Lease", "iteration")


def stepped(size):
    """A policy and an Adam optimizer with state (one step on a teacher-forced batch)."""
    model = G.make_policy(size, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    G.warmup(model, G.TASKS["reverse"], 1, 1, batch=8)  # builds the graph once
    task = G.TASKS["reverse"]
    _, rng = G.gen(1, "bench")
    prompts = task.draw(rng, 8)
    toks = torch.tensor([G.encode(task.answer(p)) + [G.EOS] for p in prompts])
    loss = -G.token_logp(model, prompts, toks).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return model, opt


def ms(xs):
    return f"{min(xs) * 1e3:6.2f} ms best, {statistics.median(xs) * 1e3:6.2f} median"


def adam_only(opt, mode, d, st, key):
    """What a permit end moved before: the moments (no weights, no fsync)."""
    params = [p for g in opt.param_groups for p in g["params"]]
    times, nbytes = [], 0
    for v in range(1, rounds + 1):
        t = time.monotonic()
        if mode == "loom-state":
            tensors = {f"{i}.{k}": s[k] for i, p in enumerate(params)
                       for s in [opt.state[p]] for k in ("exp_avg", "exp_avg_sq")}
            nbytes = st.offload(tensors, job=key, version=v).bytes
            if v > 1:
                st.drop(key, version=v - 1)
        else:
            path = os.path.join(d, "optimizer.pt")
            J.atomic_save(opt.state_dict(), path)
            nbytes = os.path.getsize(path)
        times.append(time.monotonic() - t)
    if st:
        st.drop(key)
    return nbytes, times


def main():
    st = loom.state.Client(sock)
    print("trainer checkpoint per train-permit end (fp32 weights + Adam moments + RNG + "
          f"header), best and median of {rounds}")
    for size in ("s", "m", "l"):
        model, opt = stepped(size)
        n = G.n_params(model)
        for mode in ("loom-state", "file"):
            with tempfile.TemporaryDirectory(prefix="loom-ckpt-bench-") as d:
                key = f"bench-{size}-{mode}-{os.getpid()}"
                base_bytes, base_t = adam_only(opt, mode, d, st, key + "-adam")
                cfg = dict(J.DEFAULTS, size=size, residency=mode, state_sock=sock)
                ts = J.TrainerState(model, opt, copy.deepcopy(model), cfg, d, key=key)
                saves, loads = [], []
                ts.save(1, 1, "")
                for k in range(2, rounds + 2):
                    ts.load(Lease(k))
                    loads.append(ts.seconds)
                    ts.save(k, k, "")
                    saves.append(ts.save_s)
                    ts.prune(k)
                # a restarted trainer: a fresh process's state restored from the last one, then
                # its first grant; its weights must be the saved ones, bit for bit
                k = rounds + 1
                want = J.tensor_digest(model.parameters())
                fresh = G.make_policy(size, 2)
                fopt = torch.optim.Adam(fresh.parameters(), lr=1e-3)
                t = time.monotonic()
                again = J.TrainerState(fresh, fopt, copy.deepcopy(model), cfg, d, key=key)
                again.restore(k)
                again.load(Lease(k + 1))
                resume_s = time.monotonic() - t
                assert J.tensor_digest(fresh.parameters()) == want, "restore is not bit-exact"
                ts.load(Lease(rounds + 2))  # the moments back, for the next mode
                if mode == "loom-state":
                    st.drop(key)
                print(f"size {size} ({n:7d} params) {mode:<10}  checkpoint {ts.save_bytes:8d} B "
                      f"{ms(saves)}  |  Adam moments alone {base_bytes:8d} B {ms(base_t)}  |  "
                      f"moments back at grant {ms(loads)}  |  resume {resume_s * 1e3:.1f} ms")


main()
