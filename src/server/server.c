/*
 * server.c - loomd's lifecycle: configuration, opening the store and rebuilding the scheduler
 * from it, starting and stopping the threads.
 *
 * Restart recovery. The core is deterministic and a job's placement depends only on the order
 * of submits and exits, so the stored log is replayed into a fresh loom_sched; each replayed
 * submit must land on the stored job id, group and nodes, or loomd refuses to start
 * (LOOM_ECORRUPT) rather than run jobs somewhere their state is not. A "readmit" entry
 * (retry.c) replays as an exit and a submit on the logged profile, checked the same way. An
 * "observe" entry (learn.c, learned admission only) feeds the logged phase length to the
 * job's core admission, which re-plans its group exactly as it did, checked against the
 * logged outcome. A "regroup" entry (regroup.c, policy.regroup) hands the core the plan a
 * departure or first re-plan made live: replay never searches for one.
 * Entries written under another core arithmetic are re-derived instead (settle_arith).
 * Phase state is not replayed: every live job is put back waiting for the phase its row says
 * is next (loom_sched_resume), and leases that were active at the crash are marked lost, so
 * their workers are told to acquire again; a replica taking over keeps them instead, and their
 * phases run on under them. Iteration counts only move on a committed train
 * release, so no iteration is counted twice.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/spec.h"
#include "srv.h"

void loom_server_cfg_default(loom_server_cfg *c)
{
        memset(c, 0, sizeof *c);
        snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
        c->port = 7480;
        loom_cluster_cfg_default(&c->cluster);
        loom_policy_cfg_default(&c->policy);
        c->lease_timeout_s = 30;
        c->idle_timeout_s = 10;
        c->request_timeout_s = 10;
        c->max_conns = 8192;
        c->max_conns_per_addr = 2048;
        c->max_wait_s = 300;
        c->drift_window = 5;
        c->drift_threshold = 1.05;
        c->compact_min = 4096;
}

static int check_cfg(const loom_server_cfg *c, loom_err *e)
{
        if (!c->data_dir || !*c->data_dir)
                return loom_err_set(e, LOOM_EINVAL, "data_dir", "a data directory is required");
        if (c->port < 0 || c->port > 65535)
                return loom_err_set(e, LOOM_EINVAL, "listen", "port %d out of range", c->port);
        if (!(c->lease_timeout_s > 0 && c->lease_timeout_s <= 86400))
                return loom_err_set(e, LOOM_EINVAL, "lease_timeout", "must be in (0, 86400] s");
        if (!(c->idle_timeout_s >= 1 && c->idle_timeout_s <= 3600))
                return loom_err_set(e, LOOM_EINVAL, "idle_timeout", "must be in [1, 3600] s");
        if (!(c->max_wait_s >= 0 && c->max_wait_s <= 86400))
                return loom_err_set(e, LOOM_EINVAL, "max_wait", "must be in [0, 86400] s");
        if (c->drift_window < 0 || c->drift_window > SRV_DRIFT_MAX)
                return loom_err_set(e, LOOM_EINVAL, "drift_window", "must be in 0..%d iterations",
                                    SRV_DRIFT_MAX);
        if (!(c->drift_threshold >= 1.0 && c->drift_threshold <= 100))
                return loom_err_set(e, LOOM_EINVAL, "drift_threshold", "must be in [1, 100]");
        if (c->compact_min < 0)
                return loom_err_set(e, LOOM_EINVAL, "compact_min", "must be >= 0 entries");
        if (strlen(c->data_dir) >= 4000)
                return loom_err_set(e, LOOM_EINVAL, "data_dir", "path too long");
        return srv_auth_check_cfg(c, e);
}

static char *dump_sorted(json_t *j)
{
        char *t = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(j);
        return t;
}

/* Use the cluster and policy the store was created with; record them on first start. */
static int settle_cluster(loom_server *s, loom_err *e)
{
        char *stored = NULL;
        int rc = srv_store_meta_get(s->store, "cluster", &stored, e);
        if (rc)
                return rc;
        char *mine = dump_sorted(loom_cluster_cfg_to_json(&s->cfg.cluster));
        if (!mine) {
                free(stored);
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        }
        if (!stored) {
                rc = srv_store_meta_set(s->store, "cluster", mine, e);
        } else if (s->cfg.have_cluster && strcmp(stored, mine)) {
                rc = loom_err_set(e, LOOM_EINVAL, "cluster",
                                  "%s was created with another cluster; start without "
                                  "--cluster or use a new data directory",
                                  s->data_dir);
        } else {
                json_t *j = loom_json_parse(stored, strlen(stored), e);
                rc = j ? loom_cluster_cfg_from_json(j, "cluster", NULL, 0, &s->cfg.cluster, e)
                       : LOOM_ECORRUPT;
                json_decref(j);
        }
        free(stored);
        free(mine);
        if (rc)
                return rc;
        /* The policy is not stored: placement only replays exactly under the same policy, so
         * it is part of what --cluster fixes; record a fingerprint and compare. */
        char base[192], adm[128] = "", plx[128] = "", pol[448], worst[320], legacy[320];
        char unplanned[448], ungrown[448];
        const loom_policy_cfg *p = &s->cfg.policy;
        snprintf(base, sizeof base, "%d %.17g %lld %d %.17g %d %d %llu", p->max_group_size,
                 p->train_scaling_efficiency, (long long)p->warm_switch, p->tail_migration,
                 p->tail_threshold, p->tail_keep_gpus, (int)p->placer, (unsigned long long)p->seed);
        /* Learned admission re-plans groups from the logged observations, which replay only
         * under the same mode and learn_after; worst keeps the fingerprint stores always had. */
        if (p->admission != LOOM_ADMIT_WORST)
                snprintf(adm, sizeof adm, " admission=%s learn_after=%d%s%s%s",
                         loom_admission_name(p->admission), p->learn_after,
                         /* the normal bound, the fleet prior and moves re-plan and re-admit
                          * differently from the same observations */
                         p->learn_bound == LOOM_LEARN_NORMAL ? " learn_bound=normal" : "",
                         p->move_lone && p->placer == LOOM_PLACER_LOOM ? " move_lone=on" : "",
                         p->move_lone && p->move_members && p->placer == LOOM_PLACER_LOOM
                             ? " move_members=on"
                             : "");
        /* Regrouping (policy.regroup) moves members the logged plans move. A store written
         * without it has no plans in its log and, since replay never searches for one
         * (regroup.c), replays the same with it on: it may switch it on (unplanned below). */
        bool regroup = adm[0] && p->regroup && p->placer == LOOM_PLACER_LOOM;
        int adm_unplanned = (int)strlen(adm);
        if (regroup)
                snprintf(adm + strlen(adm), sizeof adm - strlen(adm), " regroup=on");
        /* The plex placer's shift bound, weights and duty bound decide where it places (the
         * dispatch order and preemption margin only decide when phases run, which is not
         * replayed, so they may change between starts). */
        if (p->placer == LOOM_PLACER_PLEX)
                snprintf(plx, sizeof plx, " plex=%.17g,%.17g,%.17g,%.17g", p->plex_alpha,
                         p->plex_w1, p->plex_w2, p->plex_duty_max);
        /* Multi-rate placement decides rates (and re-rates) on every submit and exit; a store
         * from before it, or written with it off, has no suffix: it replays single-rate. */
        if (p->multirate && p->placer == LOOM_PLACER_LOOM)
                snprintf(base + strlen(base), sizeof base - strlen(base), " multirate=on");
        /* Right-sized training pools change how many training nodes a new group gets. */
        if (p->train_rightsize && p->placer == LOOM_PLACER_LOOM)
                snprintf(base + strlen(base), sizeof base - strlen(base), " train_rightsize=on");
        /* Colocated lone members change what a new group provisions and what joining costs. */
        if (p->colocate_lone && p->placer == LOOM_PLACER_LOOM)
                snprintf(base + strlen(base), sizeof base - strlen(base), " colocate_lone=on");
        /* Rollouts planned on their heads (policy.plan_tails) place jobs that have one
         * differently. Stores from before it replay with it on (no job had a head then, so
         * nothing they placed changes); one written with it off says so. */
        if (!p->plan_tails && p->placer == LOOM_PLACER_LOOM)
                snprintf(base + strlen(base), sizeof base - strlen(base), " plan_tails=off");
        /* Where wide rate searches begin changes multi-rate placements past it; the default
         * (0 or LOOM_RATE_SEARCH_OPEN) adds nothing, as stores before the setting had it. */
        int wide = loom_policy_rate_search_open(p);
        if (wide != LOOM_RATE_SEARCH_OPEN && p->multirate && p->placer == LOOM_PLACER_LOOM)
                snprintf(base + strlen(base), sizeof base - strlen(base), " rate_search_open=%d",
                         wide);
        /* A cap on what an SLO may cost (policy.slo_cap) places the jobs it relaxes lone; off
         * (the default, and every store before it) adds nothing. */
        if (p->slo_cap && p->placer == LOOM_PLACER_LOOM)
                snprintf(base + strlen(base), sizeof base - strlen(base), " slo_premium=%.17g",
                         p->slo_premium);
        /* Training pools that grow (policy.pool_grow) place joins on grown pools. A store
         * written without it has no such placement in its log, and a replay keeps each logged
         * placement this core could have made (loom_sched_submit_as): it may switch it on. */
        bool grow = p->pool_grow && p->placer == LOOM_PLACER_LOOM;
        snprintf(ungrown, sizeof ungrown, "%s%s%s", base, adm, plx);
        if (grow)
                snprintf(base + strlen(base), sizeof base - strlen(base), " pool_grow=on");
        snprintf(pol, sizeof pol, "%s%s%s", base, adm, plx);
        snprintf(unplanned, sizeof unplanned, "%s%.*s%s", base, adm_unplanned, adm, plx);
        snprintf(legacy, sizeof legacy, "%s%s", base, adm); /* a plex store before plx */
        snprintf(worst, sizeof worst, "%s%s", base, plx);
        char *old = NULL;
        rc = srv_store_meta_get(s->store, "policy", &old, e);
        if (rc)
                return rc;
        /* Upgrades: a plex store from before plx takes the current settings. A store written
         * under worst may move to a learned mode: worst logs no observations and, without
         * history, a learned mode places exactly as worst does, so its log replays the same;
         * from then on it is a learned store (and going back is refused). */
        bool from_worst = adm[0] && old && (!strcmp(old, worst) || (plx[0] && !strcmp(old, base)));
        bool to_regroup = regroup && old && !strcmp(old, unplanned);
        bool to_grow = grow && old && !strcmp(old, ungrown);
        if (!old || from_worst || to_regroup || to_grow || (plx[0] && !strcmp(old, legacy)))
                rc = srv_store_meta_set(s->store, "policy", pol, e);
        else if (strcmp(old, pol))
                rc = loom_err_set(e, LOOM_EINVAL, "policy",
                                  "%s was created with another policy (%s)", s->data_dir, old);
        if (!rc && from_worst)
                srv_log(s, "%s: admission switched from worst to %s (learn_after %d)", s->data_dir,
                        loom_admission_name(p->admission), p->learn_after);
        if (!rc && to_regroup)
                srv_log(s, "%s: regrouping at departures (policy.regroup) switched on",
                        s->data_dir);
        if (!rc && to_grow)
                srv_log(s, "%s: training pools that grow (policy.pool_grow) switched on",
                        s->data_dir);
        free(old);
        return rc;
}

