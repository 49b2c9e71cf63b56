/*
 * ctl.c - `loom submit`, `jobs`, `job`, `cancel`, `groups`, `nodes`, `cluster`, `events`: the
 * command line of a running loomd, over libloom-client. Parses arguments, calls the client
 * (src/client/ctl.c gathers, view.c draws the tables) and prints; the exit status says who said
 * no (see ctl_help).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd.h"
#include "loom/client.h"

enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3, EXIT_AUTH = 4 };

void loom_cmd_ctl_help(FILE *f)
{
        fputs(
            "\n"
            "Operating a running loomd (loom submit|jobs|job|cancel|groups|nodes|cluster|events):\n"
            "  --server URL     loomd's address (default $LOOM_URL, else http://127.0.0.1:7480)\n"
            "  --token TOKEN    bearer token (default $LOOM_TOKEN, else $LOOM_TOKEN_FILE's)\n"
            "  --token-file F   read the token from the first line of F\n"
            "  --ca-file PEM    the CA of loomd's certificate (default $LOOM_CA_FILE)\n"
            "  -o table|json    tables for people (default), or loomd's JSON for scripts\n"
            "  submit FILE|-    submit a job: FILE holds what POST /v1/jobs takes (docs/api.md)\n"
            "  --dry-run        submit: show where it would go and why; submit nothing\n"
            "  --explain        submit: also list the candidates placement passed over\n"
            "  --name N         submit: the spec from flags, also --rollout-gpus G,\n"
            "                   --train-gpus G, --t-roll S, --t-train S, --slo X,\n"
            "                   --iterations N, --sync S, --model-b B, --mem-rollout GB,\n"
            "                   --mem-train GB, --max-restarts N (over FILE's fields)\n"
            "  jobs             list jobs (a tenant: its own)\n"
            "  --state S        jobs: live, queued, running, finished, failed, cancelled, any\n"
            "  --tenant T       jobs: only T's (admin)\n"
            "  --group G        jobs: only those in group G\n"
            "  job ID           one job: spec, placement, rate, iterations, leases, SLO\n"
            "                   headroom, restarts, events, cost so far\n"
            "  cancel ID...     cancel jobs\n"
            "  groups           co-execution groups (admin tokens)\n"
            "  nodes            nodes in use (a tenant: those of its own jobs)\n"
            "  cluster          nodes, cost, live jobs, policy and quotas\n"
            "  events           recent events: submits, exits, re-admissions\n"
            "  --job ID         events: only this job's\n"
            "  --since S        events: look back S seconds first (default 600, at most 3600)\n"
            "  --watch          events: keep following, every --interval S (default 2)\n"
            "\n"
            "Environment: LOOM_URL, LOOM_TOKEN, LOOM_TOKEN_FILE, LOOM_CA_FILE, the names the\n"
            "client library, the Python package and the executors' workers read. Tokens are\n"
            "issued, listed and revoked with `loomd token` on loomd's host: the API has no\n"
            "route for them.\n"
            "\n"
            "Exit status of these commands:\n"
            "  0  done\n"
            "  1  invalid input, or loomd said no (not found, wrong state, over quota,\n"
            "     cannot be placed)\n"
            "  2  bad usage\n"
            "  3  loomd unreachable (connection refused, TLS verification, shutting down)\n"
            "  4  no valid token, or a role that may not do it\n",
            f);
}

static void usage(FILE *f)
{
        fprintf(f, "usage: loom <submit|jobs|job|cancel|groups|nodes|cluster|events> ...\n");
        loom_cmd_ctl_help(f);
}

/* What every one of these commands takes, and what each keeps of its own. */
typedef struct ctl {
        const char *cmd;
        const char *server, *token, *token_file, *ca_file;
        bool json;
        const char *pos[64];
        int n_pos;
        /* submit */
        bool dry_run, explain;
        json_t *spec_flags;
        /* jobs */
        loom_client_job_filter filter;
        /* events */
        uint32_t job;
        double since_s, interval_s;
        bool watch;
        char token_buf[512];
} ctl;

