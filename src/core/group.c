/*
 * group.c - co-execution group arithmetic and the meta-iteration simulation (WEAVE §4.3).
 *
 * The round-robin schedule of a group is a max-plus linear system: the state after iteration
 * m (when each rollout node, the training pool and each job become free) is x(m) = A (x) x(m-1),
 * and A (x) (x + d) = A (x) x + d. Usually the state soon equals an earlier state shifted by a
 * constant d, c iterations back; from then on the schedule repeats with period d / c, and we
 * return that, exactly. When two resources are loaded almost equally the transient can last
 * thousands of iterations; then we build A and return its max-plus eigenvalue, the maximum
 * cycle mean of its graph (Karp's algorithm), which is the same period reached asymptotically.
 *
 * A multi-rate group is the same system over slots instead of members (loom_meta_order): a
 * member of rate r has r slots per meta-iteration, its slot's rollout waits for its previous
 * slot's training. With every rate 1 the slots are the members in admission order and every
 * number is the one the single-rate round robin gives.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "loom/group.h"

loom_us loom_group_train_time(loom_us t_train, int g, int pool_gpus, double efficiency)
{
        if (pool_gpus <= 0 || g <= 0)
                return t_train;
        if (pool_gpus <= g)
                return (loom_us)(((__int128)t_train * g + pool_gpus / 2) / pool_gpus);
        /* More GPUs than asked for: the extra speed-up is scaled by the efficiency. */
        double speedup = 1.0 + ((double)pool_gpus / g - 1.0) * efficiency;
        return (loom_us)((double)t_train / speedup + 0.5);
}

uint64_t loom_group_train_mem(uint64_t mem_train, int g, int pool_gpus)
{
        if (pool_gpus <= 0 || g <= 0)
                return mem_train;
        return (uint64_t)(((unsigned __int128)mem_train * (unsigned)g + (unsigned)pool_gpus - 1) /
                          (unsigned)pool_gpus);
}

static int rate_of(const int *rates, int i)
{
        return rates && rates[i] > 1 ? rates[i] : 1;
}

loom_us loom_meta_t_cycle(const loom_meta_job *jobs, int n)
{
        return loom_meta_t_cycle_r(jobs, NULL, n);
}

loom_us loom_meta_t_load(const loom_meta_job *jobs, int n, int n_rollout_nodes)
{
        return loom_meta_t_load_r(jobs, NULL, n, n_rollout_nodes);
}

loom_us loom_meta_t_cycle_r(const loom_meta_job *jobs, const int *rates, int n)
{
        loom_us c = 0;
        for (int i = 0; i < n; i++) {
                loom_us solo =
                    rate_of(rates, i) * (jobs[i].t_roll + jobs[i].t_train + jobs[i].t_sync);
                if (solo > c)
                        c = solo;
        }
        return c;
}

loom_us loom_meta_t_load_r(const loom_meta_job *jobs, const int *rates, int n, int n_rollout_nodes)
{
        loom_us train = 0, node_max = 0;
        for (int i = 0; i < n; i++)
                train += rate_of(rates, i) * jobs[i].t_train;
        if (n_rollout_nodes > 0 && n_rollout_nodes <= 64) {
                /* one pass over the members; a node index out of range counts nowhere */
                loom_us load[64];
                for (int r = 0; r < n_rollout_nodes; r++)
                        load[r] = 0;
                for (int i = 0; i < n; i++)
                        for (int k = 0; k < jobs[i].n_nodes; k++) {
                                int r = jobs[i].nodes[k];
                                if (r >= 0 && r < n_rollout_nodes)
                                        load[r] += rate_of(rates, i) * loom_meta_occ(&jobs[i], k);
                        }
                for (int r = 0; r < n_rollout_nodes; r++)
                        if (load[r] > node_max)
                                node_max = load[r];
                return train > node_max ? train : node_max;
        }
        for (int r = 0; r < n_rollout_nodes; r++) {
                loom_us load = 0;
                for (int i = 0; i < n; i++)
                        for (int k = 0; k < jobs[i].n_nodes; k++)
                                if (jobs[i].nodes[k] == r)
                                        load += rate_of(rates, i) * loom_meta_occ(&jobs[i], k);
                if (load > node_max)
                        node_max = load;
        }
        return train > node_max ? train : node_max;
}

