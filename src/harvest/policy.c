/*
 * policy.c - names of the simulator's policies and what each one switches on.
 */
#include <string.h>

#include "loom/harvest.h"
#include "sim_int.h"

static const char *const names[LOOM_HARVEST_NPOLICIES] = {
    "rose",      "roll",   "static",  "serverless", "prism",  "ttft-only",
    "tpot-only", "pinned", "preempt", "turnwise",   "prefix", "eq12",
};

const char *loom_harvest_policy_name(loom_harvest_policy p)
{
        return (unsigned)p < LOOM_HARVEST_NPOLICIES ? names[p] : "?";
}

int loom_harvest_policy_parse(const char *s, loom_harvest_policy *out, loom_err *e)
{
        for (int i = 0; i < LOOM_HARVEST_NPOLICIES; i++)
                if (!strcmp(s, names[i])) {
                        *out = (loom_harvest_policy)i;
                        return 0;
                }
        return loom_err_set(e, LOOM_EINVAL, "policy",
                            "'%s' is not one of rose, roll, static, serverless, prism, ttft-only, "
                            "tpot-only, pinned, preempt, turnwise, prefix, eq12",
                            s);
}

void hv_policy_flags(loom_harvest_policy p, hv_flags *f)
{
        *f = (hv_flags){.borrow = 1,
                        .admit = LOOM_HARVEST_ADMIT_DUAL,
                        .chunk = 512,
                        .prefix_cache = 1,
                        .preempt = 1,
                        .affinity = 1,
                        .sound = 1};
        switch (p) { /* sound admission only with dual admission, not on ablations of it */
        case LOOM_HARVEST_ROLL:
                f->borrow = 0;
                break;
        case LOOM_HARVEST_STATIC:
                f->admit = LOOM_HARVEST_ADMIT_NONE;
                f->chunk = 0;
                f->prefix_cache = 0;
                f->preempt = 0;
                break;
        case LOOM_HARVEST_SERVERLESS:
                f->admit = LOOM_HARVEST_ADMIT_NONE;
                f->chunk = 0;
                f->serverless = 1;
                break;
        case LOOM_HARVEST_PRISM:
                f->admit = LOOM_HARVEST_ADMIT_NONE;
                f->chunk = 0;
                f->prefix_cache = 0;
                break;
        case LOOM_HARVEST_TTFT_ONLY:
                f->admit = LOOM_HARVEST_ADMIT_TTFT;
                break;
        case LOOM_HARVEST_TPOT_ONLY:
                f->admit = LOOM_HARVEST_ADMIT_TPOT;
                break;
        case LOOM_HARVEST_PINNED:
                f->pinned = 1;
                break;
        case LOOM_HARVEST_PREEMPT: /* the memory ablation runs with spatial sharing, as static */
                f->admit = LOOM_HARVEST_ADMIT_NONE;
                f->chunk = 0;
                f->prefix_cache = 0;
                break;
        case LOOM_HARVEST_PREFIX:
                f->admit = LOOM_HARVEST_ADMIT_NONE;
                f->chunk = 0;
                break;
        case LOOM_HARVEST_EQ12:
                f->sound = 0;
                break;
        case LOOM_HARVEST_TURNWISE:
                f->affinity = 0;
                break;
        default:
                break;
        }
}
