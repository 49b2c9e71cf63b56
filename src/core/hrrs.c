/*
 * hrrs.c - ordering training calls on a shared training pool: HRRS, FCFS and round robin.
 *
 * HRRS (PlexRL Eq. 3-4) is HRRN with the setup cost folded into the service time when, and
 * only when, running the request forces a switch of the pool's resident job:
 *     P = 1 + W / (E + 1[switch] * (T_offload + T_load)).
 * A request of the resident job therefore outranks an equally old foreign one (batching), and
 * W grows without bound, so every request is eventually first (no starvation). PlexRL's
 * Algorithm 1 instead charges the setup to every non-running request and adds it once more to
 * the cursor; the indicator form is used here because it charges a switch exactly when one
 * happens (docs/scheduling.md).
 */
#include <string.h>

#include "loom/timeline.h"

const char *loom_dispatch_name(loom_dispatch d)
{
        switch (d) {
        case LOOM_DISPATCH_RR:
                return "rr";
        case LOOM_DISPATCH_HRRS:
                return "hrrs";
        case LOOM_DISPATCH_FCFS:
                return "fcfs";
        }
        return "?";
}

int loom_dispatch_parse(const char *s, loom_dispatch *out)
{
        for (int d = LOOM_DISPATCH_RR; d <= LOOM_DISPATCH_FCFS; d++)
                if (s && !strcmp(s, loom_dispatch_name((loom_dispatch)d))) {
                        *out = (loom_dispatch)d;
                        return 0;
                }
        return LOOM_EINVAL;
}

double loom_hrrs_score(const loom_hrrs_req *r, loom_us now, bool needs_switch)
{
        loom_us w = now > r->arrival ? now - r->arrival : 0;
        loom_us s = r->exec + (needs_switch ? r->setup : 0);
        if (s <= 0)
                s = 1; /* a zero-length call is served at once: huge ratio, no division by 0 */
        return 1.0 + (double)w / (double)s;
}

static bool earlier(const loom_hrrs_req *a, const loom_hrrs_req *b)
{
        return a->arrival != b->arrival ? a->arrival < b->arrival : a->seq < b->seq;
}

static int pick_hrrs(const loom_hrrs_req *q, int n, loom_us now, uint32_t resident)
{
        int best = 0;
        double bs = loom_hrrs_score(&q[0], now, q[0].job != resident);
        for (int i = 1; i < n; i++) {
                double sc = loom_hrrs_score(&q[i], now, q[i].job != resident);
                if (sc > bs || (sc == bs && q[i].seq < q[best].seq))
                        best = i, bs = sc;
        }
        return best;
}

static int pick_fcfs(const loom_hrrs_req *q, int n)
{
        int best = 0;
        for (int i = 1; i < n; i++)
                if (earlier(&q[i], &q[best]))
                        best = i;
        return best;
}

/* The first job after rr_last in ascending (cyclic) job order, its earliest request. */
static int pick_rr(const loom_hrrs_req *q, int n, uint32_t rr_last)
{
        int best = -1;
        for (int i = 0; i < n; i++) {
                if (best < 0) {
                        best = i;
                        continue;
                }
                /* Rank by distance after rr_last on the job-id ring; wrap past UINT32_MAX. */
                uint32_t di = q[i].job - rr_last - 1, db = q[best].job - rr_last - 1;
                if (di < db || (di == db && earlier(&q[i], &q[best])))
                        best = i;
        }
        return best;
}

int loom_hrrs_pick(loom_dispatch d, const loom_hrrs_req *q, int n, loom_us now, uint32_t resident,
                   uint32_t rr_last)
{
        if (n <= 0)
                return -1;
        switch (d) {
        case LOOM_DISPATCH_HRRS:
                return pick_hrrs(q, n, now, resident);
        case LOOM_DISPATCH_FCFS:
                return pick_fcfs(q, n);
        case LOOM_DISPATCH_RR:
                return pick_rr(q, n, rr_last);
        }
        return -1;
}

int loom_hrrs_preempt(const loom_hrrs_req *running, const loom_hrrs_req *q, int n, loom_us now,
                      double margin)
{
        if (n <= 0)
                return -1;
        double run = loom_hrrs_score(running, now, false);
        int best = -1;
        double bs = 0;
        for (int i = 0; i < n; i++) {
                if (q[i].job == running->job)
                        continue; /* the job's own next call waits for its running one */
                double sc = loom_hrrs_score(&q[i], now, true);
                if (best < 0 || sc > bs)
                        best = i, bs = sc;
        }
        return best >= 0 && bs > margin * run ? best : -1;
}