static void drain_discard(loom_sched *sc)
{
        loom_action a;
        while (loom_sched_next_action(sc, &a))
                ;
}

/* Store versioning. The log is replayed by this loomd's core; entries written under another
 * core arithmetic (meta "arith", "1" in stores older than it) cannot be expected to come out
 * bit for bit: every entry up to the last one is marked to re-derive (meta "lenient_through")
 * and replay takes what this core decides for them, while later entries are checked as
 * always. Because the core is deterministic every later start re-derives the same. */
static int add_job(void *arg, srv_job *j)
{
        return srv_job_add(arg, j);
}

static int settle_arith(loom_server *s, char *was, size_t len, loom_err *e)
{
        char *arith = NULL, *through = NULL, mine[16];
        snprintf(mine, sizeof mine, "%d", LOOM_SCHED_ARITH);
        int rc = srv_store_meta_get(s->store, "arith", &arith, e);
        if (!rc)
                rc = srv_store_meta_get(s->store, "lenient_through", &through, e);
        s->lenient_through = through ? strtoll(through, NULL, 10) : 0;
        snprintf(was, len, "%s", arith ? arith : "1");
        int64_t last = 0;
        if (!rc && strcmp(was, mine))
                rc = srv_store_log_last(s->store, &last, e);
        if (!rc && strcmp(was, mine) && last > s->lenient_through)
                s->lenient_through = last;
        /* An empty log (a new data directory) has nothing to re-derive: it is simply this
         * arithmetic's from the start. */
        if (!rc && strcmp(was, mine) && last == 0 && s->lenient_through == 0)
                rc = srv_store_meta_set(s->store, "arith", mine, e);
        if (!rc && (!strcmp(was, mine) || (last == 0 && s->lenient_through == 0)))
                was[0] = '\0'; /* nothing to re-derive */
        free(arith);
        free(through);
        return rc;
}

