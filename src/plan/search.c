/*
 * search.c - HetRL's hybrid search (Algorithm 1) and the plain evolutionary baseline.
 *
 * Levels 1 and 2 (task grouping, GPUs per group) are arms of a nested successive halving; each
 * arm runs its own steady-state evolutionary search over levels 3-5 (which GPUs, (dp, pp, tp)
 * per task; the tasklet layout follows from them). The genotype is compact so thousands of arms
 * fit:
 *
 *   rgs[t], size[g] the grouping and the GPUs per group
 *   perm[N]         device order; group g owns the block [off_g, off_g + size_g)
 *   strat[t]        index into the strategies for the group's size (dp * pp * tp = size)
 *
 * Decoding orders each task's GPUs by (region, machine, type) so TP shards and pipeline stages
 * sit close, the way a launcher orders ranks. Mutation swaps GPUs of two types between groups,
 * replaces a training GPU with a faster one from outside the training groups (TFLOPS upgrade),
 * changes a strategy or moves a GPU between groups; a swap-based locality search then improves
 * the phenotype, whose cost becomes the genotype's fitness (Baldwinian: the improvement is not
 * written back). The file ends with the hill climb used after the halving. Every cost-model
 * call counts against the budget, so a budget in evaluations gives the same plan for the same
 * seed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

/* ---- random numbers ---- */
int plan_rng_int(uint64_t *s, int n)
{
        return (int)(loom_splitmix64(s) % (uint64_t)n);
}

static double rng_unit(uint64_t *s)
{
        return (double)(loom_splitmix64(s) >> 11) / 9007199254740992.0;
}

/* ---- groupings (level 1) ---- */
static void rgs_rec(int n, int i, int mx, int *cur, int out[][LOOM_PLAN_TASKS], int cap, int *k)
{
        if (i == n) {
                if (*k < cap)
                        memcpy(out[*k], cur, sizeof(int) * LOOM_PLAN_TASKS);
                (*k)++;
                return;
        }
        for (int g = 0; g <= mx + 1; g++) {
                cur[i] = g;
                rgs_rec(n, i + 1, g > mx ? g : mx, cur, out, cap, k);
        }
}

int loom_plan_groupings(int n, int out[][LOOM_PLAN_TASKS], int cap)
{
        int cur[LOOM_PLAN_TASKS] = {0}, k = 0;
        if (n < 1 || n > LOOM_PLAN_TASKS)
                return 0;
        cur[0] = 0;
        rgs_rec(n, 1, 0, cur, out, cap, &k);
        return k;
}

/* ---- strategies (level 4) ---- */
int plan_ctx_init(plan_ctx *x, const loom_plan_cluster *c, const loom_plan_workflow *w)
{
        memset(x, 0, sizeof *x);
        x->c = c;
        x->w = w;
        x->n = c->n_dev;
        x->nt = loom_plan_workflow_tasks(w, x->tasks);
        x->strat_off = calloc((size_t)x->n + 2, sizeof(int));
        if (!x->strat_off)
                return LOOM_ENOMEM;
        size_t cap = 0, len = 0;
        for (int size = 1; size <= x->n; size++) {
                x->strat_off[size] = (int)len;
                for (int tp = 1; tp <= 8 && tp <= size; tp *= 2)
                        for (int pp = 1; pp * tp <= size && pp <= LOOM_PLAN_MAX_PP; pp++)
                                for (int dp = 1; dp * pp * tp <= size; dp++) {
                                        /* A task runs on every GPU of its group. */
                                        if (dp * pp * tp != size)
                                                continue;
                                        loom_plan_strategy st = {dp, pp, tp};
                                        if (!plan_strategy_ok(w, &st, size))
                                                continue;
                                        if (loom_reserve(&x->strats, &cap, len + 1,
                                                         sizeof *x->strats, 256)) {
                                                plan_ctx_free(x);
                                                return LOOM_ENOMEM;
                                        }
                                        x->strats[len++] = st;
                                }
        }
        x->strat_off[x->n + 1] = (int)len;
        for (int size = 1; size <= x->n; size++)
                if (x->strat_off[size + 1] == x->strat_off[size])
                        x->strat_off[size + 1] = x->strat_off[size]; /* none: size unusable */
        return 0;
}

void plan_ctx_free(plan_ctx *x)
{
        free(x->strats);
        free(x->strat_off);
        x->strats = NULL;
        x->strat_off = NULL;
}

int plan_n_strats(const plan_ctx *x, int size)
{
        return x->strat_off[size + 1] - x->strat_off[size];
}

