/*
 * jobs.c - the job table and the event log line: the bottom of src/server, beside the store and
 * the clock (docs/architecture.md). Every layer above reads jobs and logs through these; they
 * call nothing above them.
 */
#include <stdarg.h>
#include <stdio.h>

#include "srv.h"

const char *srv_job_state_name(int s)
{
        static const char *const names[] = {"queued", "running", "finished", "failed", "cancelled"};
        return s >= 0 && s <= SJ_CANCELLED ? names[s] : "?";
}

void srv_log(loom_server *s, const char *fmt, ...)
{
        if (!s->cfg.log)
                return;
        char line[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof line, fmt, ap);
        va_end(ap);
        s->cfg.log(s->cfg.log_arg, line);
}

srv_job *srv_job_get(loom_server *s, uint32_t id)
{
        return id >= 1 && id <= s->n_jobs ? s->jobs[id - 1] : NULL;
}

/* The job whose admission is core job `core` now (the map retry.c keeps, srv_core_map). */
srv_job *srv_job_by_core(loom_server *s, uint32_t core)
{
        if (core == 0 || core > s->n_core)
                return NULL;
        srv_job *j = srv_job_get(s, s->by_core[core - 1]);
        return j && j->retry.core == core ? j : NULL;
}

double srv_job_cost(const loom_server *s, const srv_job *j, int64_t wall, double *per_hour)
{
        const loom_cluster_cfg *c = &s->cfg.cluster;
        double ph = j->spec.rollout_gpus * c->gpu[0].price_per_hour +
                    j->spec.train_gpus * c->gpu[1].price_per_hour;
        if (per_hour)
                *per_hour = ph;
        double h = (double)((j->ended_wall ? j->ended_wall : wall) - j->submitted_wall) / 3.6e9;
        return ph * (h > 0 ? h : 0);
}
