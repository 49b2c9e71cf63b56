/*
 * model.c - the analytical cost model of HetRL's Appendix B for one execution plan.
 *
 * A plan puts each task of the workflow in a group of devices, gives it (dp, pp, tp) and an
 * order of its group's devices (the first dp*pp*tp are its tasklets). The model prices every
 * tasklet (compute, TP all-reduce rings, PP hops, DP gradient rings, pipeline bubbles, HBM-bound
 * decoding), folds them into the task costs Psi, and composes the tasks per algorithm and mode.
 * Memory (C3) follows Sheng et al.: model memory of every tasklet on a device plus the largest
 * working set there. docs/plan.md lists each choice where the appendix is silent or garbled.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

static const loom_plan_model models[] = {
    /* name, hidden, intermediate, layers, heads, kv heads, head dim (public configs) */
    {"qwen3-4b", 2560, 9728, 36, 32, 8, 128},
    {"qwen3-8b", 4096, 12288, 36, 32, 8, 128},
    {"qwen3-14b", 5120, 17408, 40, 40, 8, 128},
};

static const char *task_names[LOOM_PLAN_TASKS] = {
    "actor_generation", "reward_inference", "reference_inference",
    "critic_inference", "actor_training",   "critic_training",
};

const char *loom_plan_task_name(int task)
{
        return task >= 0 && task < LOOM_PLAN_TASKS ? task_names[task] : "?";
}

int loom_plan_model_lookup(const char *name, loom_plan_model *out)
{
        for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
                if (!strcmp(name, models[i].name)) {
                        *out = models[i];
                        return 0;
                }
        return LOOM_ENOENT;
}

void loom_plan_workflow_default(loom_plan_workflow *w)
{
        memset(w, 0, sizeof *w);
        loom_plan_model_lookup("qwen3-8b", &w->model);
        w->seq_in = 1024;
        w->seq_out = 1024;
        w->batch = 384;
        w->responses = 8;
        w->mbs = 8;
        w->max_decode_batch = 256;
        w->eta = -1;
}

int loom_plan_workflow_check(const loom_plan_workflow *w, loom_err *e)
{
        const loom_plan_model *m = &w->model;
        if (m->h1 <= 0 || m->h2 <= 0 || m->layers <= 0 || m->heads <= 0 || m->kv_heads <= 0 ||
            m->head_dim <= 0)
                return loom_err_set(e, LOOM_EINVAL, "model", "model needs positive sizes");
        if (w->seq_in < 1 || w->seq_in > 1 << 20)
                return loom_err_set(e, LOOM_EINVAL, "seq_in", "must be in 1..1048576, got %d",
                                    w->seq_in);
        if (w->seq_out < 1 || w->seq_out > 1 << 20)
                return loom_err_set(e, LOOM_EINVAL, "seq_out", "must be in 1..1048576, got %d",
                                    w->seq_out);
        if (w->batch < 1 || w->batch > 1 << 20)
                return loom_err_set(e, LOOM_EINVAL, "batch", "must be in 1..1048576, got %d",
                                    w->batch);
        if (w->responses < 1 || w->responses > 1024)
                return loom_err_set(e, LOOM_EINVAL, "responses", "must be in 1..1024, got %d",
                                    w->responses);
        if (w->mbs < 1 || w->mbs > 4096)
                return loom_err_set(e, LOOM_EINVAL, "micro_batch", "must be in 1..4096, got %d",
                                    w->mbs);
        if (w->max_decode_batch < 1 || w->max_decode_batch > 1 << 16)
                return loom_err_set(e, LOOM_EINVAL, "max_decode_batch",
                                    "must be in 1..65536, got %d", w->max_decode_batch);
        if (w->eta > 1 || (w->eta < 0 && w->eta != -1))
                return loom_err_set(e, LOOM_EINVAL, "eta", "must be in [0, 1] (or auto), got %g",
                                    w->eta);
        return 0;
}

int loom_plan_workflow_tasks(const loom_plan_workflow *w, int tasks[LOOM_PLAN_TASKS])
{
        if (w->grpo) {
                tasks[0] = LOOM_PLAN_GEN;
                tasks[1] = LOOM_PLAN_REWARD;
                tasks[2] = LOOM_PLAN_REF;
                tasks[3] = LOOM_PLAN_ACTOR_TRAIN;
                return 4;
        }
        for (int t = 0; t < LOOM_PLAN_TASKS; t++)
                tasks[t] = t;
        return LOOM_PLAN_TASKS;
}

double loom_plan_layer_flops(const loom_plan_model *m, double s)
{
        double h1 = m->h1, h2 = m->h2;
        double qkvo = 2.0 * 4.0 * s * h1 * h1;
        double attn = 2.0 * 2.0 * s * s * h1;
        double mlp = 2.0 * 3.0 * s * h1 * h2;
        return qkvo + attn + mlp;
}