/* Spec fields a flag may set: the flag, the field, whether it is a whole number. */
static const struct spec_flag {
        const char *flag, *field;
        bool whole;
} spec_flags[] = {
    {"--rollout-gpus", "rollout_gpus", true},
    {"--train-gpus", "train_gpus", true},
    {"--t-roll", "t_roll_s", false},
    {"--t-train", "t_train_s", false},
    {"--sync", "sync_s", false},
    {"--slo", "slo", false},
    {"--iterations", "iterations", true},
    {"--model-b", "model_b", false},
    {"--mem-rollout", "mem_rollout_gb", false},
    {"--mem-train", "mem_train_gb", false},
    {"--max-restarts", "max_restarts", true},
};

static int spec_flag(ctl *c, const char *a, const char *v)
{
        if (!strcmp(a, "--name")) {
                json_object_set_new(c->spec_flags, "name", json_string(v));
                return 0;
        }
        for (size_t i = 0; i < sizeof spec_flags / sizeof spec_flags[0]; i++) {
                if (strcmp(a, spec_flags[i].flag))
                        continue;
                double d;
                uint64_t u;
                if (spec_flags[i].whole) {
                        if (loom_cmd_whole(c->cmd, a, v, 0, 4294967295.0, &u))
                                return 1;
                        json_object_set_new(c->spec_flags, spec_flags[i].field,
                                            json_integer((json_int_t)u));
                } else {
                        if (loom_cmd_num(c->cmd, a, v, 0, 1e12, &d))
                                return 1;
                        json_object_set_new(c->spec_flags, spec_flags[i].field, json_real(d));
                }
                return 0;
        }
        return -1;
}

/* The option a with value v for command c->cmd: 0 taken, 1 invalid value, -1 unknown. */
static int option(ctl *c, const char *a, const char *v)
{
        const char *name = c->cmd + 5; /* "loom " */
        if (!strcmp(a, "--server"))
                c->server = v;
        else if (!strcmp(a, "--token"))
                c->token = v;
        else if (!strcmp(a, "--token-file"))
                c->token_file = v;
        else if (!strcmp(a, "--ca-file"))
                c->ca_file = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
                if (strcmp(v, "json") && strcmp(v, "table")) {
                        fprintf(stderr, "%s: -o: '%s' is not 'table' or 'json'\n", c->cmd, v);
                        return 1;
                }
                c->json = !strcmp(v, "json");
        } else if (!strcmp(name, "submit"))
                return spec_flag(c, a, v);
        else if (!strcmp(name, "jobs") && !strcmp(a, "--state"))
                c->filter.state = v;
        else if (!strcmp(name, "jobs") && !strcmp(a, "--tenant"))
                c->filter.tenant = v;
        else if (!strcmp(name, "jobs") && !strcmp(a, "--group")) {
                uint64_t g;
                if (loom_cmd_whole(c->cmd, a, v, 0, 4294967295.0, &g))
                        return 1;
                c->filter.group = (int64_t)g;
                c->filter.has_group = true;
        } else if (!strcmp(name, "events") && !strcmp(a, "--job")) {
                uint64_t j;
                if (loom_cmd_whole(c->cmd, a, v, 1, 4294967295.0, &j))
                        return 1;
                c->job = (uint32_t)j;
        } else if (!strcmp(name, "events") && !strcmp(a, "--since"))
                return loom_cmd_num(c->cmd, a, v, 0.001, 3600, &c->since_s);
        else if (!strcmp(name, "events") && !strcmp(a, "--interval"))
                return loom_cmd_num(c->cmd, a, v, 0.1, 3600, &c->interval_s);
        else
                return -1;
        return 0;
}

