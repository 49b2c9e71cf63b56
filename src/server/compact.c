/*
 * compact.c - store compaction: keep loomd's log from growing with every iteration.
 *
 * Under learned admission every finished phase adds an "observe" entry to the log, and restart
 * replays the whole log (server.c). What the core keeps of a job's observations is a window:
 * the last LOOM_LEARN_WINDOW (W) phase lengths of each kind, in a ring indexed by their count.
 * So, between two placement events (submit, exit, readmit: what later placements depend on),
 * the observations of a job older than the last W before its last training observation there
 * leave no trace once the W after them have overwritten the ring. Compaction drops them, a
 * multiple of W per job, phase and stretch, so that every ring slot holds what it held; the
 * entries kept get the outcomes this shorter history gives (a re-plan happens a little later,
 * or not at all, between the same two placement events).
 *
 * Nothing is taken on trust: the shorter log is replayed into a fresh core (a shadow server:
 * copies of the jobs, its own loom_sched) with the same checks as a restart, and compaction
 * happens only if every live job ends in the same group on the same nodes with the same
 * planned and learned profile, every group with the same members, nodes and cycle, and every
 * job's admission at the same core id. Then one SQLite transaction deletes the dropped entries,
 * rewrites the changed outcomes and records, per job, the re-plans that the dropped entries
 * counted (jobs.replans_compacted), so the API's counts do not move. A crash before the commit
 * leaves the old log, after it the new one; either replays.
 *
 * The log then holds, per live job, fewer than 2W observations of each kind per stretch
 * between placement events, whatever its age: restart time follows the number of jobs and
 * placement events, not of iterations (bench/loomd_learn.sh).
 *
 * Regrouping plans ("regroup" entries, regroup.c) are kept as they are: the shadow, like every
 * replay, applies them and never searches. Each bounds a stretch as a placement event does,
 * and a member it moves counts the training ends it waits for its place (it drops the plan
 * after LOOM_REGROUP_TRIES): so the first LOOM_REGROUP_TRIES + 1 training observations of such
 * a member after the plan, until its next placement event or plan, are never dropped; the
 * ones after them are, W at a time, as above. The shadow's plans are checked with the rest.
 */
#include <stdlib.h>
#include <string.h>

#include "srv.h"

#define W LOOM_LEARN_WINDOW

typedef struct rewrites {
        int64_t *seq;
        char **text;
        size_t n, cap, cap_text;
} rewrites;

static int collect(void *arg, int64_t seq, const char *text)
{
        rewrites *rw = arg;
        if (loom_reserve(&rw->seq, &rw->cap, rw->n + 1, sizeof *rw->seq, 64) ||
            loom_reserve(&rw->text, &rw->cap_text, rw->n + 1, sizeof *rw->text, 64))
                return LOOM_ENOMEM;
        if (!(rw->text[rw->n] = strdup(text)))
                return LOOM_ENOMEM;
        rw->seq[rw->n++] = seq;
        return 0;
}

static void rewrites_free(rewrites *rw)
{
        for (size_t i = 0; i < rw->n; i++)
                free(rw->text[i]);
        free(rw->text);
        free(rw->seq);
}

enum { PLACEMENT = -1, ITER = -2 };

/* Per row: PLACEMENT (submit, exit, readmit: what later placements depend on), ITER (a job's
 * iteration count), else an observation's phase (0 rollout, 1 train). */
static int *row_phases(const srv_log_row *rows, size_t n)
{
        int *ph = malloc((n ? n : 1) * sizeof *ph);
        for (size_t i = 0; ph && i < n; i++) {
                srv_observe_rec o;
                loom_err e;
                ph[i] = !strcmp(rows[i].kind, "iter") ? ITER : PLACEMENT;
                if (!strcmp(rows[i].kind, "observe") && !srv_observe_decode(rows[i].reason, &o, &e))
                        ph[i] = o.phase == LOOM_PHASE_TRAIN ? 1 : 0;
        }
        return ph;
}

/* An "iter" entry sets its job's count; one that the job's next "iter" entry overwrites before
 * any kept entry other than other jobs' counts reads the core is dropped (scanning backwards,
 * seen[job] == the current stretch means a later count of the job follows in it). */
static size_t fold_iters(const srv_log_row *rows, const int *ph, size_t n, uint32_t njobs,
                         bool *drop, uint64_t *seen)
{
        size_t total = 0;
        uint64_t stretch = 1;
        memset(seen, 0, (njobs + 1) * sizeof *seen);
        for (size_t i = n; i-- > 0;) {
                if (drop[i])
                        continue;
                if (ph[i] != ITER || rows[i].job < 1 || rows[i].job > njobs) {
                        stretch++; /* an entry that reads the counts */
                } else if (seen[rows[i].job] == stretch) {
                        drop[i] = true;
                        total++;
                } else {
                        seen[rows[i].job] = stretch;
                }
        }
        return total;
}

