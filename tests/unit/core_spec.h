/* core_spec.h - the job spec the core's unit tests build: one node per pool, phases in
 * seconds, the same working set on both pools. */
#ifndef LOOM_TEST_CORE_SPEC_H
#define LOOM_TEST_CORE_SPEC_H

#include <stdio.h>

#include "loom/job.h"

static inline loom_job_spec core_spec(const char *id, double roll, double train, double slo,
                                      uint64_t mem_rollout, uint64_t mem_train)
{
        loom_job_spec s;
        loom_job_spec_init(&s);
        snprintf(s.id, sizeof s.id, "%s", id);
        s.rollout_gpus = 8;
        s.train_gpus = 8;
        s.t_roll = loom_us_from_s(roll);
        s.t_train = loom_us_from_s(train);
        s.slo = slo;
        s.mem_rollout = mem_rollout;
        s.mem_train = mem_train;
        return s;
}

#endif