/* loom_meta_order's merge in 64-bit integers, for due times that fit (the caller checks):
 * the same comparisons on the same exact values, so the same order. */
static int order64(const loom_meta_job *jobs, const int *rates, int n, loom_us H, int L, int *slots)
{
        int64_t next[LOOM_META_MAX_SLOTS], step[LOOM_META_MAX_SLOTS];
        int left[LOOM_META_MAX_SLOTS];
        for (int i = 0; i < n; i++) {
                int r = rate_of(rates, i);
                next[i] = (int64_t)720720 * jobs[i].t_roll;
                step[i] = H * (720720 / r);
                left[i] = r;
        }
        /* a member with no repeats left waits at INT64_MAX, past any due time */
        for (int m = 0; m < L; m++) {
                int b = 0;
                int64_t best = next[0];
                for (int i = 1; i < n; i++) {
                        bool take = next[i] < best;
                        b = take ? i : b;
                        best = take ? next[i] : best;
                }
                slots[m] = b;
                next[b] = --left[b] ? next[b] + step[b] : INT64_MAX;
        }
        return L;
}

int loom_meta_order(const loom_meta_job *jobs, const int *rates, int n, int *slots, int cap)
{
        int L = 0;
        bool multi = false;
        loom_us H = loom_meta_t_cycle_r(jobs, rates, n);
        for (int i = 0; i < n; i++) {
                if (rates && (rates[i] < 0 || rates[i] > LOOM_MAX_RATE))
                        return LOOM_EINVAL;
                L += rate_of(rates, i);
                multi |= rate_of(rates, i) > 1;
        }
        if (L > cap || L > LOOM_META_MAX_SLOTS || n > LOOM_META_MAX_SLOTS)
                return LOOM_EINVAL;
        if (!multi) {
                for (int i = 0; i < n; i++)
                        slots[i] = i;
                return L;
        }
        /* Merge the members' repeats by due time q H / r + t_roll, scaled by 720720 =
         * lcm(1..16) to an exact integer; ties go to the lower member (a member's own repeats
         * are already in order). A due time is below 720720 (H + t_roll): in 64 bits unless
         * phases run for months, the common case, which then needs no 128-bit compares. */
        loom_us max_roll = 0;
        bool fits = H >= 0;
        for (int i = 0; i < n; i++) {
                fits &= jobs[i].t_roll >= 0;
                if (jobs[i].t_roll > max_roll)
                        max_roll = jobs[i].t_roll;
        }
        if (fits && H <= INT64_MAX / 720720 / 2 - max_roll)
                return order64(jobs, rates, n, H, L, slots);
        __int128 next[LOOM_META_MAX_SLOTS], step[LOOM_META_MAX_SLOTS];
        int left[LOOM_META_MAX_SLOTS];
        for (int i = 0; i < n; i++) {
                int r = rate_of(rates, i);
                next[i] = (__int128)720720 * jobs[i].t_roll;
                step[i] = (__int128)H * (720720 / r);
                left[i] = r;
        }
        for (int m = 0; m < L; m++) {
                int b = -1;
                for (int i = 0; i < n; i++)
                        if (left[i] && (b < 0 || next[i] < next[b]))
                                b = i;
                slots[m] = b;
                next[b] += step[b];
                left[b]--;
        }
        return L;
}

