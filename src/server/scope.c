/*
 * scope.c - what a caller sees of loomd (docs/security.md, "Tenants"): the job ids the API
 * and lease ids the API shows, pages of the job list, and a tenant's view of placement decisions.
 *
 * Job ids. loomd numbers jobs 1, 2, 3, ... in submit order; the store, its log and replay use
 * that number and nothing else. Shown as it is, it would tell a tenant how many jobs others
 * submitted between two of its own. With tokens, the API shows instead a keyed permutation of
 * it on 32 bits (a ten-round Feistel network whose round function is AES-128 under a key
 * derived from the store's secret, walking past 0): every shown id maps to exactly one of
 * loomd's and back, nothing new is stored, and ids stay stable across restarts and rebuilds
 * (they change only with the secret, as worker tokens do). Lease ids, which count every
 * tenant's phases, are shown the same way on 48 bits. Without tokens there are no tenants to
 * keep apart and ids are shown as they are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>
#include <nettle/aes.h>

#include "srv.h"

/* ---- job ids ------------------------------------------------------------------------------ */

#define FEISTEL_ROUNDS 10

/* On the scheduler thread (or before it starts): s->auth is open before the first job is
 * loaded, and the mode never changes while loomd runs. */
static bool keyed(loom_server *s, struct aes128_ctx *c)
{
        if (!s->jobid_mode) {
                if (!s->auth)
                        return false;
                s->jobid_mode = srv_auth_jobid_key(s, s->jobid_key) ? 2 : 1;
        }
        if (s->jobid_mode != 2)
                return false;
        aes128_set_encrypt_key(c, s->jobid_key);
        return true;
}

/* Jobs and leases get different permutations (the domain byte of the round function's input):
 * job ids on 32 bits, lease ids on 48 (a lease id is an int64 in the API; 2^48 leases are
 * centuries of them, and JSON numbers hold 48 bits exactly). */
enum { DOM_JOB = 1, DOM_LEASE = 2, DOM_ADMISSION = 3 };

static uint32_t round_f(const struct aes128_ctx *c, int dom, int round, uint32_t half, int bits)
{
        uint8_t in[AES_BLOCK_SIZE] = {(uint8_t)dom,          (uint8_t)round,
                                      (uint8_t)(half >> 24), (uint8_t)(half >> 16),
                                      (uint8_t)(half >> 8),  (uint8_t)half};
        uint8_t out[AES_BLOCK_SIZE];
        aes128_encrypt(c, AES_BLOCK_SIZE, out, in);
        uint32_t v =
            (uint32_t)out[0] << 24 | (uint32_t)out[1] << 16 | (uint32_t)out[2] << 8 | out[3];
        return v & ((1u << bits) - 1);
}

/* A balanced Feistel network on 2 x bits bits (bits <= 24). */
static uint64_t permute(const struct aes128_ctx *c, int dom, int bits, uint64_t x, bool inverse)
{
        uint32_t mask = (1u << bits) - 1;
        uint32_t l = (uint32_t)(x >> bits) & mask, r = (uint32_t)x & mask;
        for (int k = 0; k < FEISTEL_ROUNDS; k++) {
                if (!inverse) { /* (l, r) -> (r, l ^ F(r)) */
                        uint32_t t = l ^ round_f(c, dom, k, r, bits);
                        l = r;
                        r = t;
                } else { /* undo round FEISTEL_ROUNDS - 1 - k */
                        uint32_t t = r ^ round_f(c, dom, FEISTEL_ROUNDS - 1 - k, l, bits);
                        r = l;
                        l = t;
                }
        }
        return (uint64_t)l << bits | r;
}

/* 0 is no id (the API refuses it): a permutation of all 2^(2 bits) values that maps some id to
 * 0 maps 0 to another value, which that id takes instead (cycle walking). */
static uint64_t shown(const struct aes128_ctx *c, int dom, int bits, uint64_t id, bool inverse)
{
        uint64_t y = permute(c, dom, bits, id, inverse);
        return y ? y : permute(c, dom, bits, 0, inverse);
}