/* After a replay that re-derived: say so, and record it with the new arithmetic. */
static int record_rederived(loom_server *s, const char *was, loom_err *e)
{
        char mine[16], through[32], note[256];
        snprintf(mine, sizeof mine, "%d", LOOM_SCHED_ARITH);
        snprintf(through, sizeof through, "%lld", (long long)s->lenient_through);
        snprintf(note, sizeof note,
                 "log entries 1..%lld written under core arithmetic %s re-derived under %s at %lld "
                 "us: %d placements and %d learned profiles came out differently",
                 (long long)s->lenient_through, was, mine, (long long)srv_now_wall(),
                 s->rederived_placements, s->rederived_profiles);
        int rc = srv_store_meta_set(s->store, "arith", mine, e);
        if (!rc)
                rc = srv_store_meta_set(s->store, "lenient_through", through, e);
        if (!rc)
                rc = srv_store_meta_set(s->store, "rederived", note, e);
        if (!rc)
                srv_log(s, "%s: %s", s->data_dir, note);
        return rc;
}

/* Replay came out otherwise than recorded somewhere: say so once, and keep it in the meta table
 * (replay_divergences) for operators and /v1/cluster. */
static int record_diverged(loom_server *s, loom_err *e)
{
        char note[256];
        snprintf(note, sizeof note,
                 "replay at %lld us: %d placements came out otherwise than recorded (%d kept as "
                 "recorded, %d placed by this core), %d learned profiles came out otherwise, %d "
                 "regrouping plans were not applied (see the log lines above)",
                 (long long)srv_now_wall(), s->diverged_placements, s->diverged_kept,
                 s->diverged_placements - s->diverged_kept, s->diverged_profiles,
                 s->diverged_plans);
        srv_log(s, "%s: %s", s->data_dir, note);
        return srv_store_meta_set(s->store, "replay_divergences", note, e);
}

