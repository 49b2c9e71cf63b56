/*
 * ctl_io.c - the client commands' side of loomd (ctl.h): connecting, errors that say what to
 * do, and printing replies.
 */
#include "ctl.h"

loom_client *ctl_connect(ctl *c, double retry_for_s)
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
int ctl_fail(const ctl *c, loom_client *cl, int rc, const char *what)
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
int ctl_show(const ctl *c, const char *view, const char *js)
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

int ctl_answer(const ctl *c, loom_client *cl, int rc, char *js, const char *what, const char *view)
{
        int ex = rc ? ctl_fail(c, cl, rc, what) : ctl_show(c, view, js);
        loom_client_free_string(js);
        loom_client_free(cl);
        return ex;
}

/* -o json: one event per line, so that a script can read a --watch as it comes. */
void ctl_events_json(const char *js)
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

/* The job file (or - for stdin) as a JSON object, and its text in *raw (malloc'd): sent as it is,
 * loomd's line and column of a field it refuses are the file's. A syntax error as FILE:LINE:COL. */
json_t *ctl_read_job_file(const ctl *c, const char *path, char **raw)
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
int ctl_submit_failed(const ctl *c, loom_client *cl, int rc, const char *js, bool verbatim)
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
                ex = ctl_fail(c, cl, rc, "submit jobs");
        if (rc == LOOM_EREJECT && !c->json && json_is_object(json_object_get(o, "decision"))) {
                char err[128];
                loom_client_render("decision", js, stderr, err, sizeof err);
        } else if (rc == LOOM_EREJECT && c->json)
                printf("%s\n", js);
        json_decref(o);
        return ex;
}