int loom_meta_gap_bound(const loom_meta_job *jobs, const int *rates, int n, loom_us *lb)
{
        int slots[LOOM_META_MAX_SLOTS];
        if (!jobs || n < 1 || n > LOOM_META_MAX_SLOTS || !lb)
                return LOOM_EINVAL;
        int L = loom_meta_order(jobs, rates, n, slots, LOOM_META_MAX_SLOTS);
        if (L < 0)
                return L;
        /* prefix[m] = the trainings of slots [0, m): the pool's work between two slots */
        loom_us prefix[LOOM_META_MAX_SLOTS + 1], total;
        int first[LOOM_META_MAX_SLOTS], last[LOOM_META_MAX_SLOTS];
        prefix[0] = 0;
        for (int m = 0; m < L; m++)
                prefix[m + 1] = prefix[m] + jobs[slots[m]].t_train;
        total = prefix[L];
        for (int i = 0; i < n; i++) {
                lb[i] = jobs[i].t_sync + jobs[i].t_roll + jobs[i].t_train;
                first[i] = last[i] = -1;
        }
        for (int m = 0; m < L; m++) {
                int i = slots[m];
                if (last[i] >= 0 && prefix[m + 1] - prefix[last[i] + 1] > lb[i])
                        lb[i] = prefix[m + 1] - prefix[last[i] + 1]; /* slots (last, m] */
                if (first[i] < 0)
                        first[i] = m;
                last[i] = m;
        }
        for (int i = 0; i < n; i++) {
                /* the wrap: slots after its last one, then up to its first of the next step */
                loom_us wrap = total - prefix[last[i] + 1] + prefix[first[i] + 1];
                if (wrap > lb[i])
                        lb[i] = wrap;
        }
        return 0;
}

enum { META_MAX_ITERS = 512, META_STACK_BYTES = 8192 };

#define META_NEG (INT64_MIN / 4) /* max-plus minus infinity that survives additions */

/* State layout: [0, R) rollout node free times, R training pool free time, R+1+j job j ready.
 * A rollout with a planned head frees its nodes at its head; the tail it leaves on its first
 * node delays the next other job's rollout there (tail_start; pen[r], left by job pen_job[r],
 * -1: none). Whose tail a node carries depends only on the slot order. */
typedef struct meta_run {
        const loom_meta_job *jobs;
        int n, R, width, hist;
        int L, slots[LOOM_META_MAX_SLOTS]; /* the slot order */
        loom_us *train_end;                /* per slot, of the last step */
        loom_us warm;
        loom_us *ring;  /* hist states of width entries */
        int *node_last; /* last job on each rollout node, -1 before any */
        int *pen_job;   /* the job whose tail delays the next rollout on each node, or -1 */
        loom_us *pen;
        int train_last;
        loom_us *roll_start;
        bool tails;  /* some member has a planned head */
        bool linear; /* tail_start's max-plus bound (Karp's fallback) */
} meta_run;

/*
 * When job j's rollout, free to start at s, starts in effect for the tails other jobs left on
 * its nodes. It starts at s on the GPUs a tail left free and runs slower until the tail ends
 * at e (node_free + the tail's length L): at full speed it would have started the tail's share
 * of the node's GPUs times what is left of the tail later, t_pen (L)/ L x (e - s). Karp's
 * fallback needs a max-plus linear step and takes s + t_pen, a later start.
 */
static loom_us tail_start(const meta_run *m, const loom_meta_job *jb, int j, loom_us s,
                          const loom_us *node_free)
{
        loom_us best = s;
        for (int k = 0; k < jb->n_nodes; k++) {
                int r = jb->nodes[k], o = m->pen_job[r];
                if (o < 0 || o == j)
                        continue;
                loom_us t = s + m->pen[r];
                if (!m->linear) {
                        const loom_meta_job *ob = &m->jobs[o];
                        loom_us tail = ob->t_roll - ob->t_head, e = node_free[r] + tail;
                        loom_us left = e - s; /* of the tail, once j's rollout may start */
                        t = left <= 0
                                ? s
                                : s + (loom_us)(((__int128)left * ob->t_pen + tail - 1) / tail);
                }
                best = t > best ? t : best;
        }
        return best;
}

/* How long after it starts a rollout frees its nodes: its head, or all of it. */
static loom_us held(const loom_meta_job *jb)
{
        return jb->t_head > 0 ? jb->t_head : jb->t_roll;
}