/* A replayed submit's recorded placement could not be applied: the job's row takes this core's. */
static int take_placement(loom_server *s, srv_job *j, const loom_decision *d, loom_err *e)
{
        json_t *dec = loom_decision_to_json(d, j->name);
        if (!dec)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        json_decref(j->decision);
        j->decision = dec;
        return srv_store_job_set_decision(s->store, j, e);
}

int srv_replay_alloc(srv_replay *rp)
{
        size_t n = rp->s->n_jobs + 1;
        rp->core = calloc(n, sizeof *rp->core);
        rp->done = calloc(n, sizeof *rp->done);
        rp->base = calloc(n, sizeof *rp->base);
        return rp->core && rp->done && rp->base ? 0 : LOOM_ENOMEM;
}

void srv_replay_free(srv_replay *rp)
{
        free(rp->core);
        free(rp->done);
        free(rp->base);
        rp->core = NULL;
        rp->done = rp->base = NULL;
}

void srv_replay_counts(srv_replay *rp)
{
        /* A log written before "iter" entries leaves the cores' counts at 0: from now on they
         * count from the jobs' rows (what a new log's entries already set them to). */
        loom_server *s = rp->s;
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (srv_job_live(j->state) && rp->core[i] && j->done > rp->done[i] &&
                    j->done < j->target)
                        loom_sched_job_iterations(s->sched, rp->core[i], j->done - rp->base[i]);
        }
}

