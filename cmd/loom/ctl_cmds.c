/*
 * ctl_cmds.c - `loom jobs`, `job`, `cancel`, `groups`, `nodes`, `cluster`, `events`, `submit`
 * (ctl.h): each parses its arguments, asks loomd and prints.
 */
#include "ctl.h"

int loom_cmd_jobs(int argc, char **argv)
{
        SETUP("jobs", 0, 0);
        char *js = NULL;
        int rc = loom_client_jobs(cl, &c.filter, &js);
        return ctl_answer(&c, cl, rc, js, "list jobs", "jobs");
}

int loom_cmd_job(int argc, char **argv)
{
        SETUP("job", 1, 1);
        uint32_t id;
        char *js = NULL;
        int ex = ctl_job_id(&c, c.pos[0], &id);
        if (ex) {
                loom_client_free(cl);
                return ex;
        }
        int rc = loom_client_job_report(cl, id, &js);
        return ctl_answer(&c, cl, rc, js, "read this job", "job");
}

int loom_cmd_cancel(int argc, char **argv)
{
        SETUP("cancel", 1, 64);
        int ex = EXIT_OK;
        for (int i = 0; i < c.n_pos && ex != EXIT_USAGE; i++) {
                uint32_t id;
                char path[48], *js = NULL;
                if ((ex = ctl_job_id(&c, c.pos[i], &id)))
                        break;
                snprintf(path, sizeof path, "/v1/jobs/%u", id);
                int rc = loom_client_request(cl, "DELETE", path, NULL, NULL, &js);
                int one = rc ? ctl_fail(&c, cl, rc, "cancel jobs") : EXIT_OK;
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
        return ctl_answer(&c, cl, rc, js, "list groups (they name every tenant's jobs)", "groups");
}

int loom_cmd_nodes(int argc, char **argv)
{
        SETUP("nodes", 0, 0);
        char *js = NULL;
        int rc = loom_client_nodes(cl, &js);
        return ctl_answer(&c, cl, rc, js, "list nodes", "nodes");
}

int loom_cmd_cluster(int argc, char **argv)
{
        SETUP("cluster", 0, 0);
        char *js = NULL;
        int rc = loom_client_request(cl, "GET", "/v1/cluster", NULL, NULL, &js);
        return ctl_answer(&c, cl, rc, js, "read the cluster", "cluster");
}

int loom_cmd_events(int argc, char **argv)
{
        ctl c = {0};
        int rc0 = ctl_setup(&c, "events", argc, argv, 0, 0);
        if (rc0)
                return rc0 < 0 ? EXIT_OK : rc0;
        /* A watch rides over a loomd restart as workers do; a single look gives up soon. */
        loom_client *cl = ctl_connect(&c, c.watch ? 60 : 3);
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
                        ex = ctl_fail(&c, cl, rc, "read events");
                        break;
                }
                if (c.json)
                        ctl_events_json(js);
                else
                        ex = ctl_show(&c, first ? "events" : "event-rows", js);
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

int loom_cmd_submit(int argc, char **argv)
{
        ctl c = {.spec_flags = json_object()};
        int rc0 = ctl_setup(&c, "submit", argc, argv, 0, 1);
        json_t *spec = NULL;
        char *raw = NULL;
        int ex = rc0 < 0 ? EXIT_OK : rc0;
        if (!rc0 && c.n_pos == 0 && !json_object_size(c.spec_flags)) {
                fprintf(stderr, "loom submit: give a job file (or -) or the spec's options (see "
                                "`loom submit --help`)\n");
                ex = EXIT_USAGE;
        }
        if (!rc0 && !ex) {
                spec = c.n_pos ? ctl_read_job_file(&c, c.pos[0], &raw) : json_object();
                ex = spec ? 0 : EXIT_NO;
        }
        loom_client *cl = !rc0 && !ex ? ctl_connect(&c, 3) : NULL;
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
                        ex = ctl_submit_failed(&c, cl, rc, js, verbatim);
                else
                        ex = ctl_show(&c, "decision", js);
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