/* ---- decoding ---- */
/* Insertion sort by (region, machine): slot lists are short and this keeps decoding free of
 * global state. */
void plan_sort_local(const loom_plan_cluster *c, int *a, int n)
{
        for (int i = 1; i < n; i++) {
                int v = a[i], j = i - 1;
                long kv = (long)c->dev[v].region * 100000 + c->dev[v].machine * 16 + c->dev[v].type;
                while (j >= 0) {
                        int u = a[j];
                        long ku = (long)c->dev[u].region * 100000 + c->dev[u].machine * 16 +
                                  c->dev[u].type;
                        if (ku <= kv)
                                break;
                        a[j + 1] = a[j];
                        j--;
                }
                a[j + 1] = v;
        }
}

void plan_decode(const plan_ctx *x, const plan_geno *g, loom_plan *p)
{
        const loom_plan_cluster *c = x->c;
        int ng = 0;
        for (int i = 0; i < x->nt; i++)
                if (g->rgs[i] + 1 > ng)
                        ng = g->rgs[i] + 1;
        p->n_groups = ng;
        int off = 0;
        for (int k = 0; k < ng; k++) {
                p->group_size[k] = g->size[k];
                for (int i = 0; i < g->size[k]; i++)
                        p->group_dev[k][i] = g->perm[off + i];
                off += g->size[k];
        }
        for (int t = 0; t < LOOM_PLAN_TASKS; t++)
                p->group[t] = -1;
        for (int i = 0; i < x->nt; i++) {
                int t = x->tasks[i], k = g->rgs[i], size = g->size[k];
                p->group[t] = k;
                int ns = plan_n_strats(x, size);
                if (ns == 0) {
                        p->st[t] = (loom_plan_strategy){1, 1, 1};
                } else {
                        p->st[t] = x->strats[x->strat_off[size] + g->strat[i] % ns];
                }
                for (int j = 0; j < size; j++)
                        p->order[t][j] = p->group_dev[k][j];
                int used = p->st[t].dp * p->st[t].pp * p->st[t].tp;
                plan_sort_local(c, p->order[t], used < size ? used : size);
        }
}

double plan_eval(plan_search *s, const plan_geno *g, loom_plan *scratch)
{
        plan_decode(&s->x, g, scratch);
        double v = plan_cost_search(s->x.c, s->x.w, scratch);
        s->evals++;
        if (v < s->best_cost && v < PLAN_INFEASIBLE) {
                s->best_cost = v;
                s->best = *scratch;
                s->best_geno = *g;
        }
        if (s->o->trace && s->o->trace_every > 0 && s->evals % s->o->trace_every == 0)
                s->o->trace(s->o->trace_ctx, s->evals,
                            s->best_cost < s->kept ? s->best_cost : s->kept);
        if (s->o->time_s > 0 && s->o->now && (s->evals & 255) == 0 &&
            s->o->now(s->o->now_ctx) - s->t0 >= s->o->time_s)
                s->stop = true;
        if (s->budget > 0 && s->evals >= s->budget)
                s->stop = true;
        if (s->hard > 0 && s->evals >= s->hard)
                s->stop = true;
        return v;
}

/* ---- genotypes ---- */
static void shuffle(uint64_t *rng, uint8_t *a, int n)
{
        for (int i = n - 1; i > 0; i--) {
                int j = plan_rng_int(rng, i + 1);
                uint8_t t = a[i];
                a[i] = a[j];
                a[j] = t;
        }
}

static int n_groups_of(const plan_ctx *x, const plan_geno *g);

/* Random strategies often overflow HBM; redraw the strategies of a group whose tasklets cannot
 * fit its smallest GPU, a few times, keeping the draw that needs least memory. */
static void repair_memory(const plan_ctx *x, uint64_t *rng, plan_geno *g)
{
        int ng = n_groups_of(x, g), off = 0;
        for (int k = 0; k < ng; k++) {
                double cap = INFINITY;
                for (int i = off; i < off + g->size[k]; i++) {
                        double h = x->c->types[x->c->dev[g->perm[i]].type].hbm_gb * 1e9;
                        if (h < cap)
                                cap = h;
                }
                off += g->size[k];
                int ns = plan_n_strats(x, g->size[k]);
                if (!ns)
                        continue;
                uint16_t best[LOOM_PLAN_TASKS];
                double best_need = INFINITY;
                for (int tries = 0; tries < 16; tries++) {
                        double mm = 0, wk = 0;
                        for (int i = 0; i < x->nt; i++) {
                                if (g->rgs[i] != k)
                                        continue;
                                if (tries > 0)
                                        g->strat[i] = (uint16_t)plan_rng_int(rng, ns);
                                loom_plan_strategy st =
                                    x->strats[x->strat_off[g->size[k]] + g->strat[i] % ns];
                                double w;
                                mm += plan_tasklet_mem(x->w, x->tasks[i], &st, &w);
                                if (w > wk)
                                        wk = w;
                        }
                        if (mm + wk < best_need) {
                                best_need = mm + wk;
                                for (int i = 0; i < x->nt; i++)
                                        best[i] = g->strat[i];
                        }
                        if (mm + wk <= cap)
                                break;
                }
                for (int i = 0; i < x->nt; i++)
                        if (g->rgs[i] == k)
                                g->strat[i] = best[i];
        }
}