int srv_replay_one(void *arg, int64_t seq, const char *kind, uint32_t id, const char *reason,
                   int64_t at)
{
        srv_replay *rp = arg;
        loom_server *s = rp->s;
        srv_job *j = srv_job_get(s, id);
        rp->rows++;
        s->replay_lenient = seq <= s->lenient_through;
        s->replay_seq = seq;
        if (!j)
                return loom_err_set(rp->e, LOOM_ECORRUPT, "store", "log names unknown job %u", id);
        if (!strcmp(kind, "exit")) {
                loom_exit x = LOOM_EXIT_FAILED;
                if (reason && !strcmp(reason, loom_exit_name(LOOM_EXIT_FINISHED)))
                        x = LOOM_EXIT_FINISHED;
                else if (reason && !strcmp(reason, loom_exit_name(LOOM_EXIT_CANCELLED)))
                        x = LOOM_EXIT_CANCELLED;
                int rc = loom_sched_job_exit(s->sched, at, rp->core[id - 1], x);
                drain_discard(s->sched);
                return rc ? loom_err_set(rp->e, LOOM_ECORRUPT, "store",
                                         "replay: exit of job %u refused (%s)", id,
                                         loom_strerror(rc))
                          : 0;
        }
        if (!strcmp(kind, "readmit")) { /* the new admission counts from its entry's count */
                int rc = srv_replay_readmit(s, j, &rp->core[id - 1], &rp->done[id - 1], reason, at,
                                            rp->e);
                rp->base[id - 1] = rp->done[id - 1];
                return rc;
        }
        if (!strcmp(kind, "iter")) { /* the job's count after a training: its core's share */
                char *end;
                long long done = reason ? strtoll(reason, &end, 10) : -1;
                int rc = !reason || *end || done < rp->base[id - 1] || !rp->core[id - 1]
                             ? LOOM_EINVAL
                             : loom_sched_job_iterations(s->sched, rp->core[id - 1],
                                                         done - rp->base[id - 1]);
                if (!rc)
                        rp->done[id - 1] = done;
                return rc ? loom_err_set(rp->e, LOOM_ECORRUPT, "store",
                                         "replay: iteration entry of job %u (%s) refused (%s)", id,
                                         reason ? reason : "no count", loom_strerror(rc))
                          : 0;
        }
        if (!strcmp(kind, "observe")) {
                int rc = srv_replay_observe(s, j, rp->core[id - 1], reason, rp->e);
                drain_discard(s->sched);
                return rc;
        }
        if (!strcmp(kind, "regroup"))
                return srv_replay_regroup(s, rp->core, s->n_jobs, reason, rp->e);
        /* A submit's reason is the core id it got (none in stores older than re-admission,
         * where the two ids were the same). The recorded placement is what the job was given:
         * where this core would place it otherwise it is kept (loom_sched_submit_as) and the
         * divergence reported, so one entry cannot stop every job from coming back. */
        uint32_t want = reason ? (uint32_t)strtoul(reason, NULL, 10) : id;
        if (rp->core[id - 1] != 0)
                return loom_err_set(rp->e, LOOM_ECORRUPT, "store", "log submits job %u twice", id);
        loom_job_spec spec = j->spec;
        spec.iterations = srv_job_left(j, 0);
        loom_decision d, w;
        srv_decision_recorded(s, j->decision, &w);
        loom_decision_init(&d, false);
        loom_job_id got = 0;
        loom_err e2;
        loom_err_clear(&e2);
        int rc = loom_sched_submit_as(s->sched, at, &spec, &w, &d, &got, &e2);
        srv_replay_settle(s, j, rc, &d, &e2);
        if (rc == LOOM_SUBMIT_SEARCHED)
                rc = take_placement(s, j, &d, rp->e);
        loom_decision_free(&d);
        drain_discard(s->sched);
        if (rc < 0 || got != want)
                return rp->e->msg[0]
                           ? rc
                           : loom_err_set(rp->e, LOOM_ECORRUPT, "store",
                                          "replay could not place job %u (%s)", id,
                                          rc < 0 ? (e2.msg[0] ? e2.msg : loom_strerror(rc))
                                                 : "the core ids went apart");
        rp->core[id - 1] = got;
        return srv_core_map(s, got, id) ? loom_err_set(rp->e, LOOM_ENOMEM, "", "out of memory") : 0;
}

