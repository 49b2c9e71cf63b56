/*
 * slice.c - the cycle of members time-slicing one node set (loom_slice_period, group.h).
 *
 * Time-slicing is colocation shared: k jobs each run their rollouts and trainings on the same
 * node set, in turn, so serially they save nothing over running alone. What they can save is
 * the long tail of a rollout: once a rollout reaches its head (tail_threshold of its responses
 * done) its tail goes on on `keep` GPUs and the next member's rollout can start on the rest,
 * slowed by the GPUs the tail keeps; with `elastic`, a training also runs beside the cycle's
 * last tail. The simulator's oracle uses this to bound what time-slicing could save
 * (docs/sim.md, "Time-slicing one node set"); the arithmetic is the one the tail rules of the
 * simulator (one tail per node, partial-GPU starts at x / g of full speed, a switch per phase
 * change) give a cycle in steady state.
 */
#include <math.h>

#include "loom/group.h"

/* When a phase started at s with `work` of full-speed time ends, run at f of full speed until
 * x and at full speed after. */
static double done_at(double s, double work, double f, double x)
{
        if (work <= 0)
                return s;
        if (s >= x || f >= 1)
                return s + work;
        double slow = (x - s) * f;
        return slow >= work ? s + work / f : x + work - slow;
}

loom_us loom_slice_period(const loom_meta_job *jobs, int n, int set_nodes, int gpus_per_node,
                          int keep, bool elastic)
{
        if (!jobs || n < 1 || set_nodes < 1 || gpus_per_node < 1 || keep < 1 ||
            keep >= gpus_per_node)
                return -1;
        double head_prev = 0, end_prev = 0, end_prev2 = 0, roll_end = 0;
        for (int i = 0; i < n; i++) {
                const loom_meta_job *j = &jobs[i];
                int nodes = j->n_nodes > 0 ? j->n_nodes : set_nodes;
                if (nodes > set_nodes || j->t_roll < 0 || j->t_train < 0 || j->t_switch < 0 ||
                    j->t_head < 0 || j->t_head > j->t_roll)
                        return -1;
                double g = (double)nodes * gpus_per_node;
                /* starts once the rollout before it is in its tail and the one before that has
                 * ended (one tail per node), on the GPUs the tail leaves until it ends */
                double free_at = i == 0 ? 0 : fmax(head_prev, end_prev2);
                double s = free_at + (double)j->t_switch;
                double x = i == 0 ? 0 : end_prev;
                double f = (g - keep) / g;
                double end = done_at(s, (double)j->t_roll, f, x);
                /* its tail leaves only once the tail before it has (it reports its head then) */
                double head = j->t_head > 0 ? fmax(done_at(s, (double)j->t_head, f, x), x) : end;
                if (head > end)
                        head = end;
                end_prev2 = end_prev;
                end_prev = end;
                head_prev = head;
                roll_end = fmax(roll_end, end);
        }
        /* the trainings, in order: on the whole set once every rollout has ended, or (elastic)
         * beside the last rollout's tail, which ends at end_prev */
        double tail_until = elastic ? end_prev : 0;
        double all = (double)set_nodes * gpus_per_node, f = (all - keep) / all;
        /* rollout i + 2 starts after rollout i ends, so by the last one's head (or the end of
         * the one before it, if that ends later) every other rollout has ended */
        double t = elastic ? fmax(head_prev, end_prev2) : roll_end;
        for (int i = 0; i < n; i++) {
                const loom_meta_job *j = &jobs[i];
                /* the last member's training follows its own rollout */
                if (i == n - 1)
                        t = fmax(t, end_prev);
                double s = t + (double)j->t_switch;
                t = done_at(s, (double)j->t_train, f, tail_until);
        }
        return (loom_us)llround(t);
}
