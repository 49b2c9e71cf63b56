/*
 * test_exec_slurm.c - the Slurm executor's readers of squeue's and sinfo's output
 * (src/exec/slurm.c) on what Slurm 22.05.8 printed on a test cluster (scripts/slurm-cluster.sh,
 * nodes n24100r1-2, n24100t1-2), in tests/fixtures/slurm-22.05/: each sinfo-*.json was taken
 * together with the sinfo-*.txt of the same name (`sinfo -N --json`, then
 * `sinfo -h -N -o '%N|%T'`), during a power up, a power down, and with nodes drained, draining,
 * failing; squeue.json and squeue.txt likewise (`squeue --json`, `squeue -h -a -o '%i|%j|%T'`),
 * and squeue-cancelled.* once a pending holder had been cancelled.
 * The JSON reader must give each node the word the text reader gives it, power suffix included,
 * and the holders the text reader finds; and it must refuse what is not squeue's or sinfo's JSON
 * (a Slurm that refuses --json prints nothing on stdout), so that the executor reads text.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "exec_int.h"

#define MAXN 16

/* this file is tests/unit/test_exec_slurm.c; the fixtures are in tests/fixtures/slurm-22.05 */
static char *fixture(const char *name)
{
        char path[1024];
        const char *f = __FILE__, *cut = strstr(f, "unit/test_exec_slurm.c");
        cr_assert(cut, "source path %s", f);
        snprintf(path, sizeof path, "%.*sfixtures/slurm-22.05/%s", (int)(cut - f), f, name);
        FILE *in = fopen(path, "rb");
        cr_assert(in, "cannot open %s", path);
        fseek(in, 0, SEEK_END);
        long n = ftell(in);
        rewind(in);
        char *buf = malloc((size_t)n + 1);
        cr_assert(buf);
        cr_assert_eq(fread(buf, 1, (size_t)n, in), (size_t)n);
        buf[n] = 0;
        fclose(in);
        return buf;
}

static const char *state_of(char (*st)[2][LOOM_EXEC_NAME_MAX], int n, const char *node)
{
        for (int i = 0; i < n; i++)
                if (!strcmp(st[i][0], node))
                        return st[i][1];
        return NULL;
}

/* JSON and text of one capture: same nodes, same words; and t2's word is `want`. */
static void same_nodes(const char *capture, const char *want_t2)
{
        char name[96];
        snprintf(name, sizeof name, "%s.json", capture);
        char *json = fixture(name);
        snprintf(name, sizeof name, "%s.txt", capture);
        char *text = fixture(name);
        char js[MAXN][2][LOOM_EXEC_NAME_MAX], ts[MAXN][2][LOOM_EXEC_NAME_MAX];
        int nj = exec_slurm_json_nodes(json, js, MAXN);
        int nt = exec_slurm_parse_nodes(text, ts, MAXN);
        cr_assert_eq(nj, 4, "%s: %d nodes from JSON", capture, nj);
        cr_assert_eq(nt, 4);
        for (int i = 0; i < nt; i++) {
                const char *w = state_of(js, nj, ts[i][0]);
                cr_assert(w, "%s: %s missing from JSON", capture, ts[i][0]);
                cr_assert_str_eq(w, ts[i][1], "%s: %s is %s in JSON, %s in text", capture, ts[i][0],
                                 w, ts[i][1]);
        }
        cr_assert_str_eq(state_of(js, nj, "n24100t2"), want_t2);
        free(json);
        free(text);
}

Test(slurm_json, power_states_as_sinfo_prints_them)
{
        /* 22.05: state "idle" with state_flags ["POWER_UP", "POWERED_DOWN"] ... */
        same_nodes("sinfo-power-up-queued", "idle~");
        same_nodes("sinfo-powering-up", "idle#"); /* ["NOT_RESPONDING", "POWERING_UP"] */
        same_nodes("sinfo-power-down-queued", "idle!");
        same_nodes("sinfo-powering-down", "idle%");
}

Test(slurm_json, out_of_service_states)
{
        /* r1: allocated + FAIL, r2: down + DRAIN, t1: allocated + DRAIN, t2: idle + POWERED_DOWN */
        same_nodes("sinfo-out-of-service", "idle~");
        char *json = fixture("sinfo-out-of-service.json");
        char st[MAXN][2][LOOM_EXEC_NAME_MAX];
        int n = exec_slurm_json_nodes(json, st, MAXN);
        cr_assert_str_eq(state_of(st, n, "n24100r1"), "failing");
        cr_assert_str_eq(state_of(st, n, "n24100r2"), "drained");
        cr_assert_str_eq(state_of(st, n, "n24100t1"), "draining");
        free(json);
}

