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
 */
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

loom_us loom_meta_t_cycle(const loom_meta_job *jobs, int n)
{
        loom_us c = 0;
        for (int i = 0; i < n; i++) {
                loom_us solo = jobs[i].t_roll + jobs[i].t_train + jobs[i].t_sync;
                if (solo > c)
                        c = solo;
        }
        return c;
}

loom_us loom_meta_t_load(const loom_meta_job *jobs, int n, int n_rollout_nodes)
{
        loom_us train = 0, node_max = 0;
        for (int i = 0; i < n; i++)
                train += jobs[i].t_train;
        for (int r = 0; r < n_rollout_nodes; r++) {
                loom_us load = 0;
                for (int i = 0; i < n; i++)
                        for (int k = 0; k < jobs[i].n_nodes; k++)
                                if (jobs[i].nodes[k] == r)
                                        load += jobs[i].t_roll;
                if (load > node_max)
                        node_max = load;
        }
        return train > node_max ? train : node_max;
}

enum { META_MAX_ITERS = 512 };

#define META_NEG (INT64_MIN / 4) /* max-plus minus infinity that survives additions */

/* State layout: [0, R) rollout node free times, R training pool free time, R+1+j job j ready. */
typedef struct meta_run {
        const loom_meta_job *jobs;
        int n, R, width, hist;
        loom_us warm;
        loom_us *ring;  /* hist states of width entries */
        int *node_last; /* last job on each rollout node, -1 before any */
        int train_last;
        loom_us *roll_start, *roll_end;
} meta_run;

static loom_us switch_cost(int last, int j, loom_us warm)
{
        return (last >= 0 && last != j) ? warm : 0;
}

/* One round-robin iteration from state `in` into state `out`. */
static void meta_step(meta_run *m, const loom_us *in, loom_us *out)
{
        memcpy(out, in, sizeof(loom_us) * (size_t)m->width);
        loom_us *node_free = out, *train_free = out + m->R, *ready = out + m->R + 1;
        for (int j = 0; j < m->n; j++) {
                const loom_meta_job *jb = &m->jobs[j];
                loom_us s = ready[j];
                for (int k = 0; k < jb->n_nodes; k++) {
                        int r = jb->nodes[k];
                        loom_us t = node_free[r] + switch_cost(m->node_last[r], j, m->warm);
                        if (t > s)
                                s = t;
                }
                m->roll_start[j] = s;
                m->roll_end[j] = s + jb->t_roll;
                for (int k = 0; k < jb->n_nodes; k++) {
                        node_free[jb->nodes[k]] = m->roll_end[j];
                        m->node_last[jb->nodes[k]] = j;
                }
        }
        for (int j = 0; j < m->n; j++) {
                loom_us s = *train_free + switch_cost(m->train_last, j, m->warm);
                if (m->roll_end[j] > s)
                        s = m->roll_end[j];
                *train_free = s + m->jobs[j].t_train;
                m->train_last = j;
                ready[j] = *train_free + m->jobs[j].t_sync;
        }
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
                    jobs[j].t_train < 0 || jobs[j].t_sync < 0)
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
        for (int k = 0; k < d; k++) {
                for (int r = 0; r < m->R; r++)
                        m->node_last[r] = -1;
                for (int j = 0; j < m->n; j++)
                        for (int q = 0; q < m->jobs[j].n_nodes; q++)
                                m->node_last[m->jobs[j].nodes[q]] = j;
                m->train_last = m->n - 1;
                for (int i = 0; i < d; i++)
                        x[i] = i == k ? 0 : META_NEG;
                meta_step(m, x, y);
                for (int i = 0; i < d; i++)
                        A[(size_t)i * (size_t)d + (size_t)k] =
                            y[i] > META_NEG / 2 ? y[i] : META_NEG;
        }
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

int loom_meta_period(const loom_meta_job *jobs, int n, int n_rollout_nodes, loom_us warm_switch,
                     loom_us *t_meta, loom_us *starts)
{
        if (!meta_args_ok(jobs, n, n_rollout_nodes) || warm_switch < 0 || !t_meta)
                return LOOM_EINVAL;
        meta_run m = {.jobs = jobs, .n = n, .R = n_rollout_nodes, .warm = warm_switch};
        m.width = m.R + 1 + n;
        m.hist = 2 * n + 4; /* longest period (in iterations) we look for, plus one */
        size_t bytes = sizeof(loom_us) * ((size_t)m.hist * (size_t)m.width + 2 * (size_t)n) +
                       sizeof(int) * ((size_t)m.R + (size_t)m.width);
        char *mem = calloc(1, bytes);
        if (!mem)
                return LOOM_ENOMEM;
        m.ring = (loom_us *)mem;
        m.roll_start = m.ring + (size_t)m.hist * (size_t)m.width;
        m.roll_end = m.roll_start + n;
        m.node_last = (int *)(m.roll_end + n);
        int *used = m.node_last + m.R; /* nodes nobody is pinned to never change: skip them */
        for (int r = 0; r < m.R; r++)
                m.node_last[r] = -1;
        m.train_last = -1;
        used[m.R] = 1;
        for (int j = 0; j < n; j++) {
                used[m.R + 1 + j] = 1;
                for (int k = 0; k < jobs[j].n_nodes; k++)
                        used[jobs[j].nodes[k]] = 1;
        }

        int rc = LOOM_ERANGE;
        for (int it = 1; it <= META_MAX_ITERS; it++) {
                loom_us *prev = m.ring + (size_t)((it - 1) % m.hist) * (size_t)m.width;
                loom_us *cur = m.ring + (size_t)(it % m.hist) * (size_t)m.width;
                meta_step(&m, prev, cur);
                for (int c = 1; c < m.hist && c <= it; c++) {
                        const loom_us *old = m.ring + (size_t)((it - c) % m.hist) * (size_t)m.width;
                        loom_us d = shifted_by(cur, old, m.width, used);
                        if (d >= 0) {
                                *t_meta = (d + c / 2) / c;
                                rc = 0;
                                break;
                        }
                }
                if (rc == 0)
                        break;
        }
        if (rc == LOOM_ERANGE)
                rc = meta_karp(&m, t_meta);
        if (rc == 0 && starts) {
                loom_us first = m.roll_start[0];
                for (int j = 1; j < n; j++)
                        if (m.roll_start[j] < first)
                                first = m.roll_start[j];
                for (int j = 0; j < n; j++)
                        starts[j] = m.roll_start[j] - first;
        }
        free(mem);
        return rc;
}