void plan_geno_random(const plan_ctx *x, uint64_t *rng, plan_geno *g)
{
        for (int i = 0; i < x->n; i++)
                g->perm[i] = (uint8_t)i;
        shuffle(rng, g->perm, x->n);
        if (plan_rng_int(rng, 2)) {
                /* Half the starts keep GPU types (then machines) together, in a random type
                 * order, so groups begin homogeneous; the rest are uniform. */
                const loom_plan_cluster *c = x->c;
                uint8_t trank[LOOM_PLAN_MAX_TYPES];
                for (int t = 0; t < LOOM_PLAN_MAX_TYPES; t++)
                        trank[t] = (uint8_t)t;
                shuffle(rng, trank, c->n_types);
                for (int i = 1; i < x->n; i++) {
                        uint8_t v = g->perm[i];
                        long kv =
                            (long)trank[c->dev[v].type] * 1000000 + c->dev[v].machine * 256 + v;
                        int j = i - 1;
                        while (j >= 0) {
                                uint8_t u = g->perm[j];
                                long ku = (long)trank[c->dev[u].type] * 1000000 +
                                          c->dev[u].machine * 256 + u;
                                if (ku <= kv)
                                        break;
                                g->perm[j + 1] = u;
                                j--;
                        }
                        g->perm[j + 1] = v;
                }
        }
        for (int i = 0; i < x->nt; i++) {
                int size = g->size[g->rgs[i]];
                int ns = plan_n_strats(x, size);
                g->strat[i] = (uint16_t)(ns > 0 ? plan_rng_int(rng, ns) : 0);
        }
        repair_memory(x, rng, g);
}

static int n_groups_of(const plan_ctx *x, const plan_geno *g)
{
        int ng = 0;
        for (int i = 0; i < x->nt; i++)
                if (g->rgs[i] + 1 > ng)
                        ng = g->rgs[i] + 1;
        return ng;
}

static int group_of_pos(const plan_geno *g, int ng, int pos, int *start)
{
        int off = 0;
        for (int k = 0; k < ng; k++) {
                if (pos < off + g->size[k]) {
                        if (start)
                                *start = off;
                        return k;
                }
                off += g->size[k];
        }
        return ng - 1;
}

/* Groups that hold a training task. */
static unsigned train_groups(const plan_ctx *x, const plan_geno *g)
{
        unsigned m = 0;
        for (int i = 0; i < x->nt; i++)
                if (x->tasks[i] == LOOM_PLAN_ACTOR_TRAIN || x->tasks[i] == LOOM_PLAN_CRITIC_TRAIN)
                        m |= 1u << g->rgs[i];
        return m;
}

/* The TFLOPS upgrade: a GPU of a training group swaps with a faster GPU outside them. */
static bool upgrade(const plan_ctx *x, uint64_t *rng, plan_geno *g)
{
        int ng = n_groups_of(x, g);
        unsigned tg = train_groups(x, g);
        if (ng < 2 || tg == (1u << ng) - 1)
                return false;
        int in[LOOM_PLAN_MAX_DEV], out[LOOM_PLAN_MAX_DEV], ni = 0, no = 0;
        for (int pos = 0; pos < x->n; pos++) {
                int k = group_of_pos(g, ng, pos, NULL);
                if (tg >> k & 1)
                        in[ni++] = pos;
                else
                        out[no++] = pos;
        }
        if (!ni || !no)
                return false;
        int a = in[plan_rng_int(rng, ni)];
        double fa = x->c->types[x->c->dev[g->perm[a]].type].tflops;
        int cand[LOOM_PLAN_MAX_DEV], nc = 0;
        for (int i = 0; i < no; i++)
                if (x->c->types[x->c->dev[g->perm[out[i]]].type].tflops > fa)
                        cand[nc++] = out[i];
        if (!nc)
                return false;
        int b = cand[plan_rng_int(rng, nc)];
        uint8_t t = g->perm[a];
        g->perm[a] = g->perm[b];
        g->perm[b] = t;
        return true;
}