Test(slurm_json, holders_match_text)
{
        char *json = fixture("squeue.json"), *text = fixture("squeue.txt");
        exec_slurm_holder hj[MAXN], ht[MAXN];
        int nj = exec_slurm_json_holders(json, hj, MAXN);
        int nt = exec_slurm_parse_holders(text, ht, MAXN);
        /* jobs 1, 2, 3 are loom's holders (3 pending on n24100r1); job 4 is named
         * "odd|name with spaces" and is not */
        cr_assert_eq(nj, 3);
        cr_assert_eq(nt, 3);
        for (int i = 0; i < nt; i++) {
                int k = 0;
                while (k < nj && strcmp(hj[k].id, ht[i].id))
                        k++;
                cr_assert_lt(k, nj, "job %s missing from JSON", ht[i].id);
                cr_assert_str_eq(hj[k].node, ht[i].node);
                cr_assert_eq(hj[k].running, ht[i].running);
        }
        for (int k = 0; k < nj; k++) {
                if (!strcmp(hj[k].id, "3")) {
                        cr_assert_str_eq(hj[k].node, "n24100r1");
                        cr_assert_not(hj[k].running);
                }
                if (!strcmp(hj[k].id, "2")) {
                        cr_assert_str_eq(hj[k].node, "n24100t1");
                        cr_assert(hj[k].running);
                }
        }
        free(json);
        free(text);
}

/* 22.05's --json also lists jobs that ended (here holder 3, cancelled a second before); the text
 * does not, and neither may the JSON reader, or a cancelled holder would pin its node. */
Test(slurm_json, ended_jobs_are_not_holders)
{
        char *json = fixture("squeue-cancelled.json"), *text = fixture("squeue-cancelled.txt");
        cr_assert(strstr(json, "\"CANCELLED\""));
        exec_slurm_holder hj[MAXN], ht[MAXN];
        int nj = exec_slurm_json_holders(json, hj, MAXN);
        int nt = exec_slurm_parse_holders(text, ht, MAXN);
        cr_assert_eq(nt, 2);
        cr_assert_eq(nj, 2);
        for (int k = 0; k < nj; k++) {
                cr_assert_str_neq(hj[k].id, "3");
                cr_assert(hj[k].running);
        }
        char done[] =
            "{\"jobs\": [{\"job_id\": 8, \"name\": \"loom-node-a\", "
            "\"job_state\": [\"CANCELLED\", \"COMPLETING\"]},"
            "{\"job_id\": 9, \"name\": \"loom-node-b\", \"job_state\": [\"COMPLETED\"]}]}";
        cr_assert_eq(exec_slurm_json_holders(done, hj, MAXN), 1); /* 8 is still completing */
        cr_assert_str_eq(hj[0].id, "8");
        cr_assert_not(hj[0].running);
        free(json);
        free(text);
}

Test(slurm_json, bounded)
{
        char *json = fixture("squeue.json");
        exec_slurm_holder h[2];
        cr_assert_eq(exec_slurm_json_holders(json, h, 2), 2);
        free(json);
        json = fixture("sinfo-out-of-service.json");
        char st[3][2][LOOM_EXEC_NAME_MAX];
        cr_assert_eq(exec_slurm_json_nodes(json, st, 3), 3);
        free(json);
}

/* Newer Slurm (data_parser) puts the flags in the state array; the same words come out. */
Test(slurm_json, state_as_array)
{
        char buf[] = "{\"nodes\": [{\"name\": \"a\", \"state\": [\"IDLE\", \"POWERING_DOWN\"]},"
                     "{\"name\": \"b\", \"state\": [\"MIXED\", \"DRAIN\"]},"
                     "{\"name\": \"c\", \"state\": [\"DOWN\", \"POWERED_DOWN\"]}]}";
        char st[MAXN][2][LOOM_EXEC_NAME_MAX];
        int n = exec_slurm_json_nodes(buf, st, MAXN);
        cr_assert_eq(n, 3);
        cr_assert_str_eq(state_of(st, n, "a"), "idle%");
        cr_assert_str_eq(state_of(st, n, "b"), "draining");
        cr_assert_str_eq(state_of(st, n, "c"), "down~");
        char jobs[] = "{\"jobs\": [{\"job_id\": 7, \"name\": \"loom-node-a\", "
                      "\"job_state\": [\"RUNNING\"]}]}";
        exec_slurm_holder h[2];
        cr_assert_eq(exec_slurm_json_holders(jobs, h, 2), 1);
        cr_assert_str_eq(h[0].id, "7");
        cr_assert_str_eq(h[0].node, "a");
        cr_assert(h[0].running);
}