double loom_plan_weight_bytes(const loom_plan_model *m, int layers)
{
        double h1 = m->h1, h2 = m->h2;
        return LOOM_PLAN_BF16 * layers * (4.0 * h1 * h1 + 3.0 * h1 * h2);
}

double loom_plan_phi(const double *c, int n, double eta)
{
        double mx = 0, sum = 0;
        for (int i = 0; i < n; i++) {
                sum += c[i];
                if (c[i] > mx)
                        mx = c[i];
        }
        return mx + (1.0 - eta) * (sum - mx);
}

/* ---- evaluation ---- */

static bool is_train(int t)
{
        return t == LOOM_PLAN_ACTOR_TRAIN || t == LOOM_PLAN_CRITIC_TRAIN;
}

/* Per-evaluation scratch: memory per device. */
typedef struct scratch {
        double model[LOOM_PLAN_MAX_DEV];
        double work[LOOM_PLAN_MAX_DEV];
        bool uneven[LOOM_PLAN_TASKS];              /* nl[t] is the task's layer split */
        int nl[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_PP]; /* layers per stage (balanced) */
} scratch;

typedef struct shape {
        double samples_i; /* samples per replica */
        double nm, mbs;
        int nl_j;
        double seq; /* sequence length priced for compute and activations */
} shape;

static void task_shape(const loom_plan_workflow *w, int t, const loom_plan_strategy *st, shape *sh)
{
        double samples = (double)w->batch * w->responses;
        sh->samples_i = ceil(samples / st->dp);
        sh->mbs = w->mbs < sh->samples_i ? w->mbs : sh->samples_i;
        sh->nm = ceil(sh->samples_i / sh->mbs);
        sh->nl_j = w->model.layers / st->pp;
        /* Appendix B: seq_out is 0 when pricing the generation task's compute (the prompt's
         * prefill); decoding is the HBM term. */
        sh->seq = t == LOOM_PLAN_GEN ? w->seq_in : w->seq_in + w->seq_out;
}

/* Model memory of one tasklet (bytes): bf16 weights of its shard; training keeps bf16 weights
 * and gradients plus fp32 master weights and two Adam moments (16 bytes per parameter). */
static double tasklet_model_mem(const loom_plan_workflow *w, int t, const loom_plan_strategy *st,
                                const shape *sh)
{
        double wb = loom_plan_weight_bytes(&w->model, sh->nl_j) / st->tp;
        return is_train(t) ? 8.0 * wb : wb;
}

/* Working set of one non-generation tasklet: activations with recomputation (one layer input
 * per layer and micro-batch in flight, plus one layer's full activations, 34 s b h / tp). */
static double tasklet_work_mem(const loom_plan_workflow *w, int t, const loom_plan_strategy *st,
                               const shape *sh)
{
        double sbh = sh->mbs * sh->seq * w->model.h1;
        if (!is_train(t))
                return 34.0 * sbh / st->tp;
        double inflight = st->pp < sh->nm ? st->pp : sh->nm;
        return sbh * (LOOM_PLAN_BF16 * sh->nl_j * inflight + 34.0 / st->tp);
}

/* KV cache of one sequence on one generation tasklet (bytes). */
static double kv_seq_bytes(const loom_plan_workflow *w, const loom_plan_strategy *st,
                           const shape *sh)
{
        const loom_plan_model *m = &w->model;
        double kv_heads = m->kv_heads >= st->tp ? (double)m->kv_heads / st->tp : 1.0;
        return 2.0 * LOOM_PLAN_BF16 * sh->nl_j * kv_heads * m->head_dim *
               (double)(w->seq_in + w->seq_out);
}

bool plan_strategy_ok(const loom_plan_workflow *w, const loom_plan_strategy *st, int group_n)
{
        const loom_plan_model *m = &w->model;
        if (st->dp < 1 || st->pp < 1 || st->tp < 1)
                return false;
        if ((long)st->dp * st->pp * st->tp > group_n)
                return false;
        if (m->heads % st->tp || m->kv_heads % st->tp || m->layers % st->pp)
                return false;
        return st->dp <= w->batch * w->responses;
}

typedef struct task_detail {
        double total, comp, tp, pp, dp, bubble, hbm;
        bool balanced; /* the load-balanced execution priced lower than the uniform one */
        bool uneven;   /* ... with the uneven layer split */
} task_detail;

/* Layers per stage of task t under HetRL's layer-level balancing: stage j's speed is the
 * slowest TFLOPS of its shards over all replicas (replicas must share one partition, or their
 * gradients would not line up), and layers go one at a time to the stage whose time after the
 * addition is least (min-max of a separable increasing function: the greedy is optimal).
 * Returns false (nl untouched) when the uniform split is as good or there is one stage. */