/* argv into c: 0, 1 (invalid value), 2 (bad usage), 3 (--help printed). */
static int parse(ctl *c, int argc, char **argv)
{
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        usage(stdout);
                        return 3;
                }
                if (!strcmp(a, "--dry-run") || !strcmp(a, "--explain") || !strcmp(a, "--watch")) {
                        bool ok = strcmp(a, "--watch") ? !strcmp(c->cmd, "loom submit")
                                                       : !strcmp(c->cmd, "loom events");
                        if (!ok) {
                                fprintf(stderr, "%s: unknown option '%s'\n", c->cmd, a);
                                return 2;
                        }
                        c->dry_run |= !strcmp(a, "--dry-run");
                        c->explain |= !strcmp(a, "--explain");
                        c->watch |= !strcmp(a, "--watch");
                        continue;
                }
                if (a[0] != '-' || !strcmp(a, "-")) {
                        if (c->n_pos == 64) {
                                fprintf(stderr, "%s: too many arguments\n", c->cmd);
                                return 2;
                        }
                        c->pos[c->n_pos++] = a;
                        continue;
                }
                if (i + 1 >= argc) {
                        fprintf(stderr, "%s: %s needs a value (see `%s --help`)\n", c->cmd, a,
                                c->cmd);
                        return 2;
                }
                int rc = option(c, a, argv[++i]);
                if (rc < 0)
                        fprintf(stderr, "%s: unknown option '%s' (see `%s --help`)\n", c->cmd, a,
                                c->cmd);
                if (rc)
                        return rc < 0 ? 2 : 1;
        }
        return 0;
}

static loom_client *connect_to(ctl *c, double retry_for_s)
{
        const char *url = c->server ? c->server : getenv("LOOM_URL");
        char buf[600];
        if (!url || !*url)
                url = "http://127.0.0.1:7480";
        if (!strstr(url, "://")) { /* host:port */
                snprintf(buf, sizeof buf, "http://%s", url);
                url = buf;
        }
        if (c->token_file) {
                FILE *f = fopen(c->token_file, "r");
                if (!f || !fgets(c->token_buf, sizeof c->token_buf, f)) {
                        fprintf(stderr, "%s: --token-file: cannot read '%s'\n", c->cmd,
                                c->token_file);
                        if (f)
                                fclose(f);
                        return NULL;
                }
                fclose(f);
                c->token_buf[strcspn(c->token_buf, "\r\n")] = '\0';
                c->token = c->token_buf;
        }
        loom_client_opts o;
        loom_client_opts_default(&o);
        o.token = c->token;
        o.ca_file = c->ca_file;
        o.retry_for_s = retry_for_s;
        o.heartbeat = false;
        loom_client *cl = loom_client_new(url, &o);
        if (!cl)
                fprintf(stderr, "%s: cannot use server '%s' (or $LOOM_TOKEN_FILE is unreadable)\n",
                        c->cmd, url);
        return cl;
}

/* The error of rc on cl as a sentence that says what to do, and the exit status. */
static int fail(const ctl *c, loom_client *cl, int rc, const char *what)
{
        const char *msg = loom_client_error(cl);
        int st = loom_client_status(cl);
        if (rc == LOOM_EIO && (st == 0 || st == 503)) {
                bool tls = strstr(msg, "SSL") || strstr(msg, "certificate");
                fprintf(stderr, "%s: cannot reach loomd: %s\n%s", c->cmd, msg,
                        tls ? "  (TLS: give the CA that signed loomd's certificate with --ca-file "
                              "or $LOOM_CA_FILE, and a --server host name the certificate names)\n"
                            : "  (is loomd running there? point --server or $LOOM_URL at it)\n");
                return EXIT_UNREACHABLE;
        }
        if (st == 401) {
                fprintf(stderr,
                        "%s: %s\n  (pass a token with --token, --token-file, $LOOM_TOKEN or "
                        "$LOOM_TOKEN_FILE; an admin issues one with `loomd token create`)\n",
                        c->cmd, msg);
                return EXIT_AUTH;
        }
        if (st == 403 && !strstr(msg, "quota")) {
                fprintf(stderr,
                        "%s: %s\n  (this token's role may not %s; ask for an admin token)\n",
                        c->cmd, msg, what);
                return EXIT_AUTH;
        }
        if (st == 404)
                fprintf(stderr, "%s: %s\n  (`loom jobs` lists the jobs this token may see)\n",
                        c->cmd, msg);
        else
                fprintf(stderr, "%s: %s\n", c->cmd, msg);
        return EXIT_NO;
}