void plan_mutate(const plan_ctx *x, uint64_t *rng, plan_geno *g, bool custom, bool structure)
{
        int ng = n_groups_of(x, g);
        int ops = 1 + plan_rng_int(rng, 2);
        for (int o = 0; o < ops; o++) {
                if (custom && rng_unit(rng) < 0.2 && upgrade(x, rng, g))
                        continue;
                int kind = plan_rng_int(rng, structure ? 4 : 3);
                if (kind == 0 && ng >= 2) { /* swap GPUs of two types between two groups */
                        int a = plan_rng_int(rng, x->n), b = a;
                        for (int tries = 0; tries < 8; tries++) {
                                b = plan_rng_int(rng, x->n);
                                if (group_of_pos(g, ng, a, NULL) != group_of_pos(g, ng, b, NULL) &&
                                    x->c->dev[g->perm[a]].type != x->c->dev[g->perm[b]].type)
                                        break;
                        }
                        /* a run of such swaps, up to a machine's worth */
                        int run = plan_rng_int(rng, 2) ? 1 : 1 + plan_rng_int(rng, 8);
                        int ta = x->c->dev[g->perm[a]].type, tb = x->c->dev[g->perm[b]].type;
                        int ka = group_of_pos(g, ng, a, NULL), kb = group_of_pos(g, ng, b, NULL);
                        for (int r = 0; r < run; r++) {
                                uint8_t t = g->perm[a];
                                g->perm[a] = g->perm[b];
                                g->perm[b] = t;
                                int na = -1, nb = -1;
                                for (int q = 0; q < x->n && (na < 0 || nb < 0); q++) {
                                        int kq = group_of_pos(g, ng, q, NULL);
                                        if (na < 0 && kq == ka && x->c->dev[g->perm[q]].type == ta)
                                                na = q;
                                        if (nb < 0 && kq == kb && x->c->dev[g->perm[q]].type == tb)
                                                nb = q;
                                }
                                if (na < 0 || nb < 0 || ta == tb)
                                        break;
                                a = na;
                                b = nb;
                        }
                } else if (kind <= 1) { /* a task's strategy */
                        int i = plan_rng_int(rng, x->nt);
                        int ns = plan_n_strats(x, g->size[g->rgs[i]]);
                        if (ns > 0)
                                g->strat[i] = (uint16_t)plan_rng_int(rng, ns);
                } else if (kind == 2 && ng >= 2) { /* move one GPU between neighbouring groups */
                        int k = plan_rng_int(rng, ng - 1);
                        int dir = plan_rng_int(rng, 2);
                        int from = dir ? k : k + 1, to = dir ? k + 1 : k;
                        if (g->size[from] > 1) {
                                g->size[from]--;
                                g->size[to]++;
                        }
                } else if (kind == 3) { /* move a task to another group (keeps rgs canonical) */
                        int i = plan_rng_int(rng, x->nt);
                        int target = plan_rng_int(rng, ng + 1);
                        plan_geno h = *g;
                        h.rgs[i] = target;
                        if (plan_canonical(x, &h, rng))
                                *g = h;
                }
        }
}

/* Renumber groups in first-use order, drop empty ones and fix sizes so they sum to N and each
 * group has at least one GPU. Returns false when that is impossible. */
bool plan_canonical(const plan_ctx *x, plan_geno *g, uint64_t *rng)
{
        int map[LOOM_PLAN_TASKS + 1], next = 0, old_size[LOOM_PLAN_TASKS + 1] = {0};
        for (int k = 0; k <= LOOM_PLAN_TASKS; k++)
                map[k] = -1;
        for (int k = 0; k < LOOM_PLAN_TASKS; k++)
                old_size[k] = g->size[k];
        int rg[LOOM_PLAN_TASKS];
        for (int i = 0; i < x->nt; i++) {
                if (map[g->rgs[i]] < 0)
                        map[g->rgs[i]] = next++;
                rg[i] = map[g->rgs[i]];
        }
        if (next > x->n)
                return false;
        int size[LOOM_PLAN_TASKS] = {0}, sum = 0;
        for (int k = 0; k <= LOOM_PLAN_TASKS; k++)
                if (map[k] >= 0) {
                        size[map[k]] = k < LOOM_PLAN_TASKS && old_size[k] > 0 ? old_size[k] : 1;
                        sum += size[map[k]];
                }
        while (sum > x->n) { /* shrink the largest */
                int b = 0;
                for (int k = 1; k < next; k++)
                        if (size[k] > size[b])
                                b = k;
                size[b]--;
                sum--;
        }
        while (sum < x->n) {
                size[plan_rng_int(rng, next)]++;
                sum++;
        }
        for (int i = 0; i < x->nt; i++)
                g->rgs[i] = rg[i];
        for (int k = 0; k < LOOM_PLAN_TASKS; k++)
                g->size[k] = k < next ? size[k] : 0;
        return true;
}