static bool layer_split(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                        int t, int *nl)
{
        const loom_plan_strategy *st = &p->st[t];
        int L = w->model.layers;
        if (st->pp < 2 || st->pp > LOOM_PLAN_MAX_PP || L < st->pp)
                return false;
        double f[LOOM_PLAN_MAX_PP], fmin = INFINITY;
        for (int j = 0; j < st->pp; j++) {
                f[j] = INFINITY;
                for (int i = 0; i < st->dp; i++)
                        for (int k = 0; k < st->tp; k++) {
                                int d = p->order[t][(i * st->pp + j) * st->tp + k];
                                double x = c->types[c->dev[d].type].tflops;
                                if (x < f[j])
                                        f[j] = x;
                        }
                if (f[j] < fmin)
                        fmin = f[j];
        }
        for (int j = 0; j < st->pp; j++)
                nl[j] = 1;
        for (int left = L - st->pp; left > 0; left--) {
                int b = 0;
                for (int j = 1; j < st->pp; j++)
                        if ((nl[j] + 1) / f[j] < (nl[b] + 1) / f[b])
                                b = j;
                nl[b]++;
        }
        double mx = 0;
        for (int j = 0; j < st->pp; j++)
                if (nl[j] / f[j] > mx)
                        mx = nl[j] / f[j];
        return mx < (double)(L / st->pp) / fmin * (1 - 1e-9);
}

/* Samples replica i can take within time T under f(s) = a s + k max(1, s / cap) + b (k: the
 * memory-bound decoding of a batch that fits at once; b: the pipeline bubble). */
static double samples_within(double T, double a, double k, double cap, double b)
{
        if (T <= b + k)
                return 0;
        double s = (T - b - k) / a;
        if (k > 0 && s > cap)
                s = (T - b) / (a + k / cap);
        return s;
}

/* Data-level balancing: the least T at which the replicas, each given the samples it finishes
 * within T, cover the whole batch (bisection; the fractional split is the planner's average,
 * off by at most one sample per replica). hi is the uniform split's time. */
static double balance_samples(const double *a, const double *k, const double *cap, const double *b,
                              int n, double samples, double hi)
{
        double lo = 0;
        for (int it = 0; it < 48; it++) {
                double mid = 0.5 * (lo + hi), got = 0;
                for (int i = 0; i < n; i++)
                        got += samples_within(mid, a[i], k[i], cap[i], b[i]);
                if (got >= samples)
                        hi = mid;
                else
                        lo = mid;
        }
        return hi;
}

/* Price one task with layers nl[j] on stage j (NULL: layers / pp each): Psi^gen, Psi^inf or
 * Psi^train over its tasklets, and with w->balance the data-level balanced split too. */