/* Print a reply: as it is for -o json, else as the table of view. */
static int show(const ctl *c, const char *view, const char *js)
{
        char err[256];
        if (c->json) {
                printf("%s\n", js);
                return EXIT_OK;
        }
        if (loom_client_render(view, js, stdout, err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", c->cmd, err);
                return EXIT_NO;
        }
        return EXIT_OK;
}

static int setup(ctl *c, const char *name, int argc, char **argv, int min_pos, int max_pos)
{
        static char cmd[32];
        snprintf(cmd, sizeof cmd, "loom %s", name);
        c->cmd = cmd;
        c->interval_s = 2;
        c->since_s = 600;
        int rc = parse(c, argc, argv);
        if (rc)
                return rc == 3 ? -1 : rc;
        if (c->n_pos < min_pos || c->n_pos > max_pos) {
                fprintf(stderr, "%s: expected %s (see `%s --help`)\n", cmd,
                        max_pos == 0         ? "no arguments"
                        : min_pos == max_pos ? "one argument"
                                             : "an id",
                        cmd);
                return EXIT_USAGE;
        }
        return 0;
}

/* A positional job id. */
static int job_id(const ctl *c, const char *s, uint32_t *id)
{
        char *end;
        errno = 0;
        unsigned long long u = strtoull(s, &end, 10);
        if (errno || end == s || *end || s[0] == '-' || u < 1 || u > UINT32_MAX) {
                fprintf(stderr,
                        "%s: '%s' is not a job id (a whole number from 1 to %u, as `loom "
                        "jobs` shows them)\n",
                        c->cmd, s, UINT32_MAX);
                return EXIT_USAGE;
        }
        *id = (uint32_t)u;
        return 0;
}

#define SETUP(name, lo, hi)                                                                        \
        ctl c = {0};                                                                               \
        int rc_ = setup(&c, name, argc, argv, lo, hi);                                             \
        if (rc_)                                                                                   \
                return rc_ < 0 ? EXIT_OK : rc_;                                                    \
        loom_client *cl = connect_to(&c, 3);                                                       \
        if (!cl)                                                                                   \
                return EXIT_USAGE;

int loom_cmd_jobs(int argc, char **argv)
{
        SETUP("jobs", 0, 0);
        char *js = NULL;
        int rc = loom_client_jobs(cl, &c.filter, &js);
        int ex = rc ? fail(&c, cl, rc, "list jobs") : show(&c, "jobs", js);
        loom_client_free_string(js);
        loom_client_free(cl);
        return ex;
}

int loom_cmd_job(int argc, char **argv)
{
        SETUP("job", 1, 1);
        uint32_t id;
        char *js = NULL;
        int ex = job_id(&c, c.pos[0], &id);
        if (!ex) {
                int rc = loom_client_job_report(cl, id, &js);
                ex = rc ? fail(&c, cl, rc, "read this job") : show(&c, "job", js);
        }
        loom_client_free_string(js);
        loom_client_free(cl);
        return ex;
}

int loom_cmd_cancel(int argc, char **argv)
{
        SETUP("cancel", 1, 64);
        int ex = EXIT_OK;
        for (int i = 0; i < c.n_pos && ex != EXIT_USAGE; i++) {
                uint32_t id;
                char path[48], *js = NULL;
                if ((ex = job_id(&c, c.pos[i], &id)))
                        break;
                snprintf(path, sizeof path, "/v1/jobs/%u", id);
                int rc = loom_client_request(cl, "DELETE", path, NULL, NULL, &js);
                int one = rc ? fail(&c, cl, rc, "cancel jobs") : EXIT_OK;
                if (!rc && c.json)
                        printf("%s\n", js);
                else if (!rc)
                        printf("cancelled job %u\n", id);
                ex = ex ? ex : one;
                loom_client_free_string(js);
        }
        loom_client_free(cl);
        return ex;
}

int loom_cmd_groups(int argc, char **argv)
{
        SETUP("groups", 0, 0);
        char *js = NULL;
        int rc = loom_client_groups(cl, &js);
        int ex = rc ? fail(&c, cl, rc, "list groups (they name every tenant's jobs)")
                    : show(&c, "groups", js);
        loom_client_free_string(js);
        loom_client_free(cl);
        return ex;
}

int loom_cmd_nodes(int argc, char **argv)
{
        SETUP("nodes", 0, 0);
        char *js = NULL;
        int rc = loom_client_nodes(cl, &js);
        int ex = rc ? fail(&c, cl, rc, "list nodes") : show(&c, "nodes", js);
        loom_client_free_string(js);
        loom_client_free(cl);
        return ex;
}

int loom_cmd_cluster(int argc, char **argv)
{
        SETUP("cluster", 0, 0);
        char *js = NULL;
        int rc = loom_client_request(cl, "GET", "/v1/cluster", NULL, NULL, &js);
        int ex = rc ? fail(&c, cl, rc, "read the cluster") : show(&c, "cluster", js);
        loom_client_free_string(js);
        loom_client_free(cl);
        return ex;
}

/* -o json: one event per line, so that a script can read a --watch as it comes. */
static void events_json(const char *js)
{
        json_error_t je;
        json_t *o = json_loads(js, 0, &je);
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(o, "events"), i, e)
        {
                char *s = json_dumps(e, JSON_COMPACT);
                if (s)
                        printf("%s\n", s);
                free(s);
        }
        json_decref(o);
}