/* ---- swap-based locality search (phenotype only) ---- */
static int affinity(const loom_plan_cluster *c, int a, int b)
{
        const loom_plan_device *x = &c->dev[a], *y = &c->dev[b];
        return 4 * (x->machine == y->machine) + 2 * (x->zone == y->zone) + (x->region == y->region);
}

typedef struct loc_counts {
        int m[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_MACHINES];
        int z[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_MACHINES];
        int r[LOOM_PLAN_TASKS][LOOM_PLAN_MAX_REGIONS];
} loc_counts;

/* Sum of affinities of device d to the devices of group k (d itself included if there). */
static int aff_sum(const plan_ctx *x, const loc_counts *lc, int d, int k)
{
        const loom_plan_device *v = &x->c->dev[d];
        return 4 * lc->m[k][v->machine] + 2 * lc->z[k][v->zone] + lc->r[k][v->region];
}

static void loc_add(const plan_ctx *x, loc_counts *lc, int d, int k, int by)
{
        const loom_plan_device *v = &x->c->dev[d];
        lc->m[k][v->machine] += by;
        lc->z[k][v->zone] += by;
        lc->r[k][v->region] += by;
}

bool plan_local_search(const plan_ctx *x, plan_geno *g, int max_steps)
{
        int ng = n_groups_of(x, g);
        if (ng < 2)
                return false;
        int start[LOOM_PLAN_TASKS + 1], off = 0;
        for (int k = 0; k < ng; k++) {
                start[k] = off;
                off += g->size[k];
        }
        start[ng] = off;
        loc_counts *lc = calloc(1, sizeof *lc);
        if (!lc)
                return false;
        for (int k = 0; k < ng; k++)
                for (int i = start[k]; i < start[k + 1]; i++)
                        loc_add(x, lc, g->perm[i], k, 1);
        bool changed = false;
        for (int step = 0; step < max_steps; step++) {
                int best_gain = 0, ba = -1, bb = -1, bk1 = 0, bk2 = 0;
                for (int k1 = 0; k1 < ng; k1++)
                        for (int a = start[k1]; a < start[k1 + 1]; a++) {
                                int da = g->perm[a];
                                int a_in = aff_sum(x, lc, da, k1) - 7;
                                for (int k2 = k1 + 1; k2 < ng; k2++)
                                        for (int b = start[k2]; b < start[k2 + 1]; b++) {
                                                int db = g->perm[b];
                                                if (x->c->dev[da].type != x->c->dev[db].type)
                                                        continue;
                                                int b_in = aff_sum(x, lc, db, k2) - 7;
                                                int ab = affinity(x->c, da, db);
                                                int gain = aff_sum(x, lc, db, k1) - ab - a_in +
                                                           aff_sum(x, lc, da, k2) - ab - b_in;
                                                if (gain > best_gain) {
                                                        best_gain = gain;
                                                        ba = a;
                                                        bb = b;
                                                        bk1 = k1;
                                                        bk2 = k2;
                                                }
                                        }
                        }
                if (ba < 0)
                        break;
                loc_add(x, lc, g->perm[ba], bk1, -1);
                loc_add(x, lc, g->perm[bb], bk2, -1);
                uint8_t t = g->perm[ba];
                g->perm[ba] = g->perm[bb];
                g->perm[bb] = t;
                loc_add(x, lc, g->perm[ba], bk1, 1);
                loc_add(x, lc, g->perm[bb], bk2, 1);
                changed = true;
        }
        free(lc);
        return changed;
}

/* ---- the final hill climb ---- */

/* The strategy for a resized group closest to the old one (same tp and pp when possible). */
static int closest_strat(const plan_ctx *x, int size, loom_plan_strategy old)
{
        int ns = plan_n_strats(x, size), best = 0;
        double bd = INFINITY;
        for (int k = 0; k < ns; k++) {
                loom_plan_strategy s = x->strats[x->strat_off[size] + k];
                double d = fabs(log2((double)s.tp / old.tp)) + fabs(log2((double)s.pp / old.pp));
                if (d < bd) {
                        bd = d;
                        best = k;
                }
        }
        return best;
}