/* What a Slurm without --json leaves on stdout (nothing: 22.05 without the serializer/json
 * plugin exits 1 with "fatal: Unable to find plugin: serializer/json" on stderr), the text format
 * itself, a cut JSON document, and JSON of another shape are all refused, and the text reader
 * still reads the text. */
Test(slurm_json, refused_then_text)
{
        exec_slurm_holder h[MAXN];
        char st[MAXN][2][LOOM_EXEC_NAME_MAX];
        cr_assert_eq(exec_slurm_json_holders("", h, MAXN), -1);
        cr_assert_eq(exec_slurm_json_nodes("", st, MAXN), -1);
        char *text = fixture("squeue.txt");
        cr_assert_eq(exec_slurm_json_holders(text, h, MAXN), -1);
        cr_assert_eq(exec_slurm_parse_holders(text, h, MAXN), 3);
        free(text);
        text = fixture("sinfo-powering-down.txt");
        cr_assert_eq(exec_slurm_json_nodes(text, st, MAXN), -1);
        cr_assert_eq(exec_slurm_parse_nodes(text, st, MAXN), 4);
        cr_assert_str_eq(state_of(st, 4, "n24100t2"), "idle%");
        free(text);
        char *json = fixture("sinfo-powering-down.json");
        json[strlen(json) / 2] = 0; /* past the buffer: cut mid-document */
        cr_assert_eq(exec_slurm_json_nodes(json, st, MAXN), -1);
        free(json);
        json = fixture("squeue.json"); /* jobs, not nodes */
        cr_assert_eq(exec_slurm_json_nodes(json, st, MAXN), -1);
        free(json);
}

Test(slurm_text, steps)
{
        char *text = fixture("squeue-steps.txt");
        loom_exec_worker w[MAXN];
        int n = exec_slurm_parse_steps(text, w, 0, MAXN);
        cr_assert_eq(n, 2); /* the batch steps are not loom's */
        cr_assert_str_eq(w[0].id, "1.0");
        cr_assert_str_eq(w[0].node, "n24100r1");
        cr_assert_eq(w[0].pool, LOOM_POOL_ROLLOUT);
        cr_assert_str_eq(w[1].id, "2.0");
        cr_assert_eq(w[1].pool, LOOM_POOL_TRAIN);
        free(text);
}

/* The holder's script watches every replica's address: one that answers keeps the allocation,
 * so a takeover does not end it; with none answering it ends after grace_s. */
Test(slurm_holder, watches_every_address_in_the_list)
{
        char script[1024];
        exec_slurm_holder_script("http://127.0.0.1:7001,https://[::1]:7002,http://a b:1", 30,
                                 script, sizeof script);
        cr_assert(strstr(script, "for a in 127.0.0.1/7001 ::1/7002; do"), "%s", script);
        cr_assert(strstr(script, "-ge 30 ]"), "%s", script);
        exec_slurm_holder_script("http://loomd.example:7480", 5, script, sizeof script);
        cr_assert(strstr(script, "for a in loomd.example/7480; do"), "%s", script);
}

static int listener(int *port)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* not the holder's */
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0);
        cr_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
        *port = ntohs(a.sin_port);
        return fd;
}

/* Run for real (bash, 5 s rounds): the first replica is gone, the second answers; with only
 * the first watched the script would end at its first round (grace 5 s). */
Test(slurm_holder, a_live_replica_keeps_the_allocation, .timeout = 30)
{
        int dead_port, live_port;
        int dead = listener(&dead_port);
        close(dead); /* nothing listens there now */
        int live = listener(&live_port);
        char urls[128], script[1024];
        snprintf(urls, sizeof urls, "http://127.0.0.1:%d,http://127.0.0.1:%d", dead_port,
                 live_port);
        exec_slurm_holder_script(urls, 5, script, sizeof script);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
                execl("/bin/sh", "sh", "-c", script, (char *)NULL);
                _exit(127);
        }
        sleep(7); /* one round past the grace */
        int st;
        cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "the holder ended with a replica alive");
        close(live); /* every replica gone: it ends within two rounds */
        int waited = 0;
        while (waitpid(pid, &st, WNOHANG) == 0 && waited++ < 150)
                nanosleep(&(struct timespec){.tv_nsec = 100 * 1000000L}, NULL);
        if (waited > 150)
                kill(pid, SIGKILL);
        cr_assert(waited <= 150 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the holder did not end once no replica answered");
}