/* Job j's rollout leaves its tail on its first node (and none on the others). */
static void leave_tail(meta_run *m, const loom_meta_job *jb, int j)
{
        for (int k = 0; k < jb->n_nodes; k++) {
                int r = jb->nodes[k];
                bool t = k == 0 && jb->t_head > 0 && jb->t_pen > 0;
                m->pen_job[r] = t ? j : -1;
                m->pen[r] = t ? jb->t_pen : 0;
        }
}

/* Changing a node from job `last` to job j reloads j's state: its own switch if given. */
static loom_us switch_cost(const meta_run *m, int last, int j)
{
        if (last < 0 || last == j)
                return 0;
        return m->jobs[j].t_switch > 0 ? m->jobs[j].t_switch : m->warm;
}

/* One meta-iteration from state `in` into state `out`, slot by slot: the rollout of a slot
 * needs only earlier slots' phases, so processing each slot's rollout then its training gives
 * every resource its slot order. */
static void meta_step(meta_run *m, const loom_us *in, loom_us *out)
{
        memcpy(out, in, sizeof(loom_us) * (size_t)m->width);
        loom_us *node_free = out, *train_free = out + m->R, *ready = out + m->R + 1;
        for (int i = 0; i < m->L; i++) {
                int j = m->slots[i];
                const loom_meta_job *jb = &m->jobs[j];
                loom_us s = ready[j];
                for (int k = 0; k < jb->n_nodes; k++) {
                        int r = jb->nodes[k];
                        loom_us t = node_free[r] + switch_cost(m, m->node_last[r], j);
                        if (t > s)
                                s = t;
                }
                if (m->tails)
                        s = tail_start(m, jb, j, s, node_free);
                loom_us end = s + jb->t_roll;
                if (m->roll_start[j] == META_NEG)
                        m->roll_start[j] = s;
                for (int k = 0; k < jb->n_nodes; k++) {
                        node_free[jb->nodes[k]] = s + held(jb);
                        m->node_last[jb->nodes[k]] = j;
                }
                if (m->tails)
                        leave_tail(m, jb, j);
                loom_us t = *train_free + switch_cost(m, m->train_last, j);
                if (end > t)
                        t = end;
                *train_free = t + jb->t_train;
                m->train_last = j;
                m->train_end[i] = *train_free;
                ready[j] = *train_free + jb->t_sync;
        }
}

/* meta_step without switches (warm 0) or rollout starts to record: the same times, fewer
 * stores (placement evaluates thousands of groups per decision this way). */
static void meta_step_plain(meta_run *m, const loom_us *in, loom_us *out)
{
        memcpy(out, in, sizeof(loom_us) * (size_t)m->width);
        loom_us *node_free = out, *ready = out + m->R + 1;
        loom_us train_free = out[m->R];
        for (int i = 0; i < m->L; i++) {
                int j = m->slots[i];
                const loom_meta_job *jb = &m->jobs[j];
                loom_us s = ready[j], end;
                if (jb->n_nodes == 1 && !m->tails) { /* the common case, without the loops */
                        loom_us *nf = &node_free[jb->nodes[0]];
                        end = (*nf > s ? *nf : s) + jb->t_roll;
                        *nf = end;
                } else {
                        for (int k = 0; k < jb->n_nodes; k++)
                                if (node_free[jb->nodes[k]] > s)
                                        s = node_free[jb->nodes[k]];
                        if (m->tails)
                                s = tail_start(m, jb, j, s, node_free);
                        end = s + jb->t_roll;
                        for (int k = 0; k < jb->n_nodes; k++)
                                node_free[jb->nodes[k]] = s + held(jb);
                        if (m->tails)
                                leave_tail(m, jb, j);
                }
                train_free = (end > train_free ? end : train_free) + jb->t_train;
                m->train_end[i] = train_free;
                ready[j] = train_free + jb->t_sync;
        }
        out[m->R] = train_free;
}

/* meta_step recording each member's first rollout start of the step. */
static void meta_step_rec(meta_run *m, const loom_us *in, loom_us *out)
{
        for (int j = 0; j < m->n; j++)
                m->roll_start[j] = META_NEG;
        meta_step(m, in, out);
}

