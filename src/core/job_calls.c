/*
 * job_calls.c - a job's training phase as serviceized calls (PlexRL §4.2): compute_log_prob,
 * update_actor, sync_weight. Rollout and reward stay on the job's own rollout GPUs; these
 * calls are what the shared training pool runs, one after another.
 */
#include <stdio.h>

#include "loom/job.h"

static const char *const names[LOOM_N_CALLS] = {"compute_log_prob", "update_actor", "sync_weight"};

const char *loom_call_name(int call)
{
        return call >= 0 && call < LOOM_N_CALLS ? names[call] : "?";
}

int loom_job_calls(const loom_job_spec *s, loom_us *out)
{
        int n = 0;
        for (int i = 0; i < LOOM_N_CALLS; i++)
                if (s->t_calls[i] > 0)
                        out[n++] = s->t_calls[i];
        if (n == 0)
                out[n++] = s->t_train;
        return n;
}

int loom__job_calls_validate(const loom_job_spec *s, loom_err *e);

int loom__job_calls_validate(const loom_job_spec *s, loom_err *e)
{
        loom_us sum = 0;
        bool any = false;
        for (int i = 0; i < LOOM_N_CALLS; i++) {
                char f[40];
                snprintf(f, sizeof f, "%s_s", names[i]);
                if (s->t_calls[i] < 0 || s->t_calls[i] > INT64_C(1000000) * LOOM_US_PER_S)
                        return loom_err_set(e, LOOM_EINVAL, f, "%s must be >= 0 and <= 1e6 s", f);
                sum += s->t_calls[i];
                any |= s->t_calls[i] > 0;
        }
        /* Seconds round to microseconds per call: allow that much slack per call. */
        if (any && (sum - s->t_train > LOOM_N_CALLS || s->t_train - sum > LOOM_N_CALLS))
                return loom_err_set(e, LOOM_EINVAL, "t_train_s",
                                    "t_train_s (%.6f s) must equal compute_log_prob_s + "
                                    "update_actor_s + sync_weight_s (%.6f s)",
                                    loom_us_to_s(s->t_train), loom_us_to_s(sum));
        return 0;
}