static loom_plan_strategy strat_of(const plan_ctx *x, const plan_geno *g, int i)
{
        int size = g->size[g->rgs[i]], ns = plan_n_strats(x, size);
        return ns ? x->strats[x->strat_off[size] + g->strat[i] % ns]
                  : (loom_plan_strategy){1, 1, 1};
}

/* Move the GPU at position p into group b (sizes change; strategies follow closest_strat). */
static void move_gpu(const plan_ctx *x, plan_geno *g, int ng, int p, int b)
{
        loom_plan_strategy old[LOOM_PLAN_TASKS];
        for (int i = 0; i < x->nt; i++)
                old[i] = strat_of(x, g, i);
        int start = 0, a = group_of_pos(g, ng, p, &start);
        (void)start;
        uint8_t d = g->perm[p];
        /* remove p, then insert at the end of block b */
        memmove(g->perm + p, g->perm + p + 1, (size_t)(x->n - p - 1));
        g->size[a]--;
        int end = 0;
        for (int k = 0; k <= b; k++)
                end += g->size[k];
        memmove(g->perm + end + 1, g->perm + end, (size_t)(x->n - 1 - end));
        g->perm[end] = d;
        g->size[b]++;
        for (int i = 0; i < x->nt; i++)
                if (g->rgs[i] == a || g->rgs[i] == b)
                        g->strat[i] = (uint16_t)closest_strat(x, g->size[g->rgs[i]], old[i]);
}

static int dev_class(const plan_ctx *x, int d)
{
        const loom_plan_device *v = &x->c->dev[d];
        return v->machine * LOOM_PLAN_MAX_TYPES + v->type;
}

/* Each task of groups a and b in turn takes the strategy that makes the plan cheapest. */
static void refit(plan_search *s, plan_geno *g, int a, int b)
{
        const plan_ctx *x = &s->x;
        if (s->stop)
                return;
        g->cost = plan_eval(s, g, &s->scratch);
        for (int i = 0; i < x->nt && !s->stop; i++) {
                if (g->rgs[i] != a && g->rgs[i] != b)
                        continue;
                int ns = plan_n_strats(x, g->size[g->rgs[i]]);
                plan_geno h = *g;
                for (int k = 0; k < ns && !s->stop; k++) {
                        if (k == g->strat[i] % ns)
                                continue;
                        h.strat[i] = (uint16_t)k;
                        h.cost = plan_eval(s, &h, &s->scratch);
                        if (h.cost < g->cost)
                                *g = h;
                }
        }
}

/* Best-improvement hill climb from g over: one task's strategy, one GPU moved to another
 * group, two GPUs of different classes swapped between groups. Neighbours that differ only by
 * which of two identical GPUs moves are tried once. */