/* If state a equals state b shifted by a constant, return the shift, else -1. */
static loom_us shifted_by(const loom_us *a, const loom_us *b, int width, const int *used)
{
        loom_us d = a[width - 1] - b[width - 1];
        for (int i = 0; i < width; i++)
                if (used[i] && a[i] - b[i] != d)
                        return -1;
        return d;
}

static int meta_args_ok(const loom_meta_job *jobs, int n, int R)
{
        if (!jobs || n < 1 || n > 64 || R < 1)
                return 0;
        for (int j = 0; j < n; j++) {
                if (jobs[j].n_nodes < 1 || !jobs[j].nodes || jobs[j].t_roll < 0 ||
                    jobs[j].t_train < 0 || jobs[j].t_sync < 0 || jobs[j].t_switch < 0 ||
                    jobs[j].t_head < 0 || jobs[j].t_head > jobs[j].t_roll || jobs[j].t_pen < 0)
                        return 0;
                for (int k = 0; k < jobs[j].n_nodes; k++)
                        if (jobs[j].nodes[k] < 0 || jobs[j].nodes[k] >= R)
                                return 0;
        }
        return 1;
}

/*
 * The period as the maximum cycle mean of A, where A[i][k] is the longest path from state k
 * at one iteration to state i at the next (Karp 1978). A is built column by column by stepping
 * the unit vectors through meta_step in steady state (every node's last job is the last member
 * pinned to it).
 */
static int meta_karp(meta_run *m, loom_us *t_meta)
{
        int d = m->width;
        size_t dd = (size_t)d * (size_t)d;
        loom_us *A = malloc(sizeof(loom_us) * (dd + (size_t)(d + 1) * (size_t)d + 2 * (size_t)d));
        if (!A)
                return LOOM_ENOMEM;
        loom_us *D = A + dd, *x = D + (size_t)(d + 1) * (size_t)d, *y = x + d;
        m->linear = true;
        for (int k = 0; k < d; k++) {
                for (int r = 0; r < m->R; r++)
                        m->node_last[r] = m->pen_job[r] = -1;
                for (int i = 0; i < m->L; i++) {
                        int j = m->slots[i];
                        for (int q = 0; q < m->jobs[j].n_nodes; q++)
                                m->node_last[m->jobs[j].nodes[q]] = j;
                        leave_tail(m, &m->jobs[j], j);
                }
                m->train_last = m->slots[m->L - 1];
                for (int i = 0; i < d; i++)
                        x[i] = i == k ? 0 : META_NEG;
                meta_step_rec(m, x, y);
                for (int i = 0; i < d; i++)
                        A[(size_t)i * (size_t)d + (size_t)k] =
                            y[i] > META_NEG / 2 ? y[i] : META_NEG;
        }
        m->linear = false;
        for (int v = 0; v < d; v++)
                D[v] = 0;
        for (int t = 1; t <= d; t++)
                for (int v = 0; v < d; v++) {
                        loom_us best = META_NEG;
                        for (int u = 0; u < d; u++) {
                                loom_us a = A[(size_t)v * (size_t)d + (size_t)u],
                                        p = D[(size_t)(t - 1) * (size_t)d + (size_t)u];
                                if (a > META_NEG && p > META_NEG && a + p > best)
                                        best = a + p;
                        }
                        D[(size_t)t * (size_t)d + (size_t)v] = best;
                }
        double lambda = -1;
        for (int v = 0; v < d; v++) {
                loom_us dv = D[(size_t)d * (size_t)d + (size_t)v];
                if (dv <= META_NEG)
                        continue;
                double worst = 1e300;
                for (int t = 0; t < d; t++) {
                        loom_us dt = D[(size_t)t * (size_t)d + (size_t)v];
                        if (dt <= META_NEG)
                                continue;
                        double mean = (double)(dv - dt) / (double)(d - t);
                        if (mean < worst)
                                worst = mean;
                }
                if (worst < 1e300 && worst > lambda)
                        lambda = worst;
        }
        free(A);
        if (lambda < 0)
                return LOOM_ERANGE;
        *t_meta = (loom_us)(lambda + 0.5);
        return 0;
}