uint32_t srv_job_pub(loom_server *s, uint32_t id)
{
        struct aes128_ctx c;
        return id && keyed(s, &c) ? (uint32_t)shown(&c, DOM_JOB, 16, id, false) : id;
}

uint32_t srv_job_unpub(loom_server *s, uint32_t pub)
{
        struct aes128_ctx c;
        return pub && keyed(s, &c) ? (uint32_t)shown(&c, DOM_JOB, 16, pub, true) : pub;
}

uint32_t srv_admission_pub(loom_server *s, uint32_t core)
{
        struct aes128_ctx c;
        return core && keyed(s, &c) ? (uint32_t)shown(&c, DOM_ADMISSION, 16, core, false) : core;
}

#define LEASE_SPACE ((int64_t)1 << 48)

/* Lease ids from 2^48 on (never reached in practice) are shown as they are. */
int64_t srv_lease_pub(loom_server *s, int64_t id)
{
        struct aes128_ctx c;
        if (id <= 0 || id >= LEASE_SPACE || !keyed(s, &c))
                return id;
        return (int64_t)shown(&c, DOM_LEASE, 24, (uint64_t)id, false);
}

int64_t srv_lease_unpub(loom_server *s, int64_t pub)
{
        struct aes128_ctx c;
        if (pub <= 0 || pub >= LEASE_SPACE || !keyed(s, &c))
                return pub;
        return (int64_t)shown(&c, DOM_LEASE, 24, (uint64_t)pub, true);
}

/* ---- GET /v1/jobs: pages ------------------------------------------------------------------ */

#define LIST_DEFAULT 100
#define LIST_MAX 1000

