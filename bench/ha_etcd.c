/*
 * ha_etcd_bench - figures for the fenced log (docs/ha.md), run by bench/ha_etcd.sh against
 * running etcd members: fenced append latency vs a SQLite insert with fsync (synchronous=FULL,
 * one transaction per insert, as loomd's store commits), and failover time: a leader stops
 * renewing its lease, a standby campaigning meanwhile appends; the time from the lease's expiry
 * (last renewal + TTL) to that first append. Prints figures; never fails on timing.
 * Usage: ha_etcd_bench ENDPOINTS [APPENDS [ROUNDS]] (defaults 200, 20).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "ha/ha.h"

static double now_ms(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void report(const char *what, double *v, int n)
{
        qsort(v, (size_t)n, sizeof *v, loom_cmp_double);
        printf("%-40s n=%-4d p50 %8.2f ms  p99 %8.2f ms\n", what, n, loom_quantile(v, (size_t)n, 0.5),
               loom_quantile(v, (size_t)n, 0.99));
}

int main(int argc, char **argv)
{
        if (argc < 2 || strcmp(argv[1], "--help") == 0) {
                fprintf(stderr, "usage: ha_etcd_bench ENDPOINTS [APPENDS [ROUNDS]]\n");
                return argc < 2 ? 2 : 0;
        }
        int n = argc > 2 ? atoi(argv[2]) : 200, rounds = argc > 3 ? atoi(argv[3]) : 20;
        if (n < 1 || rounds < 1) {
                fprintf(stderr, "ha_etcd_bench: APPENDS and ROUNDS must be >= 1\n");
                return 2;
        }
        loom_err e;
        double *lat = calloc((size_t)n, sizeof *lat);
        char entry[200];
        memset(entry, 'x', sizeof entry);

        loom_ha *a, *b;
        if (loom_ha_open(&a, argv[1], "loombench/", "http://a", 5, &e) ||
            loom_ha_campaign(a, &e)) {
                fprintf(stderr, "ha_etcd_bench: %s\n", e.msg);
                return 1;
        }
        for (int i = 0; i < n; i++) {
                double t0 = now_ms();
                if (loom_ha_append(a, entry, sizeof entry, NULL, &e)) {
                        fprintf(stderr, "ha_etcd_bench: append: %s\n", e.msg);
                        return 1;
                }
                lat[i] = now_ms() - t0;
        }
        report("etcd fenced append (200 B)", lat, n);
        loom_ha_resign(a, &e);
        loom_ha_close(a);

        char dir[] = "/tmp/loom-ha-bench.XXXXXX", path[64];
        if (!mkdtemp(dir))
                return 1;
        snprintf(path, sizeof path, "%s/s.db", dir);
        sqlite3 *db;
        sqlite3_open(path, &db);
        sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE log(seq INTEGER PRIMARY KEY AUTOINCREMENT, e BLOB);",
                     NULL, NULL, NULL);
        sqlite3_stmt *q;
        sqlite3_prepare_v2(db, "INSERT INTO log(e) VALUES(?)", -1, &q, NULL);
        for (int i = 0; i < n; i++) {
                double t0 = now_ms();
                sqlite3_bind_blob(q, 1, entry, sizeof entry, SQLITE_STATIC);
                sqlite3_step(q);
                sqlite3_reset(q);
                lat[i] = now_ms() - t0;
        }
        report("SQLite insert, WAL, synchronous=FULL", lat, n);
        sqlite3_finalize(q);
        sqlite3_close(db);
        unlink(path);
        char wal[80];
        snprintf(wal, sizeof wal, "%s-wal", path);
        unlink(wal);
        snprintf(wal, sizeof wal, "%s-shm", path);
        unlink(wal);
        rmdir(dir);

        /* failover: the leader's TTL is 2 s (etcd raises shorter ones to its minimum) */
        double *fo = calloc((size_t)rounds, sizeof *fo);
        int got = 0;
        for (int r = 0; r < rounds; r++) {
                if (loom_ha_open(&a, argv[1], "loombench/", "http://a", 2, &e) ||
                    loom_ha_open(&b, argv[1], "loombench/", "http://b", 5, &e) ||
                    loom_ha_campaign(a, &e) || loom_ha_append(a, "a", 1, NULL, &e) ||
                    loom_ha_keepalive(a, &e)) {
                        fprintf(stderr, "ha_etcd_bench: round %d: %s\n", r, e.msg);
                        return 1;
                }
                double expiry = now_ms() + 2000; /* a pauses from now on */
                if (loom_ha_campaign(b, &e) || loom_ha_append(b, "b", 1, NULL, &e)) {
                        fprintf(stderr, "ha_etcd_bench: round %d: %s\n", r, e.msg);
                        return 1;
                }
                fo[got++] = now_ms() - expiry;
                loom_ha_resign(b, &e);
                loom_ha_close(a);
                loom_ha_close(b);
        }
        report("failover: lease expiry -> first append", fo, got);
        free(fo);
        free(lat);
        return 0;
}
