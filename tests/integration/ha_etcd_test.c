/*
 * ha_etcd_test - the fenced log (src/ha) against three running etcd members; run by
 * tests/integration/ha_etcd.sh. Usage: ha_etcd_test ENDPOINTS PID1 PID2 PID3 (the members'
 * process ids, in the order of ENDPOINTS, so it can kill -9 etcd's leader).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ha/etcd.h"
#include "ha/ha.h"

static int fails;
#define CHECK(c, ...)                                                                              \
        do {                                                                                       \
                if (!(c)) {                                                                        \
                        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fprintf(stderr, "\n");                                                     \
                        fails++;                                                                   \
                }                                                                                  \
        } while (0)
#define MUST(c, ...)                                                                               \
        do {                                                                                       \
                int ok_ = (c);                                                                     \
                CHECK(ok_, __VA_ARGS__);                                                           \
                if (!ok_)                                                                          \
                        exit(1);                                                                   \
        } while (0)

enum { TOTAL = 11 };
static const char *eps;

typedef struct {
        uint64_t seqs[64];
        char vals[64][32];
        int n;
        int rc;
        loom_err e;
} seen;

static int on_entry(void *arg, uint64_t seq, const char *entry, size_t n)
{
        seen *s = arg;
        if (s->n < 64) {
                s->seqs[s->n] = seq;
                snprintf(s->vals[s->n], sizeof s->vals[0], "%.*s", (int)n, entry);
        }
        s->n++;
        return s->n >= TOTAL;
}

static void *watcher(void *arg)
{
        seen *s = arg;
        loom_ha *w;
        s->rc = loom_ha_open(&w, eps, "loomtest/", "watcher", 5, &s->e);
        if (s->rc == 0)
                s->rc = loom_ha_watch(w, 1, on_entry, s, 40000, &s->e);
        loom_ha_close(w);
        return NULL;
}

/* Index of etcd's raft leader among the endpoints, by /v3/maintenance/status on each. */
static void *campaigner(void *arg)
{
        loom_err e;
        if (loom_ha_campaign(arg, &e)) {
                fprintf(stderr, "FAIL: c campaigns: %s\n", e.msg);
                fails++;
        }
        return NULL;
}

static int etcd_leader_index(char **ep, int n)
{
        for (int i = 0; i < n; i++) {
                etcd_client *c;
                loom_err e;
                json_t *a = NULL;
                if (etcd_open(&c, ep[i], 1000, &e))
                        continue;
                if (etcd_call(c, "/v3/maintenance/status", NULL, &a, 2000, &e) == 0) {
                        int64_t me = etcd_int(json_object_get(a, "header"), "member_id");
                        int64_t lead = etcd_int(a, "leader");
                        json_decref(a);
                        etcd_close(c);
                        if (me && me == lead)
                                return i;
                        continue;
                }
                etcd_close(c);
        }
        return -1;
}

