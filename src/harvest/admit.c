/*
 * admit.c - dual-SLO admission (ROSE Eq. 1-2). Pure.
 *
 * Rollout tokens run on a serving GPU only inside the slack that serving leaves: on a prefill
 * instance the smallest TTFT slack of the queued prefills (Eq. 1), on a decode instance the
 * smallest TPOT slack of the running decodes (Eq. 2), on a co-located instance the smaller of
 * the two. A single-objective policy checks only one of them, and on the instance kind whose
 * SLO it ignores it checks nothing at all: that is exactly how it breaks the other SLO.
 */
#include "loom/harvest.h"

int loom_harvest_checks(loom_harvest_admit_mode mode, loom_harvest_role role)
{
        if (role == LOOM_HARVEST_DEDICATED)
                return 0;
        switch (mode) {
        case LOOM_HARVEST_ADMIT_DUAL:
                return 1;
        case LOOM_HARVEST_ADMIT_TTFT:
                return role == LOOM_HARVEST_PREFILL || role == LOOM_HARVEST_COLOCATED;
        case LOOM_HARVEST_ADMIT_TPOT:
                return role == LOOM_HARVEST_DECODE || role == LOOM_HARVEST_COLOCATED;
        default:
                return 0;
        }
}

loom_us loom_harvest_slack(loom_harvest_admit_mode mode, loom_harvest_role role, loom_us s_prf,
                           loom_us s_dec)
{
        if (!loom_harvest_checks(mode, role))
                return LOOM_HARVEST_INF;
        int use_prf = mode != LOOM_HARVEST_ADMIT_TPOT && role != LOOM_HARVEST_DECODE;
        int use_dec = mode != LOOM_HARVEST_ADMIT_TTFT && role != LOOM_HARVEST_PREFILL;
        loom_us s = LOOM_HARVEST_INF;
        if (use_prf && s_prf < s)
                s = s_prf;
        if (use_dec && s_dec < s)
                s = s_dec;
        return s;
}

int loom_harvest_admit(loom_us slack, loom_us work, uint32_t pages, uint32_t avail)
{
        return work <= slack && pages <= avail;
}