/* Each member's gaps so far, and its first and last training end (META_NEG: none yet). */
typedef struct gap_acc {
        loom_us first[64], last[64];
} gap_acc;

static void gaps_start(const meta_run *m, gap_acc *a, loom_us *gaps)
{
        for (int j = 0; j < m->n; j++) {
                gaps[j] = 0;
                a->first[j] = a->last[j] = META_NEG;
        }
}

/* Fold the training ends of the step just taken (m->train_end) into the gaps. */
static void gaps_fold(const meta_run *m, gap_acc *a, loom_us *gaps)
{
        for (int i = 0; i < m->L; i++) {
                int j = m->slots[i];
                loom_us e = m->train_end[i];
                if (a->last[j] != META_NEG && e - a->last[j] > gaps[j])
                        gaps[j] = e - a->last[j];
                if (a->first[j] == META_NEG)
                        a->first[j] = e;
                a->last[j] = e;
        }
}

/* The gap across the wrap: the next period's first training end is the first one + shift. */
static void gaps_wrap(const meta_run *m, const gap_acc *a, loom_us shift, loom_us *gaps)
{
        for (int j = 0; j < m->n; j++)
                if (a->first[j] + shift - a->last[j] > gaps[j])
                        gaps[j] = a->first[j] + shift - a->last[j];
}

/* Longest gap between consecutive training ends of each member over `steps` steps from state
 * x (the schedule repeats every `steps` steps, shifted by `shift`; shift < 0: no wrap). */
static void meta_gaps(meta_run *m, loom_us *x, loom_us *y, int steps, loom_us shift, loom_us *gaps)
{
        gap_acc a;
        gaps_start(m, &a, gaps);
        for (int st = 0; st < steps; st++) {
                meta_step(m, x, y);
                gaps_fold(m, &a, gaps);
                memcpy(x, y, sizeof(loom_us) * (size_t)m->width);
        }
        if (shift >= 0)
                gaps_wrap(m, &a, shift, gaps);
}

/*
 * meta_gaps over one step when the schedule repeats every step: the step after the last one
 * simulated is that step shifted by `shift` (the system is max-plus linear and the nodes'
 * last jobs are the same after every step but the first), so its training ends, and the gaps
 * between them, are read off the step just taken (m->train_end) instead of simulating it.
 */
static void last_step_gaps(const meta_run *m, loom_us shift, loom_us *gaps)
{
        gap_acc a;
        gaps_start(m, &a, gaps);
        gaps_fold(m, &a, gaps);
        gaps_wrap(m, &a, shift, gaps);
}