/* Every job's admission state from its row, and the replayed core ids must agree with it. */
static int settle_admissions(loom_server *s, const uint32_t *core, loom_err *e)
{
        for (uint32_t i = 0; i < s->n_jobs; i++)
                srv_retry_init(s->jobs[i]);
        int rc = srv_store_retry_load(s->store, s, e);
        for (uint32_t i = 0; !rc && i < s->n_jobs; i++)
                if (s->jobs[i]->retry.core != core[i])
                        rc = loom_err_set(e, LOOM_ECORRUPT, "store",
                                          "job %u: replay ends at core job %u, its row says %u",
                                          i + 1, core[i], s->jobs[i]->retry.core);
        return rc;
}

/* The jobs, the core and the admissions as the store has them: rows loaded, log replayed. */
static int replay_store(loom_server *s, char *was, size_t len, loom_err *e)
{
        s->diverged_placements = s->diverged_kept = s->diverged_profiles = 0;
        s->diverged_plans = 0;
        int rc = settle_arith(s, was, len, e);
        if (!rc)
                rc = srv_store_load_jobs(s->store, add_job, s, e);
        srv_replay rp = {.s = s, .e = e};
        if (!rc && srv_replay_alloc(&rp))
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        /* regrouping plans come from the log's "regroup" entries, never from a search
         * (regroup.c); the core searches again once live */
        loom_sched_replaying(s->sched, true);
        if (!rc)
                rc = srv_store_each_log(s->store, srv_replay_one, &rp, e);
        loom_sched_replaying(s->sched, false);
        if (!rc)
                rc = settle_admissions(s, rp.core, e);
        if (!rc)
                srv_replay_counts(&rp);
        s->compact_rows = rp.rows;
        srv_replay_free(&rp);
        if (!rc)
                rc = srv_store_lease_next_id(s->store, &s->next_lease_id, e);
        return rc;
}

/* The leases the store holds as active, when they are kept (docs/ha.md): a replica taking over,
 * or memory rebuilt after a store failure. */
typedef struct {
        int64_t id, granted;
        uint32_t job;
        loom_phase phase;
} held_lease;

typedef struct {
        held_lease *l;
        size_t n, cap;
        bool failed; /* out of memory: what was not kept ends lost, as after a restart */
} held_leases;

static void collect_lease(void *arg, int64_t id, uint32_t job, loom_phase phase, int64_t granted)
{
        held_leases *h = arg;
        if (h->n == h->cap) {
                size_t cap = h->cap ? h->cap * 2 : 16;
                held_lease *g = realloc(h->l, cap * sizeof *g);
                if (!g) {
                        h->failed = true;
                        return;
                }
                h->l = g;
                h->cap = cap;
        }
        h->l[h->n++] = (held_lease){id, granted, job, phase};
}

static const held_lease *lease_of(const held_leases *h, const srv_job *j)
{
        for (size_t k = 0; h && k < h->n; k++)
                if (h->l[k].job == j->id && h->l[k].phase == j->next)
                        return &h->l[k];
        return NULL;
}

/* Put every live job back waiting for the phase its row says is next, all at once
 * (loom_sched_resume). A job whose lease is kept (held: NULL after a restart, whose leases are
 * lost) runs that phase again at once, under the same lease, so its worker's release lands
 * here and the phase does not run twice. Writes nothing. */
static int resume_jobs(loom_server *s, const held_leases *held, uint32_t *live, loom_err *e)
{
        loom_us now = srv_now_mono();
        loom_resume *r = calloc(s->n_jobs ? s->n_jobs : 1, sizeof *r);
        if (!r)
                return loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        size_t n = 0;
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                srv_job *j = s->jobs[i];
                if (!srv_job_live(j->state))
                        continue;
                j->permit = false; /* one the replay's dispatch handed out is void */
                r[n++] = (loom_resume){.job = j->retry.core,
                                       .phase = j->next,
                                       .call = j->next_call,
                                       .running = lease_of(held, j) != NULL};
        }
        *live = (uint32_t)n;
        int rc = loom_sched_resume(s->sched, srv_now_wall(), r, n);
        for (size_t k = 0; rc < 0 && k < n; k++)
                if (loom_sched_resume(s->sched, srv_now_wall(), &r[k], 1) < 0) {
                        srv_job *j = srv_job_by_core(s, r[k].job);
                        rc =
                            loom_err_set(e, LOOM_ECORRUPT, "store",
                                         "cannot resume job %u at %s (call %d): %s", j ? j->id : 0,
                                         loom_phase_name(r[k].phase), r[k].call, loom_strerror(rc));
                }
        free(r);
        if (rc < 0)
                return rc;
        srv_apply_actions(s, now);
        for (size_t k = 0; held && k < held->n; k++) {
                const held_lease *l = &held->l[k];
                srv_job *j = srv_job_get(s, l->job);
                if (!j || !srv_job_live(j->state) || !j->permit || j->permit_phase != l->phase)
                        continue; /* its worker is told the lease is gone (410), acquires again */
                srv_lease_from_permit(s, j, l->id, now, l->granted);
                loom_sched_phase_started(s->sched, srv_now_wall(), j->retry.core, l->phase);
        }
        srv_apply_actions(s, now);
        return 0;
}

