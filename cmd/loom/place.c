/*
 * place.c - `loom place SCENARIO.json`: place a scenario's jobs in order and print one JSON
 * decision per job (schema in docs/formats.md). Nothing is placed unless the whole file is valid.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "loom/spec.h"

static void usage(FILE *f)
{
        fprintf(f,
                "usage: loom place [--compact] [--multirate on|off] [--train-rightsize on|off]\n"
                "                  [--colocate-lone on|off] SCENARIO.json\n"
                "\n"
                "Reads a cluster (optional), a policy (optional) and a list of job arrivals,\n"
                "places the jobs in order with loom's inter-group placement (Algorithm 1) and\n"
                "prints one JSON object per job: the decision, its group and nodes, the marginal\n"
                "cost, the resulting meta-iteration time and every candidate it looked at with\n"
                "the reason it was not chosen. Use - to read the scenario from stdin.\n"
                "\n"
                "  --compact          leave out the candidate list\n"
                "  --multirate on|off override the policy's multirate setting\n"
                "  --train-rightsize on|off  override the policy's train_rightsize setting\n"
                "  --colocate-lone on|off    override the policy's colocate_lone setting\n"
                "\n"
                "Exit status: 0 placed, 1 invalid scenario, 2 bad usage.\n"
                "Format: docs/formats.md. Example: examples/temporal-mux.json\n");
}

static void print_err(const char *path, const loom_err *e)
{
        size_t n = strlen(path);
        if (!strncmp(e->msg, path, n) && e->msg[n] == ':') /* unreadable: the path is there */
                fprintf(stderr, "loom place: %s\n", e->msg);
        else if (e->line > 0)
                fprintf(stderr, "loom place: %s:%d:%d: %s\n", path, e->line, e->col, e->msg);
        else
                fprintf(stderr, "loom place: %s: %s\n", path, e->msg);
}

/* The group's members after the placement, each with its rate (re-rated ones included). */
static json_t *members_json(const loom_sched *s, loom_group_id gid)
{
        json_t *a = json_array();
        loom_group_info g;
        if (loom_sched_group_info(s, gid, &g))
                return a;
        for (int i = 0; i < g.n_members; i++) {
                loom_job_info ji;
                if (loom_sched_job_info(s, g.members[i], &ji))
                        continue;
                json_array_append_new(
                    a, json_pack("{s:s,s:i}", "job", ji.spec.id, "rate", g.rates[i]));
        }
        return a;
}

int loom_cmd_place(int argc, char **argv)
{
        const char *path = NULL;
        bool compact = false;
        /* policy switches given (loom_policy_switch names), applied over the scenario's */
        const char *sw[4];
        bool on[4];
        int nsw = 0;
        loom_policy_cfg probe;
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        usage(stdout);
                        return 0;
                } else if (!strcmp(argv[i], "--compact")) {
                        compact = true;
                } else if (!strncmp(argv[i], "--", 2) && loom_policy_switch(&probe, argv[i] + 2)) {
                        if (i + 1 >= argc ||
                            (strcmp(argv[i + 1], "on") && strcmp(argv[i + 1], "off"))) {
                                fprintf(stderr, "loom place: %s takes on or off\n", argv[i]);
                                return 2;
                        }
                        int k = 0; /* the same switch again: the last one wins */
                        while (k < nsw && strcmp(sw[k], argv[i] + 2))
                                k++;
                        sw[k] = argv[i] + 2;
                        on[k] = !strcmp(argv[++i], "on");
                        nsw += k == nsw;
                } else if (argv[i][0] == '-' && argv[i][1]) {
                        fprintf(stderr, "loom place: unknown option '%s'\n", argv[i]);
                        usage(stderr);
                        return 2;
                } else if (path) {
                        fprintf(stderr, "loom place: one scenario file, please\n");
                        return 2;
                } else {
                        path = argv[i];
                }
        }
        if (!path) {
                usage(stderr);
                return 2;
        }
        loom_err e;
        loom_err_clear(&e);
        loom_scenario sc;
        int rc = loom_scenario_load(path, &sc, &e);
        if (rc) {
                print_err(path, &e);
                return 1;
        }
        for (int k = 0; k < nsw; k++)
                *loom_policy_switch(&sc.policy, sw[k]) = on[k];
        loom_sched *s = loom_sched_new(&sc.cluster, &sc.policy, &e);
        if (!s) {
                print_err(path, &e);
                loom_scenario_free(&sc);
                return 1;
        }
        int status = 0;
        for (int i = 0; i < sc.n_jobs; i++) {
                loom_decision d;
                loom_decision_init(&d, !compact);
                loom_job_id id;
                rc = loom_sched_submit(s, 0, &sc.jobs[i], &d, &id, &e);
                if (rc && rc != LOOM_EREJECT) {
                        print_err(path, &e);
                        loom_decision_free(&d);
                        status = 1;
                        break;
                }
                json_t *o = loom_decision_to_json(&d, sc.jobs[i].id);
                if (rc == 0)
                        json_object_set_new(o, "members", members_json(s, d.group));
                if (compact)
                        json_object_del(o, "candidates");
                char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
                if (line)
                        puts(line);
                free(line);
                json_decref(o);
                loom_decision_free(&d);
        }
        loom_action a;
        while (loom_sched_next_action(s, &a))
                ; /* `place` only plans; nothing executes the phases */
        loom_sched_free(s);
        loom_scenario_free(&sc);
        return status;
}