/* The training observations a regrouping plan's moving members count (see above): keep[i]. */
static void keep_planned(const srv_log_row *rows, const int *ph, size_t n, uint32_t njobs,
                         bool *keep)
{
        int *left = calloc(njobs + 1, sizeof *left);
        for (size_t i = 0; left && i < n; i++) {
                uint32_t job = rows[i].job;
                if (ph[i] == 1 && job <= njobs && left[job] > 0) {
                        keep[i] = true;
                        left[job]--;
                } else if (ph[i] == PLACEMENT && job <= njobs && strcmp(rows[i].kind, "regroup")) {
                        left[job] = 0; /* its exit or new admission ends any plan of its */
                } else if (ph[i] == PLACEMENT) {
                        loom_regroup_plan p;
                        uint32_t jobs[LOOM_REGROUP_MAX];
                        loom_err e;
                        if (srv_regroup_decode(rows[i].reason, &p, jobs, &e))
                                continue;
                        for (int k = 0; k < p.n; k++)
                                if (jobs[k] <= njobs)
                                        left[jobs[k]] = p.m[k].moves ? LOOM_REGROUP_TRIES + 1 : 0;
                }
        }
        if (!left) /* no memory: keep every training observation that might count */
                for (size_t i = 0; i < n; i++)
                        keep[i] = ph[i] == 1;
        free(left);
}

/* Mark in drop[] the observations of job `job` in rows [a, b) that the ring forgets; none of
 * those keep[] holds, which come first among its training observations there. */
static size_t mark_job(const srv_log_row *rows, const int *ph, const bool *keep, size_t a, size_t b,
                       uint32_t job, bool *drop)
{
        size_t last_train = b, count[2] = {0, 0}, marked = 0;
        for (size_t i = a; i < b; i++)
                if (ph[i] == 1 && rows[i].job == job)
                        last_train = i;
        if (last_train == b)
                return 0;
        for (size_t i = a; i <= last_train; i++)
                if (ph[i] >= 0 && rows[i].job == job && !keep[i])
                        count[ph[i]]++;
        for (int p = 0; p < 2; p++) {
                size_t k = count[p] > W ? (count[p] - W) / W * W : 0;
                for (size_t i = a; i <= last_train && k; i++)
                        if (ph[i] == p && rows[i].job == job && !drop[i] && !keep[i]) {
                                drop[i] = true;
                                k--;
                                marked++;
                        }
        }
        return marked;
}

/* Which observations to drop; returns how many. */
static size_t choose(const srv_log_row *rows, const int *ph, const bool *keep, size_t n,
                     uint32_t njobs, bool *drop, bool *seen)
{
        size_t total = 0;
        for (size_t a = 0; a < n;) {
                size_t b = a;
                while (b < n && ph[b] != PLACEMENT)
                        b++;
                memset(seen, 0, njobs + 1);
                for (size_t i = a; i < b; i++)
                        if (rows[i].job >= 1 && rows[i].job <= njobs && !seen[rows[i].job]) {
                                seen[rows[i].job] = true;
                                total += mark_job(rows, ph, keep, a, b, rows[i].job, drop);
                        }
                a = b + 1; /* past the placement event */
        }
        return total;
}

static void shadow_free(loom_server *sh)
{
        if (!sh)
                return;
        for (uint32_t i = 0; i < sh->n_jobs; i++)
                free(sh->jobs[i]); /* decisions are the live jobs' */
        free(sh->jobs);
        free(sh->by_core);
        loom_sched_free(sh->sched);
        free(sh);
}

/* A server with copies of s's jobs as loaded from the store and a fresh core. */
static loom_server *shadow_new(loom_server *s, rewrites *rw, loom_err *e)
{
        loom_server *sh = calloc(1, sizeof *sh);
        if (!sh)
                return NULL;
        sh->cfg = s->cfg;
        memcpy(sh->data_dir, s->data_dir, sizeof sh->data_dir);
        sh->cfg.data_dir = sh->data_dir;
        sh->store = s->store;
        sh->replay_collect = true;
        sh->collect = collect;
        sh->collect_arg = rw;
        sh->sched = loom_sched_new(&s->cfg.cluster, &s->cfg.policy, e);
        if (sh->sched) /* plans from the log, never searched (regroup.c) */
                loom_sched_replaying(sh->sched, true);
        for (uint32_t i = 0; sh->sched && i < s->n_jobs; i++) {
                srv_job *c = malloc(sizeof *c);
                if (!c || (*c = *s->jobs[i], 0) ||
                    (c->replans = c->replans_base, c->learned = false, c->waiters = NULL,
                     c->learned_roll = c->learned_train = c->learned_budget = 0,
                     c->learned_head = 0, srv_job_add(sh, c))) {
                        free(c);
                        shadow_free(sh);
                        return NULL;
                }
        }
        if (!sh->sched) {
                shadow_free(sh);
                return NULL;
        }
        return sh;
}