static void task_cost_split(const loom_plan_cluster *c, const loom_plan_workflow *w,
                            const loom_plan *p, int t, const scratch *sc, const int *nl,
                            task_detail *out)
{
        const loom_plan_strategy *st = &p->st[t];
        const int *ord = p->order[t];
        shape sh;
        task_shape(w, t, st, &sh);
        const loom_plan_model *m = &w->model;
        bool train = is_train(t), gen = t == LOOM_PLAN_GEN;
        double fwd = loom_plan_layer_flops(m, sh.seq);
        double comp_mult = train ? 3.0 : 1.0;
        double tp_mult = train ? 6.0 : 2.0; /* training recomputes: fwd, bwd and recompute */
        double pp_mult = train ? 2.0 : 1.0;
        double cv_tp = LOOM_PLAN_BF16 * sh.mbs * sh.seq * m->h1 * 2.0 * (st->tp - 1) / st->tp;
        double cv_pp = LOOM_PLAN_BF16 * sh.mbs * sh.seq * m->h1;
        /* Batch sizes follow speed only for rollout: the other tasks keep equal sample counts
         * per replica and balance by handing longer sequences to faster GPUs, which gains
         * nothing here, where every sequence is priced at its limit. */
        bool bal = w->balance && gen && st->dp > 1 && st->dp <= LOOM_PLAN_MAX_DEV;
        double la[LOOM_PLAN_MAX_DEV], lk[LOOM_PLAN_MAX_DEV], lcap[LOOM_PLAN_MAX_DEV],
            lb[LOOM_PLAN_MAX_DEV];
        bool uneven_rates = false;
        memset(out, 0, sizeof *out);
        double psi = 0;
        for (int i = 0; i < st->dp; i++) {
                double stage_max = 0, bubble = 0, hbm_i = 0, k_i = 0, cap_i = 1;
                double comp_max = 0, tp_max = 0, pp_max = 0;
                for (int j = 0; j < st->pp; j++) {
                        const int *sl = ord + (i * st->pp + j) * st->tp;
                        int nlj = nl ? nl[j] : sh.nl_j;
                        shape shj = sh;
                        shj.nl_j = nlj;
                        double w_stage = loom_plan_weight_bytes(m, nlj);
                        double kv = gen ? kv_seq_bytes(w, st, &shj) : 0;
                        double minflops = INFINITY, hbm_j = 0;
                        for (int k = 0; k < st->tp; k++) {
                                int d = sl[k];
                                const loom_plan_gpu *g = &c->types[c->dev[d].type];
                                double f = g->tflops * 1e12;
                                if (f < minflops)
                                        minflops = f;
                                if (gen) {
                                        double freeb = g->hbm_gb * 1e9 - sc->model[d];
                                        double cap = floor(freeb / kv);
                                        if (cap > w->max_decode_batch)
                                                cap = w->max_decode_batch;
                                        if (cap < 1)
                                                cap = 1;
                                        double dbs = cap > sh.samples_i ? sh.samples_i : cap;
                                        double unit =
                                            w->seq_out * w_stage / (g->hbm_gbps * 1e9 * st->tp);
                                        double h = unit * sh.nm * sh.mbs / dbs;
                                        if (h > hbm_j) {
                                                hbm_j = h;
                                                if (h > hbm_i) {
                                                        k_i = unit;
                                                        cap_i = cap;
                                                }
                                        }
                                }
                        }
                        double comp = comp_mult * sh.nm * sh.mbs * nlj * fwd / (minflops * st->tp);
                        double tpc = 0;
                        if (st->tp > 1)
                                tpc = tp_mult * sh.nm * nlj * loom_plan_ring(c, sl, st->tp, cv_tp);
                        double ppc = 0;
                        if (j + 1 < st->pp) {
                                const int *nx = sl + st->tp;
                                double best = INFINITY;
                                for (int a = 0; a < st->tp; a++)
                                        for (int b = 0; b < st->tp; b++) {
                                                double lat, bw;
                                                loom_plan_link(c, sl[a], nx[b], &lat, &bw);
                                                double x = lat + cv_pp / bw;
                                                if (x < best)
                                                        best = x;
                                        }
                                ppc = pp_mult * sh.nm * best;
                        }
                        double s = comp + tpc + ppc;
                        if (s > stage_max)
                                stage_max = s;
                        if (j > 0)
                                bubble += s / sh.nm;
                        if (hbm_j > hbm_i)
                                hbm_i = hbm_j;
                        if (comp > comp_max)
                                comp_max = comp;
                        if (tpc > tp_max)
                                tp_max = tpc;
                        if (ppc > pp_max)
                                pp_max = ppc;
                }
                double r = stage_max;
                if (train)
                        r += bubble;
                if (gen)
                        r += hbm_i;
                if (r > psi)
                        psi = r;
                if (bal) {
                        la[i] = stage_max / (sh.nm * sh.mbs);
                        lk[i] = gen ? k_i : 0;
                        lcap[i] = cap_i;
                        lb[i] = train ? bubble : 0;
                        if (i > 0 && (la[i] != la[0] || lk[i] != lk[0] || lcap[i] != lcap[0]))
                                uneven_rates = true;
                }
                if (comp_max > out->comp)
                        out->comp = comp_max;
                if (tp_max > out->tp)
                        out->tp = tp_max;
                if (pp_max > out->pp)
                        out->pp = pp_max;
                if (train && bubble > out->bubble)
                        out->bubble = bubble;
                if (hbm_i > out->hbm)
                        out->hbm = hbm_i;
        }
        if (bal && uneven_rates) {
                double v =
                    balance_samples(la, lk, lcap, lb, st->dp, (double)w->batch * w->responses, psi);
                if (v < psi) {
                        psi = v;
                        out->balanced = true;
                }
        }
        if (train && st->dp > 1) {
                int ring[LOOM_PLAN_MAX_DEV];
                for (int j = 0; j < st->pp; j++) {
                        int nlj = nl ? nl[j] : sh.nl_j;
                        double cv_dp = LOOM_PLAN_BF16 * nlj *
                                       (4.0 * m->h1 * (double)m->h1 + 3.0 * m->h1 * (double)m->h2) *
                                       2.0 * (st->dp - 1) / ((double)st->dp * st->tp);
                        for (int k = 0; k < st->tp; k++) {
                                for (int i = 0; i < st->dp; i++)
                                        ring[i] = ord[(i * st->pp + j) * st->tp + k];
                                double x = loom_plan_ring(c, ring, st->dp, cv_dp);
                                if (x > out->dp)
                                        out->dp = x;
                        }
                }
                psi += out->dp;
        }
        out->total = psi;
}

/* Price one task: uniform layers, and with w->balance also the layer split sc->nl[t] when the
 * memory pass kept it; the cheaper of the two is what a balancing launcher would run. */
static void task_cost(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                      int t, const scratch *sc, task_detail *out)
{
        task_cost_split(c, w, p, t, sc, NULL, out);
        if (!w->balance || !sc->uneven[t])
                return;
        task_detail u;
        task_cost_split(c, w, p, t, sc, sc->nl[t], &u);
        if (u.total < out->total) {
                *out = u;
                out->balanced = out->uneven = true;
        }
}