/* A replica taking over keeps the leases in flight; the ones it could not keep (their job moved
 * on, or their nodes went to another running phase) end lost, as after a restart. */
static int end_unkept(loom_server *s, const held_leases *h, loom_err *e)
{
        int rc = h->failed ? srv_store_leases_lose_active(s->store, srv_now_wall(), e) : 0;
        for (size_t k = 0; !rc && !h->failed && k < h->n; k++) {
                srv_job *j = srv_job_get(s, h->l[k].job);
                if (!j || !j->has_lease || j->lease.id != h->l[k].id)
                        rc = srv_store_lease_end(s->store, h->l[k].id, "lost", srv_now_wall(), e);
        }
        return rc;
}

/* Rebuild the scheduler from the store and put live jobs back where their rows say. After a
 * restart the leases in flight are lost (their phases run again); a replica taking over keeps
 * them, so a worker's release reaches the new leader and no phase runs twice (docs/ha.md). */
static int recover(loom_server *s, loom_err *e)
{
        char was[16];
        held_leases h = {0};
        int rc = replay_store(s, was, sizeof was, e);
        s->compact_at_start = s->cfg.compact_min && s->compact_rows >= (uint64_t)s->cfg.compact_min;
        if (!rc)
                rc = srv_store_begin(s->store, e);
        if (!rc && !s->cfg.replica_url)
                rc = srv_store_leases_lose_active(s->store, srv_now_wall(), e);
        if (!rc && s->cfg.replica_url)
                rc = srv_store_leases_active(s->store, collect_lease, &h, e);
        if (!rc && was[0])
                rc = record_rederived(s, was, e);
        if (!rc && (s->diverged_placements || s->diverged_profiles || s->diverged_plans))
                rc = record_diverged(s, e);
        uint32_t live = 0;
        if (!rc)
                rc = resume_jobs(s, s->cfg.replica_url && !h.failed ? &h : NULL, &live, e);
        if (!rc && s->cfg.replica_url)
                rc = end_unkept(s, &h, e);
        free(h.l);
        if (rc) {
                srv_store_rollback(s->store);
                return rc;
        }
        rc = srv_store_commit(s->store, e);
        if (!rc && s->n_jobs)
                srv_log(s, "recovered %u jobs (%u live) from %s", s->n_jobs, live, s->data_dir);
        return rc;
}

static void drop_jobs(srv_job **jobs, uint32_t n, uint32_t *by_core, loom_sched *sched)
{
        for (uint32_t i = 0; i < n; i++) {
                json_decref(jobs[i]->decision);
                free(jobs[i]);
        }
        free(jobs);
        free(by_core);
        loom_sched_free(sched);
}