void plan_polish(plan_search *s, plan_geno *g)
{
        const plan_ctx *x = &s->x;
        int ng = n_groups_of(x, g);
        if (s->stop)
                return;
        g->cost = plan_eval(s, g, &s->scratch);
        while (!s->stop) {
                plan_geno best = *g, h;
                for (int i = 0; i < x->nt && !s->stop; i++) {
                        int ns = plan_n_strats(x, g->size[g->rgs[i]]);
                        for (int k = 0; k < ns && !s->stop; k++) {
                                if (k == g->strat[i] % ns)
                                        continue;
                                h = *g;
                                h.strat[i] = (uint16_t)k;
                                h.cost = plan_eval(s, &h, &s->scratch);
                                if (h.cost < best.cost)
                                        best = h;
                        }
                }
                /* two or more tasks of one group on one strategy (colocated tasks share HBM,
                 * so moving several to a common (dp, pp, tp) can pay off where every single
                 * change costs more) */
                for (int k = 0; k < ng && !s->stop; k++) {
                        int ns = plan_n_strats(x, g->size[k]), in[LOOM_PLAN_TASKS], m = 0;
                        for (int i = 0; i < x->nt; i++)
                                if (g->rgs[i] == k)
                                        in[m++] = i;
                        for (unsigned sub = 1; sub < 1u << m && !s->stop; sub++) {
                                if (!(sub & (sub - 1)))
                                        continue; /* single tasks are above */
                                for (int j = 0; j < ns && !s->stop; j++) {
                                        h = *g;
                                        for (int r = 0; r < m; r++)
                                                if (sub >> r & 1)
                                                        h.strat[in[r]] = (uint16_t)j;
                                        if (!memcmp(h.strat, g->strat, sizeof h.strat))
                                                continue;
                                        h.cost = plan_eval(s, &h, &s->scratch);
                                        if (h.cost < best.cost)
                                                best = h;
                                }
                        }
                }
                /* k GPUs of one class from group a to group b, then each task of the two
                 * groups takes its best strategy in turn */
                for (int p = 0; p < x->n && !s->stop; p++) {
                        int start = 0, a = group_of_pos(g, ng, p, &start);
                        int cp = dev_class(x, g->perm[p]), avail = 0;
                        bool seen = false;
                        for (int q = start; q < start + g->size[a]; q++) {
                                seen |= q < p && dev_class(x, g->perm[q]) == cp;
                                avail += dev_class(x, g->perm[q]) == cp;
                        }
                        if (seen)
                                continue;
                        for (int b = 0; b < ng && !s->stop; b++) {
                                if (b == a)
                                        continue;
                                h = *g;
                                for (int k = 1; k <= avail && h.size[a] > 1 && !s->stop; k++) {
                                        /* the next GPU of class cp still in group a */
                                        int sa = 0, q;
                                        for (int r = 0; r < a; r++)
                                                sa += h.size[r];
                                        for (q = sa; q < sa + h.size[a]; q++)
                                                if (dev_class(x, h.perm[q]) == cp)
                                                        break;
                                        if (q == sa + h.size[a])
                                                break;
                                        move_gpu(x, &h, ng, q, b);
                                        plan_geno f = h;
                                        refit(s, &f, a, b);
                                        if (f.cost < best.cost)
                                                best = f;
                                }
                        }
                }
                for (int p = 0; p < x->n && !s->stop; p++)
                        for (int q = p + 1; q < x->n && !s->stop; q++) {
                                int a = group_of_pos(g, ng, p, NULL),
                                    b = group_of_pos(g, ng, q, NULL);
                                if (a == b || dev_class(x, g->perm[p]) == dev_class(x, g->perm[q]))
                                        continue;
                                bool dup = false;
                                for (int r = 0; r < p && !dup; r++)
                                        dup = group_of_pos(g, ng, r, NULL) == a &&
                                              dev_class(x, g->perm[r]) == dev_class(x, g->perm[p]);
                                for (int r = p + 1; r < q && !dup; r++)
                                        dup = group_of_pos(g, ng, r, NULL) == b &&
                                              dev_class(x, g->perm[r]) == dev_class(x, g->perm[q]);
                                if (dup)
                                        continue;
                                h = *g;
                                h.perm[p] = g->perm[q];
                                h.perm[q] = g->perm[p];
                                h.cost = plan_eval(s, &h, &s->scratch);
                                if (h.cost < best.cost)
                                        best = h;
                        }
                /* whole classes: every GPU of class ca in group a for as many of class cb in
                 * group b (moves a machine's worth of GPUs in one step) */
                for (int a = 0; a < ng && !s->stop; a++)
                        for (int b = 0; b < ng && !s->stop; b++) {
                                if (a == b)
                                        continue;
                                int sa = 0, sb = 0;
                                group_of_pos(g, ng, 0, NULL);
                                for (int k = 0; k < a; k++)
                                        sa += g->size[k];
                                for (int k = 0; k < b; k++)
                                        sb += g->size[k];
                                for (int p = sa; p < sa + g->size[a]; p++) {
                                        int ca = dev_class(x, g->perm[p]);
                                        bool first = true;
                                        for (int r = sa; r < p; r++)
                                                first &= dev_class(x, g->perm[r]) != ca;
                                        if (!first)
                                                continue;
                                        for (int q = sb; q < sb + g->size[b]; q++) {
                                                int cb = dev_class(x, g->perm[q]);
                                                bool fq = cb != ca;
                                                for (int r = sb; r < q; r++)
                                                        fq &= dev_class(x, g->perm[r]) != cb;
                                                if (!fq)
                                                        continue;
                                                h = *g;
                                                int i = sa, j = sb, swapped = 0;
                                                for (;;) {
                                                        while (i < sa + g->size[a] &&
                                                               dev_class(x, h.perm[i]) != ca)
                                                                i++;
                                                        while (j < sb + g->size[b] &&
                                                               dev_class(x, h.perm[j]) != cb)
                                                                j++;
                                                        if (i >= sa + g->size[a] ||
                                                            j >= sb + g->size[b])
                                                                break;
                                                        uint8_t t = h.perm[i];
                                                        h.perm[i++] = h.perm[j];
                                                        h.perm[j++] = t;
                                                        swapped++;
                                                }
                                                if (swapped < 2)
                                                        continue; /* single swaps are above */
                                                h.cost = plan_eval(s, &h, &s->scratch);
                                                if (h.cost < best.cost)
                                                        best = h;
                                        }
                                }
                        }
                if (!(best.cost < g->cost))
                        break;
                *g = best;
        }
}

