"""A small but real GRPO job (CPU by default; a CUDA device with --device cuda): tasks with a verifiable reward, a tiny transformer policy,
sampling with a KV cache, the GRPO loss with a KL penalty to a frozen reference, and the
supervised warm-up that gives the policy something to improve on.

Everything is a function of (config, seed, iteration): prompts, sampling noise and evaluation
draw from generators seeded by those, torch runs on one thread, so the same job computes the
same bits whether it runs alone or shares its CPUs with other jobs under loomd.
"""

import hashlib
import math

import numpy as np
import torch
import torch.nn.functional as F

# ---- vocabulary and tasks -------------------------------------------------------------------

CHARS = "0123456789+=SRT"
PAD, BOS, EOS = len(CHARS), len(CHARS) + 1, len(CHARS) + 2
VOCAB = len(CHARS) + 3
STOI = {c: i for i, c in enumerate(CHARS)}


def encode(s):
    return [STOI[c] for c in s]


def decode(toks):
    out = []
    for t in toks:
        if t == EOS:
            break
        out.append(CHARS[t] if t < len(CHARS) else "?")
    return "".join(out)


class Task:
    """A family of prompts (all of one length) with exactly one right answer each."""

    name = ""
    max_new = 0

    def sample(self, rng):
        raise NotImplementedError

    def answer(self, prompt):
        raise NotImplementedError

    def held_out(self, prompt):
        """One prompt in eight never appears in warm-up or RL batches: the evaluation set."""
        return hashlib.blake2b(prompt.encode(), digest_size=1).digest()[0] % 8 == 0

    def draw(self, rng, n, held_out=False):
        out = []
        while len(out) < n:
            p = self.sample(rng)
            if self.held_out(p) == held_out:
                out.append(p)
        return out


class Add(Task):
    """Addition of a two-digit and a one-digit number: "37+8=" -> "45"."""

    name, max_new = "add", 4

    def sample(self, rng):
        a, b = rng.integers(10, 100), rng.integers(0, 10)
        return f"{a:02d}+{b}="

    def answer(self, prompt):
        return str(int(prompt[0:2]) + int(prompt[3]))


class Sort(Task):
    """Sort six digits: "S314159=" -> "113459"."""

    name, max_new = "sort", 7

    def sample(self, rng):
        return "S" + "".join(str(d) for d in rng.integers(0, 10, size=6)) + "="

    def answer(self, prompt):
        return "".join(sorted(prompt[1:7]))


class Reverse(Task):
    """Reverse six digits: "R123456=" -> "654321"."""

    name, max_new = "reverse", 7

    def sample(self, rng):
        return "R" + "".join(str(d) for d in rng.integers(0, 10, size=6)) + "="

    def answer(self, prompt):
        return prompt[1:7][::-1]


class Rotate(Task):
    """Rotate six digits left by two: "T123456=" -> "345612"."""

    name, max_new = "rotate", 7

    def sample(self, rng):
        return "T" + "".join(str(d) for d in rng.integers(0, 10, size=6)) + "="

    def answer(self, prompt):
        return prompt[3:7] + prompt[1:3]


TASKS = {t.name: t for t in (Add(), Sort(), Reverse(), Rotate())}


def reward(task, prompt, completion_tokens):
    """Verifiable reward of a completion (decoded up to EOS) against the task's answer: the
    fraction of answer positions it gets right, and 0 unless its length is right; so an exact
    match scores 1.0 and a wrong-length answer 0."""
    got, want = decode(completion_tokens), task.answer(prompt)
    if len(got) != len(want):
        return 0.0
    return sum(a == b for a, b in zip(got, want)) / len(want)


# ---- the policy -----------------------------------------------------------------------------