/* All-gather over each replica of a task: max (reshard) or min (sync) over replicas. */
static double replica_gather(const loom_plan_cluster *c, const loom_plan_workflow *w,
                             const loom_plan *p, int t, bool want_max)
{
        const loom_plan_strategy *st = &p->st[t];
        int n = st->pp * st->tp;
        if (n <= 1)
                return 0;
        double v = loom_plan_weight_bytes(&w->model, w->model.layers) * (n - 1) / n;
        double best = want_max ? 0 : INFINITY;
        for (int i = 0; i < st->dp; i++) {
                double x = loom_plan_ring(c, p->order[t] + i * n, n, v);
                if (want_max ? x > best : x < best)
                        best = x;
        }
        return best;
}

/* min over (actor-training GPU, generation GPU) pairs of alpha + W/beta. Links depend only on
 * the level, so the minimum is taken per level instead of over all pairs: a GPU in both sets
 * (0), a machine holding GPUs of both (intra link, the better of each side's fastest), a region
 * holding both on different machines (its link), or the best region pair. */
static double p2p_cost(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p)
{
        const loom_plan_strategy *a = &p->st[LOOM_PLAN_ACTOR_TRAIN], *g = &p->st[LOOM_PLAN_GEN];
        int na = a->dp * a->pp * a->tp, ng = g->dp * g->pp * g->tp;
        const int *da = p->order[LOOM_PLAN_ACTOR_TRAIN], *dg = p->order[LOOM_PLAN_GEN];
        double v = loom_plan_weight_bytes(&w->model, w->model.layers);
        double mbw_a[LOOM_PLAN_MAX_MACHINES], mbw_g[LOOM_PLAN_MAX_MACHINES];
        unsigned char dev_a[LOOM_PLAN_MAX_DEV];
        int ra[LOOM_PLAN_MAX_REGIONS] = {0}, rg[LOOM_PLAN_MAX_REGIONS] = {0};
        int rma[LOOM_PLAN_MAX_REGIONS], rmg[LOOM_PLAN_MAX_REGIONS]; /* a machine, or -2: several */
        for (int i = 0; i < na; i++)
                mbw_a[c->dev[da[i]].machine] = 0;
        for (int i = 0; i < ng; i++) {
                dev_a[dg[i]] = 0;
                mbw_g[c->dev[dg[i]].machine] = 0;
                mbw_a[c->dev[dg[i]].machine] = 0;
        }
        for (int i = 0; i < na; i++) {
                const loom_plan_device *d = &c->dev[da[i]];
                double b = c->types[d->type].intra_gbps * 1e9;
                dev_a[da[i]] = 1;
                if (b > mbw_a[d->machine])
                        mbw_a[d->machine] = b;
                rma[d->region] = ra[d->region]++ == 0           ? d->machine
                                 : rma[d->region] == d->machine ? d->machine
                                                                : -2;
        }
        double best = INFINITY;
        for (int i = 0; i < ng; i++) {
                const loom_plan_device *d = &c->dev[dg[i]];
                double b = c->types[d->type].intra_gbps * 1e9;
                if (b > mbw_g[d->machine])
                        mbw_g[d->machine] = b;
                rmg[d->region] = rg[d->region]++ == 0           ? d->machine
                                 : rmg[d->region] == d->machine ? d->machine
                                                                : -2;
        }
        for (int i = 0; i < ng; i++) {
                const loom_plan_device *d = &c->dev[dg[i]];
                if (dev_a[dg[i]])
                        return 0;
                if (mbw_a[d->machine] > 0) {
                        double bw = mbw_a[d->machine] < mbw_g[d->machine] ? mbw_a[d->machine]
                                                                          : mbw_g[d->machine];
                        double e = c->intra_lat_s + v / bw;
                        if (e < best)
                                best = e;
                }
        }
        for (int r = 0; r < c->n_regions; r++) {
                if (!ra[r])
                        continue;
                for (int q = 0; q < c->n_regions; q++) {
                        if (!rg[q])
                                continue;
                        double e;
                        if (q == r) {
                                /* different machines unless both sides sit on one same machine */
                                if (rma[r] >= 0 && rma[r] == rmg[r])
                                        continue;
                                e = c->region_lat_s[r] + v / c->region_bw[r];
                        } else {
                                e = c->pair_lat_s[r][q] + v / c->pair_bw[r][q];
                        }
                        if (e < best)
                                best = e;
                }
        }
        return best;
}

/* Phi over a set of tasks: with eta < 0, tasks on one group run one after the other and
 * groups run side by side (max over groups of the sum); else the appendix's formula. */
static double phi_set(const loom_plan *p, const double *cost, const int *set, int n, double eta)
{
        double v[LOOM_PLAN_TASKS];
        for (int i = 0; i < n; i++)
                v[i] = cost[set[i]];
        if (eta >= 0)
                return loom_plan_phi(v, n, eta);
        double per[LOOM_PLAN_TASKS] = {0}, mx = 0;
        for (int i = 0; i < n; i++) {
                per[p->group[set[i]]] += v[i];
                if (per[p->group[set[i]]] > mx)
                        mx = per[p->group[set[i]]];
        }
        return mx;
}