/* Regroup g: task i moves to the group g labels lab[i]; a group left without tasks hands its
 * GPUs to group into[k]. Groups are renumbered in first-use order (the blocks of perm follow),
 * moved or resized tasks take the strategy closest to their old one, and then the tasks of a
 * changed group are refitted (each in turn takes its cheapest strategy) from there and from
 * each of the REGROUP_STARTS cheapest strategies shared by the whole group, keeping the
 * cheapest result. Returns false when lab is not a regrouping of
 * g (an emptied group with no destination). */
#define REGROUP_STARTS 3

bool plan_regroup(plan_search *s, plan_geno *g, const int *lab, const int *into)
{
        const plan_ctx *x = &s->x;
        int ng = n_groups_of(x, g);
        loom_plan_strategy old[LOOM_PLAN_TASKS];
        for (int i = 0; i < x->nt; i++)
                old[i] = strat_of(x, g, i);
        int start[LOOM_PLAN_TASKS + 1], off = 0, ntask[LOOM_PLAN_TASKS] = {0};
        for (int k = 0; k < ng; k++) {
                start[k] = off;
                off += g->size[k];
        }
        for (int i = 0; i < x->nt; i++) {
                if (lab[i] < 0 || lab[i] >= ng)
                        return false;
                ntask[lab[i]]++;
        }
        for (int k = 0; k < ng; k++)
                if (!ntask[k] && (into[k] < 0 || into[k] >= ng || !ntask[into[k]]))
                        return false;
        int map[LOOM_PLAN_TASKS], next = 0, src[LOOM_PLAN_TASKS];
        for (int k = 0; k < ng; k++)
                map[k] = -1;
        for (int i = 0; i < x->nt; i++)
                if (map[lab[i]] < 0) {
                        src[next] = lab[i];
                        map[lab[i]] = next++;
                }
        plan_geno h = *g;
        unsigned changed = 0;
        int p = 0;
        for (int n = 0; n < next; n++) {
                int k = src[n];
                h.size[n] = 0;
                for (int e = 0; e < ng; e++) {
                        if (e != k && (ntask[e] || into[e] != k))
                                continue;
                        memcpy(h.perm + p, g->perm + start[e], (size_t)g->size[e]);
                        p += g->size[e];
                        h.size[n] += g->size[e];
                        if (e != k)
                                changed |= 1u << n;
                }
        }
        for (int k = next; k < LOOM_PLAN_TASKS; k++)
                h.size[k] = 0;
        for (int i = 0; i < x->nt; i++) {
                h.rgs[i] = map[lab[i]];
                if (lab[i] != g->rgs[i])
                        changed |= 1u << h.rgs[i];
        }
        for (int i = 0; i < x->nt; i++)
                h.strat[i] = (uint16_t)closest_strat(x, h.size[h.rgs[i]], old[i]);
        if (!s->stop)
                h.cost = plan_eval(s, &h, &s->scratch);
        for (int k = 0; k < next && !s->stop; k++) {
                if (!(changed >> k & 1))
                        continue;
                /* the REGROUP_STARTS cheapest shared strategies, each refitted per task */
                plan_geno top[REGROUP_STARTS];
                int nt = 0, ns = plan_n_strats(x, h.size[k]);
                for (int j = 0; j < ns && !s->stop; j++) {
                        plan_geno f = h;
                        for (int i = 0; i < x->nt; i++)
                                if (f.rgs[i] == k)
                                        f.strat[i] = (uint16_t)j;
                        f.cost = plan_eval(s, &f, &s->scratch);
                        int at = nt < REGROUP_STARTS ? nt++ : REGROUP_STARTS;
                        while (at > 0 && f.cost < top[at - 1].cost) {
                                if (at < REGROUP_STARTS)
                                        top[at] = top[at - 1];
                                at--;
                        }
                        if (at < REGROUP_STARTS)
                                top[at] = f;
                }
                refit(s, &h, k, k);
                for (int j = 0; j < nt && !s->stop; j++) {
                        refit(s, &top[j], k, k);
                        if (top[j].cost < h.cost)
                                h = top[j];
                }
        }
        *g = h;
        return true;
}