static bool same_job(const loom_job_info *a, const loom_job_info *b)
{
        return a->group == b->group && a->n_rollout_nodes == b->n_rollout_nodes &&
               a->n_train_nodes == b->n_train_nodes &&
               !memcmp(a->rollout_nodes, b->rollout_nodes,
                       (size_t)a->n_rollout_nodes * sizeof *a->rollout_nodes) &&
               !memcmp(a->train_nodes, b->train_nodes,
                       (size_t)a->n_train_nodes * sizeof *a->train_nodes) &&
               a->spec.t_roll == b->spec.t_roll && a->spec.t_train == b->spec.t_train &&
               a->t_train_in_group == b->t_train_in_group && a->learned == b->learned &&
               a->learned_roll == b->learned_roll && a->learned_train == b->learned_train &&
               a->learned_budget == b->learned_budget && a->spec.t_head == b->spec.t_head &&
               a->learned_head == b->learned_head && a->regroup_planned == b->regroup_planned &&
               a->regroup_alone == b->regroup_alone && a->regroup_to == b->regroup_to &&
               a->regroup_tries == b->regroup_tries &&
               /* an unbounded job's count is read by nothing, and not logged */
               (a->spec.iterations <= 0 || a->iterations_done == b->iterations_done);
}

static bool same_group(const loom_group_info *a, const loom_group_info *b)
{
        return a->n_members == b->n_members &&
               !memcmp(a->members, b->members, (size_t)a->n_members * sizeof *a->members) &&
               a->n_rollout_nodes == b->n_rollout_nodes && a->n_train_nodes == b->n_train_nodes &&
               !memcmp(a->rollout_nodes, b->rollout_nodes,
                       (size_t)a->n_rollout_nodes * sizeof *a->rollout_nodes) &&
               !memcmp(a->train_nodes, b->train_nodes,
                       (size_t)a->n_train_nodes * sizeof *a->train_nodes) &&
               a->t_cycle == b->t_cycle && a->t_load == b->t_load && a->t_meta == b->t_meta &&
               a->saturated == b->saturated;
}

/* The shadow's core ended where the live one is (what placement and admission depend on). */
static bool same_state(loom_server *s, loom_server *sh, const uint32_t *core)
{
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                const srv_job *a = s->jobs[i], *b = sh->jobs[i];
                if (core[i] != a->retry.core || a->learned_roll != b->learned_roll ||
                    a->learned_train != b->learned_train ||
                    a->learned_budget != b->learned_budget || a->learned_head != b->learned_head)
                        return false;
        }
        int nj = loom_sched_jobs(s->sched, NULL, 0), ng = loom_sched_groups(s->sched, NULL, 0);
        if (nj != loom_sched_jobs(sh->sched, NULL, 0) ||
            ng != loom_sched_groups(sh->sched, NULL, 0))
                return false;
        loom_job_id *ja = calloc((size_t)nj + 1, sizeof *ja),
                    *jb = calloc((size_t)nj + 1, sizeof *jb);
        loom_group_id *ga = calloc((size_t)ng + 1, sizeof *ga),
                      *gb = calloc((size_t)ng + 1, sizeof *gb);
        bool same = ja && jb && ga && gb;
        if (same) {
                loom_sched_jobs(s->sched, ja, nj);
                loom_sched_jobs(sh->sched, jb, nj);
                loom_sched_groups(s->sched, ga, ng);
                loom_sched_groups(sh->sched, gb, ng);
                same = !memcmp(ja, jb, (size_t)nj * sizeof *ja) &&
                       !memcmp(ga, gb, (size_t)ng * sizeof *ga);
        }
        for (int i = 0; same && i < nj; i++) {
                loom_job_info a, b;
                same = !loom_sched_job_info(s->sched, ja[i], &a) &&
                       !loom_sched_job_info(sh->sched, ja[i], &b) && same_job(&a, &b);
        }
        for (int i = 0; same && i < ng; i++) {
                loom_group_info a, b;
                same = !loom_sched_group_info(s->sched, ga[i], &a) &&
                       !loom_sched_group_info(sh->sched, ga[i], &b) && same_group(&a, &b);
        }
        free(ja);
        free(jb);
        free(ga);
        free(gb);
        return same;
}