SIZES = {  # d_model, layers, heads
    "s": (64, 2, 4),
    "m": (96, 2, 4),
    "l": (128, 2, 4),
    "xl": (256, 4, 8),  # about 3.2 M parameters: minutes per step-set on a laptop-class CPU
    # sizes for a GPU (random init is enough to measure): 85 M and 302 M parameters
    "100m": (768, 12, 12),
    "350m": (1024, 24, 16),
}
MAX_LEN = 16


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x, cache=None):
        B, T, D = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, h, D // h).transpose(1, 2) for t in (q, k, v))
        past = 0
        if cache is not None:
            if "k" in cache:
                past = cache["k"].shape[2]
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // h)
        S = k.shape[2]
        causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=past)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Policy(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        d, layers, heads = SIZES[size]
        self.tok = torch.nn.Embedding(VOCAB, d)
        self.pos = torch.nn.Embedding(MAX_LEN, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, VOCAB, bias=False)

    def forward(self, idx, caches=None, start=0):
        pos = torch.arange(start, start + idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)[None]
        for i, b in enumerate(self.blocks):
            x = b(x, None if caches is None else caches[i])
        return self.head(self.ln(x))


def make_policy(size, seed):
    torch.manual_seed(seed)
    return Policy(size)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def pick_device(name):
    """'cpu', 'cuda' or 'auto' (cuda when torch sees a CUDA device) -> a torch.device."""
    if name not in ("cpu", "cuda", "auto"):
        raise ValueError(f"device: cpu, cuda or auto, not {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda: torch sees no CUDA device (torch.cuda.is_available())")
    return torch.device(name)


def setup_torch(device="cpu"):
    torch.set_num_threads(1)
    if str(device).startswith("cuda"):
        # deterministic cuBLAS needs a fixed workspace (set before its first use)
        import os
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def gen(seed, *parts):
    """A torch generator and a numpy generator seeded by (seed, parts)."""
    h = hashlib.blake2b(repr((seed,) + parts).encode(), digest_size=8).digest()
    s = int.from_bytes(h, "little") & ((1 << 63) - 1)
    g = torch.Generator()
    g.manual_seed(s)
    return g, np.random.default_rng(s)


def device_of(model):
    return next(model.parameters()).device


def prompt_tensor(prompts, device=None):
    return torch.tensor([[BOS] + encode(p) for p in prompts], dtype=torch.long, device=device)


@torch.no_grad()
def sample(model, prompts, max_new, g, temperature=1.0):
    """Sample completions (with a KV cache). Returns (tokens [B, max_new], logp [B, max_new],
    mask [B, max_new]): the sampled tokens, their log-probabilities under model, and 1 up to
    and including the first EOS. The draw itself runs on the CPU generator g whatever the
    model's device, so the noise is the same on every device."""
    dev = device_of(model)
    x = prompt_tensor(prompts, dev)
    B = x.shape[0]
    caches = [{} for _ in model.blocks]
    logits = model(x, caches)[:, -1]
    toks, logps = [], []
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    mask = []
    pos = x.shape[1]
    for _ in range(max_new):
        lp = F.log_softmax(logits / temperature, dim=-1)
        t = torch.multinomial(lp.exp().cpu(), 1, generator=g).squeeze(1).to(dev)
        toks.append(t)
        logps.append(lp.gather(1, t[:, None]).squeeze(1))
        mask.append(~done)
        done = done | (t == EOS)
        logits = model(t[:, None], caches, start=pos)[:, -1]
        pos += 1
    return torch.stack(toks, 1), torch.stack(logps, 1), torch.stack(mask, 1).float()


def token_logp(model, prompts, toks):
    """Log-probabilities of completion tokens toks [B, n] after prompts, with gradients."""
    x = torch.cat([prompt_tensor(prompts, toks.device), toks], dim=1)
    logits = model(x[:, :-1])[:, -toks.shape[1]:]
    return F.log_softmax(logits, dim=-1).gather(2, toks[:, :, None]).squeeze(2)


# ---- warm-up, GRPO, evaluation --------------------------------------------------------------

def warmup(model, task, steps, seed, batch=64, lr=2e-3):
    """Supervised warm-up on (prompt, answer) pairs: the policy starts somewhere non-trivial."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for s in range(steps):
        _, rng = gen(seed, "warmup", s)
        prompts = task.draw(rng, batch)
        ans = [encode(task.answer(p)) + [EOS] for p in prompts]
        n = task.max_new
        toks = torch.tensor([a + [PAD] * (n - len(a)) for a in ans], dtype=torch.long,
                            device=device_of(model))
        mask = (toks != PAD).float()
        lp = token_logp(model, prompts, toks.clamp(max=VOCAB - 1))
        loss = -(lp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


def advantages(rewards, group):
    """GRPO: each completion's reward against its group's mean, scaled by the group's std."""
    r = rewards.view(-1, group)
    a = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)
    return a.reshape(-1)


def grpo_loss(model, ref, batch, beta, clip=0.2):
    """Clipped policy-gradient loss on the batch's tokens plus beta * KL(policy || ref) (the k3
    estimator), averaged over completion tokens."""
    prompts, toks, old, mask = batch["prompts"], batch["tokens"], batch["logp"], batch["mask"]
    adv = advantages(batch["rewards"], batch["group"])[:, None]
    lp = token_logp(model, prompts, toks)
    with torch.no_grad():
        ref_lp = token_logp(ref, prompts, toks)
    ratio = (lp - old).exp()
    pg = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    d = ref_lp - lp
    kl = d.exp() - d - 1
    n = mask.sum()
    loss = ((pg + beta * kl) * mask).sum() / n
    return loss, float((kl * mask).sum() / n)


@torch.no_grad()
def evaluate(model, task, seed, n=128):
    """Mean reward on n held-out prompts, sampled at temperature 1 with a fixed generator, and
    greedy exact-match accuracy on the same prompts."""
    g, rng = gen(seed, "eval")
    prompts = task.draw(rng, n, held_out=True)
    toks, _, _ = sample(model, prompts, task.max_new, g)
    sampled = float(np.mean([reward(task, p, t.tolist()) for p, t in zip(prompts, toks)]))
    toks, _, _ = sample(model, prompts, task.max_new, g, temperature=1e-4)
    greedy = float(np.mean([reward(task, p, t.tolist()) for p, t in zip(prompts, toks)]))
    return sampled, greedy