int main(int argc, char **argv)
{
        if (argc != 5) {
                fprintf(stderr, "usage: ha_etcd_test ENDPOINTS PID1 PID2 PID3\n");
                return 2;
        }
        eps = argv[1];
        char *dup = strdup(eps), *ep[3], *save = NULL;
        int nep = 0;
        for (char *t = strtok_r(dup, ",", &save); t && nep < 3; t = strtok_r(NULL, ",", &save))
                ep[nep++] = t;
        MUST(nep == 3, "need three endpoints, got %d", nep);
        loom_err e;

        /* bad input names the field */
        etcd_client *bad;
        CHECK(etcd_open(&bad, "127.0.0.1:1", 0, &e) == LOOM_EINVAL && strcmp(e.field, "endpoints") == 0,
              "an endpoint without http:// is refused");
        loom_ha *dead;
        CHECK(loom_ha_open(&dead, "http://127.0.0.1:1", "x/", "d", 5, &e) == 0, "open");
        etcd_client *dc;
        etcd_open(&dc, "http://127.0.0.1:1", 300, &e);
        int64_t lid;
        CHECK(etcd_lease_grant(dc, 5, &lid, &e) == LOOM_EIO && strstr(e.msg, "http://127.0.0.1:1"),
              "an unreachable endpoint is named: %s", e.msg);
        etcd_close(dc);
        loom_ha_close(dead);

        /* leader A (TTL 2 s) appends 5 entries, fenced */
        loom_ha *a, *b;
        MUST(loom_ha_open(&a, eps, "loomtest/", "http://a", 2, &e) == 0, "open a: %s", e.msg);
        MUST(loom_ha_open(&b, eps, "loomtest/", "http://b", 10, &e) == 0, "open b: %s", e.msg);
        MUST(loom_ha_campaign(a, &e) == 0, "a campaigns: %s", e.msg);
        char *lead = NULL;
        CHECK(loom_ha_leader(b, &lead, &e) == 0 && lead && strcmp(lead, "http://a") == 0,
              "b sees a as leader (%s)", lead ? lead : e.msg);
        free(lead);

        seen s = {0};
        pthread_t wt;
        pthread_create(&wt, NULL, watcher, &s);

        char v[32];
        for (int i = 1; i <= 5; i++) {
                uint64_t seq = 0;
                snprintf(v, sizeof v, "a%d", i);
                int rc = loom_ha_append(a, v, strlen(v), &seq, &e);
                CHECK(rc == 0 && seq == (uint64_t)i, "a appends %s: rc %d seq %llu %s", v, rc,
                      (unsigned long long)seq, e.msg);
        }

        /* A pauses (no keepalive): its lease expires, B wins, A's append is refused by etcd */
        MUST(loom_ha_campaign(b, &e) == 0, "b campaigns: %s", e.msg);
        uint64_t seq = 0;
        CHECK(loom_ha_append(b, "b6", 2, &seq, &e) == 0 && seq == 6, "b appends seq 6: %s", e.msg);
        int rc = loom_ha_append(a, "a-stale", 7, &seq, &e);
        CHECK(rc == LOOM_HA_DEPOSED, "the old leader's append is refused (rc %d: %s)", rc, e.msg);
        CHECK(loom_ha_keepalive(a, &e) == LOOM_HA_DEPOSED, "a's keepalive says deposed");
        lead = NULL;
        CHECK(loom_ha_leader(a, &lead, &e) == 0 && lead && strcmp(lead, "http://b") == 0,
              "a sees b as leader (%s)", lead ? lead : e.msg);
        free(lead);
        CHECK(loom_ha_keepalive(b, &e) == 0, "b keeps its lease: %s", e.msg);

        /* kill -9 etcd's own leader: appends continue through the other members */
        int li = etcd_leader_index(ep, 3);
        CHECK(li >= 0, "etcd has a leader");
        if (li < 0)
                li = 0;
        int pid = atoi(argv[2 + li]);
        MUST(pid > 0 && kill(pid, SIGKILL) == 0, "kill -9 member %s (pid %d)", ep[li], pid);
        fprintf(stderr, "killed etcd leader %s (pid %d)\n", ep[li], pid);
        for (int i = 7; i <= TOTAL; i++) {
                snprintf(v, sizeof v, "b%d", i);
                rc = loom_ha_append(b, v, strlen(v), &seq, &e);
                CHECK(rc == 0 && seq == (uint64_t)i, "b appends %s after the kill: rc %d %s", v, rc,
                      e.msg);
        }

        pthread_join(wt, NULL);
        CHECK(s.rc == 0, "watcher: %s", s.e.msg);
        CHECK(s.n == TOTAL, "watcher saw %d entries, want %d", s.n, TOTAL);
        for (int i = 0; i < s.n && i < TOTAL; i++) {
                char want[32];
                snprintf(want, sizeof want, "%s%d", i < 5 ? "a" : "b", i + 1);
                CHECK(s.seqs[i] == (uint64_t)i + 1 && strcmp(s.vals[i], want) == 0,
                      "entry %d: seq %llu %s, want %d %s", i, (unsigned long long)s.seqs[i],
                      s.vals[i], i + 1, want);
        }
        /* read_from sees the same log, and no stale entry */
        seen r = {0};
        int64_t rev;
        CHECK(loom_ha_read_from(b, 1, on_entry, &r, &rev, &e) == 0 && r.n == TOTAL,
              "read_from(1): %d entries", r.n);
        /* the candidates, the leader's URL first: what the leader's workers get as LOOM_URL */
        loom_ha *c;
        MUST(loom_ha_open(&c, eps, "loomtest/", "http://c", 10, &e) == 0, "open c: %s", e.msg);
        pthread_t ct;
        pthread_create(&ct, NULL, campaigner, c); /* waits: b leads */
        char *urls = NULL;
        for (int i = 0; i < 50 && (!urls || strcmp(urls, "http://b,http://c")); i++) {
                free(urls);
                urls = NULL;
                nanosleep(&(struct timespec){.tv_nsec = 100 * 1000000L}, NULL);
                CHECK(loom_ha_candidates(b, &urls, &e) == 0, "candidates: %s", e.msg);
        }
        CHECK(urls && strcmp(urls, "http://b,http://c") == 0, "candidates b then c: %s",
              urls ? urls : "(none)");
        free(urls);
        CHECK(loom_ha_resign(b, &e) == 0, "b resigns: %s", e.msg);
        pthread_join(ct, NULL);
        urls = NULL;
        CHECK(loom_ha_candidates(c, &urls, &e) == 0 && urls && strcmp(urls, "http://c") == 0,
              "c alone once b resigned: %s", urls ? urls : e.msg);
        free(urls);
        CHECK(loom_ha_resign(c, &e) == 0, "c resigns: %s", e.msg);
        loom_ha_close(c);
        loom_ha_close(a);
        loom_ha_close(b);
        free(dup);
        printf("%s\n", fails ? "FAILED" : "ok: fenced appends, deposed leader refused, watch once in order, etcd leader killed, candidates listed");
        return fails ? 1 : 0;
}