/* Add (sign +1) or remove (-1) task t's model memory, and raise working sets, on its devices;
 * nl: layers per stage (NULL: uniform). */
static void mem_add(const loom_plan_workflow *w, const loom_plan *p, int t, const int *nl,
                    double sign, scratch *sc)
{
        const loom_plan_strategy *st = &p->st[t];
        shape sh;
        task_shape(w, t, st, &sh);
        int n = st->dp * st->pp * st->tp;
        for (int i = 0; i < n; i++) {
                shape shj = sh;
                if (nl)
                        shj.nl_j = nl[(i / st->tp) % st->pp];
                double mm = tasklet_model_mem(w, t, st, &shj);
                double wk = t == LOOM_PLAN_GEN ? kv_seq_bytes(w, st, &shj)
                                               : tasklet_work_mem(w, t, st, &shj);
                int d = p->order[t][i];
                sc->model[d] += sign * mm;
                if (sign > 0 && wk > sc->work[d])
                        sc->work[d] = wk;
        }
}

static double mem_over(const loom_plan_cluster *c, const loom_plan *p, const scratch *sc,
                       int *worst)
{
        double over = -INFINITY;
        *worst = -1;
        for (int g = 0; g < p->n_groups; g++)
                for (int i = 0; i < p->group_size[g]; i++) {
                        int d = p->group_dev[g][i];
                        double o =
                            sc->model[d] + sc->work[d] - c->types[c->dev[d].type].hbm_gb * 1e9;
                        if (o > over) {
                                over = o;
                                *worst = d;
                        }
                }
        return over;
}

/* The memory pass (C3) with every task's layers split evenly: whether a plan fits does not
 * depend on balancing, so the search space and the exact solver's memory checks are the same
 * with and without it. With w->balance, each task's uneven layer split (in task order) is then
 * kept only if everything still fits. Returns the worst overflow in bytes (<= 0: fits). */
static double memory_pass(const loom_plan_cluster *c, const loom_plan_workflow *w,
                          const loom_plan *p, const int *tasks, int nt, scratch *sc, int *worst,
                          scratch *uni, bool *has_uni)
{
        *has_uni = false;
        for (int g = 0; g < p->n_groups; g++)
                for (int i = 0; i < p->group_size[g]; i++) {
                        sc->model[p->group_dev[g][i]] = 0;
                        sc->work[p->group_dev[g][i]] = 0;
                }
        for (int x = 0; x < nt; x++) {
                sc->uneven[tasks[x]] = false;
                mem_add(w, p, tasks[x], NULL, 1, sc);
        }
        double over = mem_over(c, p, sc, worst);
        if (over > 0 || !w->balance)
                return over;
        for (int x = 0; x < nt; x++) {
                int t = tasks[x], wd;
                if (!layer_split(c, w, p, t, sc->nl[t]))
                        continue;
                scratch keep = *sc;
                if (!*has_uni)
                        *uni = keep;
                mem_add(w, p, t, NULL, -1, sc);
                mem_add(w, p, t, sc->nl[t], 1, sc);
                if (mem_over(c, p, sc, &wd) > 0) {
                        *sc = keep;
                        continue;
                }
                sc->uneven[t] = true;
                *has_uni = true;
        }
        return over;
}

static double compose(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                      const int *tasks, int nt, const scratch *sc, loom_plan_cost *out)
{
        task_detail td[LOOM_PLAN_TASKS];
        double cost[LOOM_PLAN_TASKS] = {0};
        for (int x = 0; x < nt; x++) {
                int t = tasks[x];
                task_cost(c, w, p, t, sc, &td[t]);
                cost[t] = td[t].total;
        }
        static const int inf_ppo[] = {LOOM_PLAN_REWARD, LOOM_PLAN_REF, LOOM_PLAN_CRITIC_INF};
        static const int train_ppo[] = {LOOM_PLAN_ACTOR_TRAIN, LOOM_PLAN_CRITIC_TRAIN};
        double rest;
        if (w->grpo) /* the appendix writes C^6 here; GRPO trains the actor, C^5 */
                rest = phi_set(p, cost, inf_ppo, 2, w->eta) + cost[LOOM_PLAN_ACTOR_TRAIN];
        else
                rest =
                    phi_set(p, cost, inf_ppo, 3, w->eta) + phi_set(p, cost, train_ppo, 2, w->eta);
        int gg = p->group[LOOM_PLAN_GEN];
        bool gen_alone = true;
        for (int x = 0; x < nt; x++)
                if (tasks[x] != LOOM_PLAN_GEN && p->group[tasks[x]] == gg)
                        gen_alone = false;
        double reshard = 0, sync = 0;
        if (gg == p->group[LOOM_PLAN_ACTOR_TRAIN])
                reshard = replica_gather(c, w, p, LOOM_PLAN_ACTOR_TRAIN, true);
        else
                sync = replica_gather(c, w, p, LOOM_PLAN_ACTOR_TRAIN, false) +
                       replica_gather(c, w, p, LOOM_PLAN_GEN, true) + p2p_cost(c, w, p);
        double gen = cost[LOOM_PLAN_GEN];
        bool overlap = w->async && gen_alone;
        double total = overlap ? (gen > rest ? gen : rest) + sync : gen + rest + reshard + sync;
        if (out) {
                for (int x = 0; x < nt; x++) {
                        int t = tasks[x];
                        out->task_s[t] = td[t].total;
                        out->comp_s[t] = td[t].comp;
                        out->tp_s[t] = td[t].tp;
                        out->pp_s[t] = td[t].pp;
                        out->dp_s[t] = td[t].dp;
                        out->bubble_s[t] = td[t].bubble;
                        out->hbm_s[t] = td[t].hbm;
                        out->balanced[t] = td[t].balanced;
                        const loom_plan_strategy *st = &p->st[t];
                        for (int j = 0; j < st->pp && j < LOOM_PLAN_MAX_PP; j++)
                                out->layers[t][j] =
                                    td[t].uneven ? sc->nl[t][j] : w->model.layers / st->pp;
                }
                out->reshard_s = reshard;
                out->sync_s = sync;
                out->generation_s = gen;
                out->rest_s = rest;
                out->overlapped = overlap;
        }
        return total;
}