int loom_cmd_events(int argc, char **argv)
{
        ctl c = {0};
        int rc0 = setup(&c, "events", argc, argv, 0, 0);
        if (rc0)
                return rc0 < 0 ? EXIT_OK : rc0;
        /* A watch rides over a loomd restart as workers do; a single look gives up soon. */
        loom_client *cl = connect_to(&c, c.watch ? 60 : 3);
        loom_client_events *w = cl ? loom_client_events_new(cl, c.job, c.since_s) : NULL;
        if (!w) {
                loom_client_free(cl);
                return cl ? EXIT_NO : EXIT_USAGE;
        }
        if (c.watch)
                loom_cmd_catch_stop();
        int ex = EXIT_OK;
        bool first = true;
        do {
                char *js = NULL;
                int rc = loom_client_events_poll(w, &js);
                if (rc) {
                        ex = fail(&c, cl, rc, "read events");
                        break;
                }
                if (c.json)
                        events_json(js);
                else
                        ex = show(&c, first ? "events" : "event-rows", js);
                first = false;
                loom_client_free_string(js);
                fflush(stdout);
                for (double t = 0; c.watch && t < c.interval_s && !loom_cmd_stopping(); t += 0.05)
                        usleep(50000);
        } while (c.watch && !ex && !loom_cmd_stopping());
        loom_client_events_free(w);
        loom_client_free(cl);
        return ex;
}

/* The job file (or - for stdin) as a JSON object, and its text in *raw (malloc'd): sent as it is,
 * loomd's line and column of a field it refuses are the file's. A syntax error as FILE:LINE:COL. */
static json_t *read_job_file(const ctl *c, const char *path, char **raw)
{
        bool in = !strcmp(path, "-");
        FILE *f = in ? stdin : fopen(path, "r");
        size_t n = 0;
        FILE *m = f ? open_memstream(raw, &n) : NULL;
        for (int ch; m && (ch = fgetc(f)) != EOF;)
                fputc(ch, m);
        bool read_ok = f && !ferror(f);
        if (f && !in)
                fclose(f);
        if (!m || fclose(m) || !read_ok) {
                fprintf(stderr, "%s: %s: cannot read the job file: %s\n", c->cmd, path,
                        strerror(errno));
                return NULL;
        }
        json_error_t je;
        json_t *o = json_loadb(*raw, n, 0, &je);
        path = in ? "(stdin)" : path;
        if (!o) {
                if (je.line < 1)
                        fprintf(stderr, "%s: %s: %s\n", c->cmd, path, je.text);
                else
                        fprintf(stderr, "%s: %s:%d:%d: %s\n", c->cmd, path, je.line, je.column,
                                je.text);
                return NULL;
        }
        if (!json_is_object(o)) {
                fprintf(stderr, "%s: %s:1:1: a job is a JSON object (docs/api.md, POST /v1/jobs)\n",
                        c->cmd, path);
                json_decref(o);
                return NULL;
        }
        return o;
}