/* Replay the kept rows into a shadow; on the same state, write the compaction. */
static int verify_and_write(loom_server *s, const srv_log_row *rows, size_t n, const bool *drop,
                            size_t ndrop, int64_t *dropped, loom_err *e)
{
        rewrites rw = {0};
        loom_err e2;
        loom_err_clear(&e2);
        loom_server *sh = shadow_new(s, &rw, &e2);
        srv_replay rp = {.s = sh, .e = &e2};
        int64_t *seqs = malloc((ndrop ? ndrop : 1) * sizeof *seqs);
        uint64_t *base = calloc(s->n_jobs + 1, sizeof *base);
        int rc = sh && !srv_replay_alloc(&rp) && seqs && base
                     ? 0
                     : loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        int bad = 0;
        for (size_t i = 0; !rc && !bad && i < n; i++)
                if (!drop[i])
                        bad = srv_replay_one(&rp, rows[i].seq, rows[i].kind, rows[i].job,
                                             rows[i].reason, rows[i].at);
        if (!rc && !bad)
                srv_replay_counts(&rp);
        if (!rc && !bad && !same_state(s, sh, rp.core))
                bad = 1;
        if (!rc && bad)
                srv_log(
                    s, "compaction skipped: the shorter log would not replay to the same state%s%s",
                    e2.msg[0] ? ": " : "", e2.msg);
        if (!rc && !bad) {
                size_t k = 0;
                for (size_t i = 0; i < n; i++)
                        if (drop[i])
                                seqs[k++] = rows[i].seq;
                for (uint32_t j = 0; j < s->n_jobs; j++)
                        base[j] =
                            s->jobs[j]->replans - (sh->jobs[j]->replans - s->jobs[j]->replans_base);
                rc = srv_store_compact(s->store, seqs, ndrop, rw.seq, rw.text, rw.n, base,
                                       s->n_jobs, e);
                for (uint32_t j = 0; !rc && j < s->n_jobs; j++)
                        s->jobs[j]->replans_base = base[j];
                if (!rc)
                        *dropped = (int64_t)ndrop;
        }
        free(base);
        free(seqs);
        srv_replay_free(&rp);
        shadow_free(sh);
        rewrites_free(&rw);
        return rc;
}

int srv_compact(loom_server *s, int64_t *dropped, loom_err *e)
{
        *dropped = 0;
        srv_log_row *rows = NULL;
        size_t n = 0;
        int rc = srv_store_log_rows(s->store, &rows, &n, e);
        int *ph = rc ? NULL : row_phases(rows, n);
        bool *drop = rc ? NULL : calloc(n + 1, sizeof *drop);
        bool *keep = rc ? NULL : calloc(n + 1, sizeof *keep);
        bool *seen = rc ? NULL : calloc(s->n_jobs + 1, sizeof *seen);
        uint64_t *stretch = rc ? NULL : calloc(s->n_jobs + 1, sizeof *stretch);
        if (!rc && (!ph || !drop || !keep || !seen || !stretch))
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        if (!rc)
                keep_planned(rows, ph, n, s->n_jobs, keep);
        size_t ndrop = rc ? 0 : choose(rows, ph, keep, n, s->n_jobs, drop, seen);
        if (!rc)
                ndrop += fold_iters(rows, ph, n, s->n_jobs, drop, stretch);
        if (!rc && ndrop)
                rc = verify_and_write(s, rows, n, drop, ndrop, dropped, e);
        s->compact_rows = n - (size_t)*dropped;
        free(stretch);
        free(seen);
        free(keep);
        free(drop);
        free(ph);
        srv_log_rows_free(rows, n);
        return rc;
}

void srv_compact_maybe(loom_server *s)
{
        uint64_t now = s->compact_rows + srv_store_log_added(s->store);
        uint64_t min = (uint64_t)s->cfg.compact_min;
        uint64_t due = s->compact_rows * 2 > min ? s->compact_rows * 2 : min;
        if (s->store_failed || s->degraded || !min || (now < due && !s->compact_at_start))
                return;
        s->compact_at_start = false;
        int64_t dropped = 0;
        loom_err e;
        loom_err_clear(&e);
        loom_us t0 = srv_now_mono();
        int rc = srv_compact(s, &dropped, &e);
        srv_store_log_added_reset(s->store);
        if (rc)
                srv_log(s, "compaction failed (the log is left as it was): %s", e.msg);
        else if (dropped)
                srv_log(s, "log compacted: %lld of %llu entries dropped in %.3f s",
                        (long long)dropped, (unsigned long long)now,
                        loom_us_to_s(srv_now_mono() - t0));
}