/* compose on the memory of the kept layer splits and, where some were kept, on even layers'
 * memory too (uneven layers move model memory, and with it a colocated generation's decoding
 * batch): the cheaper, so that balancing never prices a plan above its even execution. */
static double compose_best(const loom_plan_cluster *c, const loom_plan_workflow *w,
                           const loom_plan *p, const int *tasks, int nt, const scratch *sc,
                           const scratch *uni, bool has_uni, loom_plan_cost *out)
{
        double a = compose(c, w, p, tasks, nt, sc, out);
        if (!has_uni)
                return a;
        if (!out)
                return fmin(a, compose(c, w, p, tasks, nt, uni, NULL));
        loom_plan_cost tmp = *out;
        double b = compose(c, w, p, tasks, nt, uni, &tmp);
        if (b < a) {
                *out = tmp;
                return b;
        }
        return a;
}

/* The cost of p, or with a memory overflow INFINITY, or with `graded` a value above
 * PLAN_INFEASIBLE that grows with the overflow so a search can climb out of it. */
static double cost_of(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                      bool graded)
{
        int tasks[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tasks);
        scratch sc;
        int worst;
        for (int x = 0; x < nt; x++) {
                int t = tasks[x];
                if (!plan_strategy_ok(w, &p->st[t], p->group_size[p->group[t]]))
                        return INFINITY;
        }
        scratch uni;
        bool has_uni;
        double over = memory_pass(c, w, p, tasks, nt, &sc, &worst, &uni, &has_uni);
        if (over > 0)
                return graded ? PLAN_INFEASIBLE + over / 1e9 : INFINITY;
        return compose_best(c, w, p, tasks, nt, &sc, &uni, has_uni, NULL);
}

double loom_plan_cost_fast(const loom_plan_cluster *c, const loom_plan_workflow *w,
                           const loom_plan *p)
{
        return cost_of(c, w, p, false);
}

double plan_cost_search(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p)
{
        return cost_of(c, w, p, true);
}

double plan_tasklet_mem(const loom_plan_workflow *w, int t, const loom_plan_strategy *st,
                        double *work)
{
        shape sh;
        task_shape(w, t, st, &sh);
        *work = t == LOOM_PLAN_GEN ? kv_seq_bytes(w, st, &sh) : tasklet_work_mem(w, t, st, &sh);
        return tasklet_model_mem(w, t, st, &sh);
}

double plan_task_alone(const loom_plan_cluster *c, const loom_plan_workflow *w, int t,
                       const loom_plan_strategy *st, const int *devs, int n, loom_plan *p,
                       double *model_mem, double *work_mem)
{
        static const loom_plan zero;
        scratch sc_v, *sc = &sc_v;
        memset(sc, 0, sizeof *sc);
        *p = zero;
        p->n_groups = 1;
        p->group_size[0] = n;
        p->group[t] = 0;
        p->st[t] = *st;
        for (int i = 0; i < n; i++)
                p->group_dev[0][i] = p->order[t][i] = devs[i];
        shape sh;
        task_shape(w, t, st, &sh);
        *model_mem = tasklet_model_mem(w, t, st, &sh);
        *work_mem = t == LOOM_PLAN_GEN ? kv_seq_bytes(w, st, &sh) : tasklet_work_mem(w, t, st, &sh);
        for (int i = 0; i < n; i++) {
                sc->model[devs[i]] = *model_mem;
                if (*model_mem + *work_mem > c->types[c->dev[devs[i]].type].hbm_gb * 1e9)
                        return INFINITY;
        }
        /* Balanced layers alone (kept if they fit): next to other tasks the memory pass may
         * fall back to even layers, which only costs more, so this stays a lower bound. */
        sc->uneven[t] = false;
        if (w->balance) {
                for (int i = 0; i < n; i++)
                        sc->model[devs[i]] = sc->work[devs[i]] = 0;
                int wd;
                if (layer_split(c, w, p, t, sc->nl[t])) {
                        mem_add(w, p, t, sc->nl[t], 1, sc);
                        sc->uneven[t] = mem_over(c, p, sc, &wd) <= 0;
                }
                for (int i = 0; i < n; i++)
                        sc->model[devs[i]] = *model_mem;
        }
        task_detail td;
        task_cost(c, w, p, t, sc, &td);
        return td.total;
}

