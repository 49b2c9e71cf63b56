/*
 * degrade.c - loomd on a store that refuses writes (disk full: SQLITE_FULL, I/O error:
 * SQLITE_IOERR). loomd does what SQLite does: the write that failed changes nothing, later
 * writes are refused with the reason, and reads go on.
 *
 *     ok / degraded --(a write or the commit of a batch that wrote fails)--> the batch is
 *         rolled back, its requests get 503, memory is rebuilt from the store (srv_rebuild)
 *         --> degraded
 *     degraded --(the probe write commits: srv_degraded_end)--> ok
 *     rebuild fails (the store cannot even be read) --> failed: loomd stops, exit status 3
 *
 * Invariant: memory is the store's last commit plus what is never stored (permits, lease
 * deadlines, waiting acquires). A failed batch cannot be undone in memory piece by piece (the
 * core, the job table and the leases all moved), so memory is rebuilt from the store, which
 * replay already proves it can be. While degraded, a request whose handling would write gets
 * 503 with Retry-After before it touches anything; reads, heartbeats, progress and a retried
 * acquire of a lease already granted are served. Lease and permit expiry and the executor's
 * reports wait for the store (they are writes); once it takes writes again every permit and
 * lease gets a full lease timeout (their workers could not claim or release them), so only a
 * worker that is really gone makes its job fail.
 */
#include <string.h>

#include "srv.h"

void srv_store_note(loom_server *s, int rc, const loom_err *e)
{
        s->batch_wrote = true;
        if (rc && !s->batch_failed) {
                s->batch_failed = true;
                snprintf(s->store_error, sizeof s->store_error, "%s", e->msg);
        }
}

void srv_reply_store_down(loom_server *s, srv_req *r)
{
        srv_reply_error(r, 503, "store",
                        "the store refuses writes (%s); nothing was changed, retry later",
                        s->store_error);
        r->retry_after_s = SRV_RETRY_AFTER_S;
}

/* Whether an acquire would grant (a write) or wait for a grant: not for a retried acquire of a
 * lease already held, nor for one the handler refuses anyway. */
static bool acquire_writes(loom_server *s, const srv_req *r)
{
        srv_job *j = srv_job_get(s, r->job);
        return j && srv_job_live(j->state) && !j->has_lease && r->phase == j->next;
}

bool srv_degraded_refuse(loom_server *s, srv_req *r)
{
        if (!s->degraded)
                return false;
        switch (r->kind) {
        case RQ_SUBMIT:
        case RQ_CANCEL:
        case RQ_RELEASE:
        case RQ_ATTACH:
                break;
        case RQ_ACQUIRE:
                if (!acquire_writes(s, r))
                        return false;
                break;
        default:
                return false;
        }
        srv_reply_store_down(s, r);
        return true;
}

int srv_degraded_probe(loom_server *s, loom_err *e)
{
        char now[32];
        snprintf(now, sizeof now, "%lld", (long long)srv_now_wall());
        return srv_store_meta_set(s->store, "write_probe", now, e);
}

void srv_degraded_end(loom_server *s)
{
        loom_us now = srv_now_mono(), until = now + loom_us_from_s(s->cfg.lease_timeout_s);
        for (uint32_t i = 0; i < s->n_jobs; i++) {
                srv_job *j = s->jobs[i];
                if (j->permit && j->permit_deadline < until)
                        j->permit_deadline = until;
                if (j->has_lease && j->lease.deadline < until)
                        j->lease.deadline = until;
        }
        s->degraded = false;
        s->next_check = now; /* expiry was held back meanwhile */
        srv_log(s, "store takes writes again after %.1f s",
                (double)(srv_now_wall() - s->degraded_since_wall) / LOOM_US_PER_S);
}

json_t *srv_health_json(loom_server *s, loom_us now)
{
        json_t *o = json_pack("{s:s,s:f}", "status", s->degraded ? "degraded" : "ok", "uptime_s",
                              loom_us_to_s(now - s->start_mono));
        if (o && s->cfg.replica_url) { /* a replica (docs/ha.md): followers answer "follower" */
                json_object_set_new(o, "role", json_string("leader"));
                json_object_set_new(o, "leader", json_string(s->cfg.replica_url));
        }
        if (o && s->degraded)
                json_object_set_new(
                    o, "store",
                    json_pack("{s:b,s:s,s:f}", "writable", 0, "error", s->store_error, "since_s",
                              (double)(srv_now_wall() - s->degraded_since_wall) / LOOM_US_PER_S));
        return o;
}