int srv_rebuild(loom_server *s, loom_err *e)
{
        srv_job **jobs = s->jobs;
        uint32_t n_jobs = s->n_jobs, n_core = s->n_core, *by_core = s->by_core;
        size_t cap_jobs = s->cap_jobs, cap_core = s->cap_core;
        loom_sched *sched = s->sched;
        int64_t next_lease = s->next_lease_id;
        uint64_t compact_rows = s->compact_rows;
        s->jobs = NULL;
        s->by_core = NULL;
        s->n_jobs = s->n_core = 0;
        s->cap_jobs = s->cap_core = 0;
        s->sched = loom_sched_new(&s->cfg.cluster, &s->cfg.policy, e);
        char was[16];
        int rc = s->sched ? replay_store(s, was, sizeof was, e) : LOOM_ENOMEM;
        uint32_t live = 0;
        held_leases h = {0}; /* the leases in flight stay theirs: nothing is written here */
        if (!rc)
                rc = srv_store_leases_active(s->store, collect_lease, &h, e);
        if (!rc)
                rc = resume_jobs(s, h.failed ? NULL : &h, &live, e);
        free(h.l);
        if (rc) { /* keep what was, for the caller to stop on */
                drop_jobs(s->jobs, s->n_jobs, s->by_core, s->sched);
                s->jobs = jobs;
                s->n_jobs = n_jobs;
                s->cap_jobs = cap_jobs;
                s->by_core = by_core;
                s->n_core = n_core;
                s->cap_core = cap_core;
                s->sched = sched;
                s->next_lease_id = next_lease;
                s->compact_rows = compact_rows;
                return rc;
        }
        drop_jobs(jobs, n_jobs, by_core, sched);
        if (next_lease > s->next_lease_id)
                s->next_lease_id = next_lease; /* never hand out an id twice */
        s->next_check = srv_now_mono();
        srv_log(s, "rebuilt from the store: %u jobs (%u live)", s->n_jobs, live);
        return 0;
}

loom_server *loom_server_new(const loom_server_cfg *cfg, loom_err *e)
{
        loom_err_clear(e);
        if (check_cfg(cfg, e))
                return NULL;
        loom_server *s = calloc(1, sizeof *s);
        if (!s) {
                loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                return NULL;
        }
        s->cfg = *cfg;
        snprintf(s->data_dir, sizeof s->data_dir, "%s", cfg->data_dir);
        s->cfg.data_dir = s->data_dir;
        s->listen_fd = -1;
        s->next_lease_id = 1;
        s->start_mono = srv_now_mono();
        s->next_check = s->start_mono + 3600 * LOOM_US_PER_S;
        srv_metrics_init(&s->m);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, &ca);
        pthread_condattr_destroy(&ca);

        int rc = srv_store_open(&s->store, s->data_dir, cfg->sync_full, e);
        if (!rc && cfg->replicate) { /* a replica's leader: every commit through the log first */
                rc = srv_store_replicate(s->store, cfg->replicate, cfg->replicate_arg, e);
                srv_store_snapshots(s->store, cfg->snapshot, cfg->replicate_arg,
                                    cfg->snapshot_every, cfg->snapshot_due);
        }
        if (!rc)
                rc = srv_auth_open(s, e);
        if (!rc)
                rc = settle_cluster(s, e);
        if (!rc) {
                s->sched = loom_sched_new(&s->cfg.cluster, &s->cfg.policy, e);
                rc = s->sched ? 0 : LOOM_EINVAL;
        }
        if (!rc)
                rc = recover(s, e);
        if (!rc)
                rc = srv_http_bind(s, e);
        if (rc) {
                loom_server_free(s);
                return NULL;
        }
        return s;
}

int loom_server_port(const loom_server *s)
{
        return s->port;
}

int loom_server_start(loom_server *s, loom_err *e)
{
        if (s->started)
                return loom_err_set(e, LOOM_ESTATE, "", "server already started");
        if (pthread_create(&s->thread, NULL, srv_engine_main, s))
                return loom_err_set(e, LOOM_ENOMEM, "", "cannot start the scheduler thread");
        s->started = true;
        int rc = srv_http_start(s, e);
        if (rc)
                loom_server_stop(s);
        else
                srv_notify(s, "READY"); /* the store replayed, the socket answers */
        return rc;
}

void loom_server_stop(loom_server *s)
{
        if (!s || s->stopped)
                return;
        s->stopped = true;
        srv_notify(s, "STOPPING");
        srv_http_quiesce(s);
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (s->started)
                pthread_join(s->thread, NULL);
        srv_http_stop(s);
        srv_store_close(s->store);
        s->store = NULL;
}

bool loom_server_failed(const loom_server *s)
{
        return s->store_failed;
}

void loom_server_free(loom_server *s)
{
        if (!s)
                return;
        if (s->started)
                loom_server_stop(s);
        srv_http_stop(s);
        srv_store_close(s->store);
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                json_decref(s->jobs[i]->decision);
                free(s->jobs[i]);
        }
        free(s->jobs);
        free(s->by_core);
        srv_quota_free(s);
        srv_auth_close(s);
        loom_sched_free(s->sched);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
}