/* loomd's error about a submitted body, as FILE:LINE:COL when the body was the file itself. */
static int submit_failed(const ctl *c, loom_client *cl, int rc, const char *js, bool verbatim)
{
        json_error_t je;
        json_t *o = js ? json_loads(js, 0, &je) : NULL;
        json_t *line = json_object_get(o, "line"), *col = json_object_get(o, "col");
        int st = loom_client_status(cl);
        int ex;
        if ((st == 400 || st == 422) && verbatim && json_is_integer(line) && json_is_integer(col)) {
                const char *f = json_string_value(json_object_get(o, "field"));
                const char *m = json_string_value(json_object_get(o, "error"));
                /* the field once, whether or not loomd's sentence starts with it */
                bool named = f && *f && m && !strncmp(m, f, strlen(f)) && m[strlen(f)] == ':';
                fprintf(stderr, "%s: %s:%lld:%lld: %s%s%s\n", c->cmd,
                        strcmp(c->pos[0], "-") ? c->pos[0] : "(stdin)",
                        (long long)json_integer_value(line), (long long)json_integer_value(col),
                        f && *f && !named ? f : "", f && *f && !named ? ": " : "", m ? m : "");
                ex = EXIT_NO;
        } else
                ex = fail(c, cl, rc, "submit jobs");
        if (rc == LOOM_EREJECT && !c->json && json_is_object(json_object_get(o, "decision"))) {
                char err[128];
                loom_client_render("decision", js, stderr, err, sizeof err);
        } else if (rc == LOOM_EREJECT && c->json)
                printf("%s\n", js);
        json_decref(o);
        return ex;
}

int loom_cmd_submit(int argc, char **argv)
{
        ctl c = {.spec_flags = json_object()};
        int rc0 = setup(&c, "submit", argc, argv, 0, 1);
        json_t *spec = NULL;
        char *raw = NULL;
        int ex = rc0 < 0 ? EXIT_OK : rc0;
        if (!rc0 && c.n_pos == 0 && !json_object_size(c.spec_flags)) {
                fprintf(stderr, "loom submit: give a job file (or -) or the spec's options (see "
                                "`loom submit --help`)\n");
                ex = EXIT_USAGE;
        }
        if (!rc0 && !ex) {
                spec = c.n_pos ? read_job_file(&c, c.pos[0], &raw) : json_object();
                ex = spec ? 0 : EXIT_NO;
        }
        loom_client *cl = !rc0 && !ex ? connect_to(&c, 3) : NULL;
        if (!rc0 && !ex && !cl)
                ex = EXIT_USAGE;
        if (cl) {
                /* The file goes as it is, so loomd's line and column are the file's; flags
                 * override its fields (then positions are of the re-encoded body). */
                bool verbatim = raw && !json_object_size(c.spec_flags);
                json_object_update(spec, c.spec_flags);
                char *body =
                    verbatim ? strdup(raw) : json_dumps(spec, JSON_INDENT(0) | JSON_PRESERVE_ORDER);
                const char *path = c.dry_run   ? "/v1/jobs?dry_run=1&explain=1"
                                   : c.explain ? "/v1/jobs?explain=1"
                                               : "/v1/jobs";
                char key[64], *js = NULL;
                /* a retried submit must not make a second job */
                snprintf(key, sizeof key, "loom-%ld-%d", (long)time(NULL), (int)getpid());
                int rc =
                    body ? loom_client_request(cl, "POST", path, body, c.dry_run ? NULL : key, &js)
                         : LOOM_ENOMEM;
                if (rc)
                        ex = submit_failed(&c, cl, rc, js, verbatim);
                else
                        ex = show(&c, "decision", js);
                if (!rc && !c.json && !c.dry_run) {
                        json_error_t je;
                        json_t *o = json_loads(js, 0, &je);
                        printf("\n`loom job %lld` shows it; its workers run with LOOM_TOKEN set to "
                               "its worker_token (-o json)\n",
                               (long long)json_integer_value(json_object_get(o, "id")));
                        json_decref(o);
                }
                loom_client_free_string(js);
                free(body);
        }
        free(raw);
        json_decref(spec);
        json_decref(c.spec_flags);
        loom_client_free(cl);
        return ex;
}