static int check_plan(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                      const int *tasks, int nt, loom_err *e)
{
        if (p->n_groups < 1 || p->n_groups > nt)
                return loom_err_set(e, LOOM_EINVAL, "plan.groups", "need 1..%d groups, got %d", nt,
                                    p->n_groups);
        bool seen[LOOM_PLAN_MAX_DEV] = {false};
        for (int g = 0; g < p->n_groups; g++) {
                if (p->group_size[g] < 1 || p->group_size[g] > c->n_dev)
                        return loom_err_set(e, LOOM_EINVAL, "plan.groups", "group %d has %d GPUs",
                                            g, p->group_size[g]);
                for (int i = 0; i < p->group_size[g]; i++) {
                        int d = p->group_dev[g][i];
                        if (d < 0 || d >= c->n_dev || seen[d])
                                return loom_err_set(e, LOOM_EINVAL, "plan.groups",
                                                    "group %d: device %d out of range or reused", g,
                                                    d);
                        seen[d] = true;
                }
        }
        for (int x = 0; x < nt; x++) {
                int t = tasks[x], g = p->group[t];
                if (g < 0 || g >= p->n_groups)
                        return loom_err_set(e, LOOM_EINVAL, "plan.tasks", "%s has no group",
                                            task_names[t]);
                const loom_plan_strategy *st = &p->st[t];
                if (!plan_strategy_ok(w, st, p->group_size[g]))
                        return loom_err_set(e, LOOM_EINVAL, "plan.tasks",
                                            "%s: (dp %d, pp %d, tp %d) does not fit %d GPUs or the "
                                            "model's heads/layers",
                                            task_names[t], st->dp, st->pp, st->tp,
                                            p->group_size[g]);
                int n = st->dp * st->pp * st->tp;
                bool used[LOOM_PLAN_MAX_DEV] = {false};
                for (int i = 0; i < n; i++) {
                        int d = p->order[t][i];
                        bool mine = false;
                        for (int k = 0; k < p->group_size[g]; k++)
                                mine |= p->group_dev[g][k] == d;
                        if (!mine || used[d])
                                return loom_err_set(e, LOOM_EINVAL, "plan.tasks",
                                                    "%s: tasklet %d not on a distinct GPU of its "
                                                    "group",
                                                    task_names[t], i);
                        used[d] = true;
                }
        }
        return 0;
}

int loom_plan_evaluate(const loom_plan_cluster *c, const loom_plan_workflow *w, const loom_plan *p,
                       loom_plan_cost *cost, loom_err *e)
{
        int tasks[LOOM_PLAN_TASKS];
        int nt = loom_plan_workflow_tasks(w, tasks);
        int rc = check_plan(c, w, p, tasks, nt, e);
        if (rc)
                return rc;
        memset(cost, 0, sizeof *cost);
        scratch sc;
        scratch uni;
        bool has_uni;
        double over = memory_pass(c, w, p, tasks, nt, &sc, &cost->mem_worst_dev, &uni, &has_uni);
        cost->mem_over_gb = over > 0 ? over / 1e9 : 0;
        double total = compose_best(c, w, p, tasks, nt, &sc, &uni, has_uni, cost);
        cost->feasible = over <= 0;
        cost->iteration_s = cost->feasible ? total : INFINITY;
        double tokens = (double)w->batch * w->responses * (w->seq_in + w->seq_out);
        cost->tokens_per_s = cost->feasible ? tokens / total : 0;
        return 0;
}

void loom_plan_to_job(const loom_plan *p, const loom_plan_cost *cost, loom_plan_job *out)
{
        int gg = p->group[LOOM_PLAN_GEN];
        out->rollout_gpus = p->group_size[gg];
        out->train_gpus = 0;
        for (int g = 0; g < p->n_groups; g++)
                if (g != gg)
                        out->train_gpus += p->group_size[g];
        if (out->train_gpus == 0) /* everything colocated: training runs on the same GPUs */
                out->train_gpus = out->rollout_gpus;
        out->t_roll_s = cost->generation_s;
        out->t_train_s = cost->rest_s;
        out->sync_s = cost->reshard_s + cost->sync_s;
}