int loom_meta_eval(const loom_meta_job *jobs, const int *rates, int n, int n_rollout_nodes,
                   loom_us warm_switch, loom_us *t_meta, loom_us *gaps, loom_us *starts)
{
        if (!meta_args_ok(jobs, n, n_rollout_nodes) || warm_switch < 0 || !t_meta)
                return LOOM_EINVAL;
        meta_run m = {.jobs = jobs, .n = n, .R = n_rollout_nodes, .warm = warm_switch};
        m.L = loom_meta_order(jobs, rates, n, m.slots, LOOM_META_MAX_SLOTS);
        if (m.L < 0)
                return LOOM_EINVAL;
        m.width = m.R + 1 + n;
        m.hist = 2 * m.L + 4; /* longest period (in iterations) we look for, plus one */
        size_t bytes = sizeof(loom_us) * ((size_t)m.hist * (size_t)m.width + (size_t)n +
                                          (size_t)m.L + 2 * (size_t)m.width + (size_t)m.R) +
                       sizeof(int) * (2 * (size_t)m.R + (size_t)m.width);
        /* Placement evaluates small groups by the thousand: those fit on the stack. */
        _Alignas(loom_us) char small[META_STACK_BYTES];
        char *mem = bytes <= sizeof small ? small : malloc(bytes);
        if (!mem)
                return LOOM_ENOMEM;
        memset(mem, 0, sizeof(loom_us) * (size_t)m.width); /* the initial state, ring[0] */
        m.ring = (loom_us *)mem;
        m.roll_start = m.ring + (size_t)m.hist * (size_t)m.width;
        m.train_end = m.roll_start + n;
        for (int j = 0; j < n; j++)
                m.roll_start[j] = META_NEG;
        loom_us *gx = m.train_end + m.L, *gy = gx + m.width;
        m.pen = gy + m.width;
        m.node_last = (int *)(m.pen + m.R);
        m.pen_job = m.node_last + m.R;
        int *used = m.pen_job + m.R; /* nodes nobody is pinned to never change: skip them */
        memset(used, 0, sizeof(int) * (size_t)m.width);
        for (int r = 0; r < m.R; r++)
                m.node_last[r] = m.pen_job[r] = -1; /* pen[r] is read only under a pen_job */
        m.train_last = -1;
        used[m.R] = 1;
        for (int j = 0; j < n; j++) {
                used[m.R + 1 + j] = 1;
                for (int k = 0; k < jobs[j].n_nodes; k++)
                        used[jobs[j].nodes[k]] = 1;
                m.tails |= jobs[j].t_head > 0;
        }

        bool plain = warm_switch == 0 && !starts;
        for (int j = 0; j < n && plain; j++)
                plain = jobs[j].t_switch == 0;
        int rc = LOOM_ERANGE, period = 0, found_at = 0;
        loom_us shift = -1;
        const loom_us *at = NULL;
        for (int it = 1; it <= META_MAX_ITERS; it++) {
                loom_us *prev = m.ring + (size_t)((it - 1) % m.hist) * (size_t)m.width;
                loom_us *cur = m.ring + (size_t)(it % m.hist) * (size_t)m.width;
                if (plain)
                        meta_step_plain(&m, prev, cur);
                else
                        meta_step_rec(&m, prev, cur);
                for (int c = 1; c < m.hist && c <= it; c++) {
                        const loom_us *old = m.ring + (size_t)((it - c) % m.hist) * (size_t)m.width;
                        loom_us d = shifted_by(cur, old, m.width, used);
                        if (d >= 0) {
                                *t_meta = (d + c / 2) / c;
                                rc = 0;
                                found_at = it;
                                period = c;
                                shift = d;
                                at = cur;
                                break;
                        }
                }
                if (rc == 0)
                        break;
        }
        if (rc == 0 && gaps) {
                memcpy(gx, at, sizeof(loom_us) * (size_t)m.width);
                if (period == 1 && found_at >= 2)
                        last_step_gaps(&m, shift, gaps); /* the next step is this one + shift */
                else
                        meta_gaps(&m, gx, gy, period, shift, gaps);
        }
        if (rc == LOOM_ERANGE) {
                const loom_us *last = m.ring + (size_t)(META_MAX_ITERS % m.hist) * (size_t)m.width;
                if (gaps)
                        memcpy(gx, last, sizeof(loom_us) * (size_t)m.width);
                rc = meta_karp(&m, t_meta);
                if (rc == 0 && gaps) {
                        /* no exact repetition: the gaps of a few more steps, at least T_meta/r */
                        meta_gaps(&m, gx, gy, 4, -1, gaps);
                        for (int j = 0; j < n; j++)
                                if (gaps[j] < *t_meta / rate_of(rates, j))
                                        gaps[j] = *t_meta / rate_of(rates, j);
                }
        }
        if (rc == 0 && starts) {
                loom_us first = m.roll_start[0];
                for (int j = 1; j < n; j++)
                        if (m.roll_start[j] < first)
                                first = m.roll_start[j];
                for (int j = 0; j < n; j++)
                        starts[j] = m.roll_start[j] - first;
        }
        if (mem != small)
                free(mem);
        return rc;
}

int loom_meta_period(const loom_meta_job *jobs, int n, int n_rollout_nodes, loom_us warm_switch,
                     loom_us *t_meta, loom_us *starts)
{
        return loom_meta_eval(jobs, NULL, n, n_rollout_nodes, warm_switch, t_meta, NULL, starts);
}