static const char *query_arg(srv_req *r, const char *key)
{
        if (!r->conn)
                return r->value ? r->value(r, 0, key) : NULL;
        return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

static int whole(const char *v, uint64_t max, uint64_t *out)
{
        if (!v || !*v || strlen(v) > 10)
                return -1;
        uint64_t x = 0;
        for (const char *p = v; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -1;
                x = x * 10 + (uint64_t)(*p - '0');
        }
        if (x > max)
                return -1;
        *out = x;
        return 0;
}

void srv_list_parse(loom_server *s, srv_req *r)
{
        (void)s;
        const char *l = query_arg(r, "limit"), *a = query_arg(r, "after");
        const char *st = query_arg(r, "state");
        uint64_t v = LIST_DEFAULT;
        if (l && (whole(l, LIST_MAX, &v) || v < 1))
                return srv_reply_error(r, 422, "limit", "'limit' must be an integer in 1..%d",
                                       LIST_MAX);
        r->limit = (int)v;
        v = 0;
        if (a && whole(a, UINT32_MAX, &v))
                return srv_reply_error(r, 422, "after",
                                       "'after' must be a job id (the 'next' of a page)");
        r->after = (uint32_t)v;
        r->list_state = -1;
        if (st && !strcmp(st, "live")) {
                r->list_state = -2;
        } else if (st && strcmp(st, "any")) {
                for (int k = SJ_QUEUED; k <= SJ_CANCELLED; k++)
                        if (!strcmp(st, srv_job_state_name(k)))
                                r->list_state = k;
                if (r->list_state == -1)
                        return srv_reply_error(r, 422, "state",
                                               "'state' must be any, live, queued, running, "
                                               "finished, failed or cancelled");
        }
        r->kind = RQ_LIST_JOBS;
}

void srv_groups_parse(loom_server *s, srv_req *r)
{
        (void)s;
        const char *l = query_arg(r, "limit"), *a = query_arg(r, "after");
        uint64_t v = LIST_DEFAULT;
        if (l && (whole(l, LIST_MAX, &v) || v < 1))
                return srv_reply_error(r, 422, "limit", "'limit' must be an integer in 1..%d",
                                       LIST_MAX);
        r->limit = (int)v;
        v = 0;
        if (a && whole(a, UINT32_MAX - 1, &v))
                return srv_reply_error(r, 422, "after",
                                       "'after' must be a group id (the 'next' of a page)");
        r->after = a ? (uint32_t)v + 1 : 0; /* group ids start at 0: 0 here means none */
        r->kind = RQ_GROUPS;
}

/* ---- decisions ---------------------------------------------------------------------------- */

/* Whether one of the tenant's live jobs is in group g. */
/* The groups the caller's live jobs are in, into *out (malloc'd, *n of them): one pass over
 * the job table, whatever the number of candidates. */
static void caller_groups(loom_server *s, const srv_req *r, loom_group_id **out, size_t *n)
{
        size_t cap = 0;
        *out = NULL;
        *n = 0;
        loom_job_info *in = malloc(sizeof *in);
        for (uint32_t i = 0; in && i < s->n_jobs; i++) {
                const srv_job *j = s->jobs[i];
                if (!srv_job_live(j->state) || !srv_auth_sees(r, j) ||
                    loom_sched_job_info(s->sched, j->retry.core, in) != 0)
                        continue;
                if (loom_reserve(out, &cap, *n + 1, sizeof **out, 8))
                        break; /* out of memory: fewer groups shown, none wrongly */
                (*out)[(*n)++] = in->group;
        }
        free(in);
}

static bool in_groups(const loom_group_id *g, size_t n, json_int_t id)
{
        for (size_t i = 0; i < n; i++)
                if ((json_int_t)g[i] == id)
                        return true;
        return false;
}

/* A candidate's reason without what it says of the group's members (their names, their SLO
 * bounds, the group's phase times): the kind of reason only. */
static const char *why_reduced(const char *why)
{
        if (!why)
                return "";
        if (strstr(why, "SLO"))
                return "joining would break an SLO in this group";
        if (!strncmp(why, "group has", 9))
                return "the group is full";
        if (strstr(why, "saturated"))
                return "the group is saturated";
        if (!strncmp(why, "no rates fit", 12))
                return "no rates fit in this group";
        if (strstr(why, "memory"))
                return "not enough host memory in this group";
        if (strpbrk(why, "0123456789") || strstr(why, "job"))
                return "not chosen";
        return why;
}

json_t *srv_decision_scoped(loom_server *s, const srv_req *r, json_t *decision)
{
        json_t *cands = json_object_get(decision, "candidates");
        if (r->who.role == LOOM_ROLE_ADMIN || !json_is_array(cands) || !json_array_size(cands))
                return json_incref(decision);
        /* A candidate says why placement passed a group over: its verdict and reason are what
         * the submitter needs; which group it was, its nodes and who is in it are other
         * tenants' business unless the submitter's own jobs are in it too. */
        json_t *o = json_deep_copy(decision);
        json_t *a = json_object_get(o, "candidates");
        size_t i;
        json_t *c;
        json_int_t own = json_integer_value(json_object_get(o, "group"));
        loom_group_id *mine;
        size_t n_mine;
        caller_groups(s, r, &mine, &n_mine);
        json_array_foreach(a, i, c)
        {
                json_t *g = json_object_get(c, "group");
                if (!json_is_integer(g))
                        continue;
                json_int_t gid = json_integer_value(g);
                if (gid == own && json_is_integer(json_object_get(o, "group")))
                        continue; /* the group the job went to: shown in the job anyway */
                if (in_groups(mine, n_mine, gid))
                        continue;
                static const char *const hide[] = {"group", "rollout_nodes", "t_meta_s",
                                                   "utilisation"};
                for (size_t k = 0; k < sizeof hide / sizeof *hide; k++)
                        if (json_object_get(c, hide[k]))
                                json_object_set_new(c, hide[k], json_null());
                json_object_set_new(
                    c, "why",
                    json_string(why_reduced(json_string_value(json_object_get(c, "why")))));
        }
        free(mine);
        return o;
}
