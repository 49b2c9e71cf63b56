/*
 * spec.h - the JSON formats of loom's inputs: cluster, policy, job spec and `loom place`
 * scenarios (docs/formats.md). Shared by the CLI, the simulator and loomd so that one job spec
 * means the same thing everywhere.
 *
 * Errors name the field by path ("jobs[1].slo") and, when the input came from text, its 1-based
 * line and column. Unknown fields are errors (they are usually typos).
 */
#ifndef LOOM_SPEC_H
#define LOOM_SPEC_H

#include <jansson.h>

#include "loom/plan.h"
#include "loom/sched.h"

typedef struct loom_scenario {
        loom_cluster_cfg cluster;
        loom_policy_cfg policy;
        int n_jobs;
        loom_job_spec *jobs; /* owned; loom_scenario_free releases */
} loom_scenario;

/* Parse a scenario from text (name is used in messages, e.g. the file name). On error nothing
 * is allocated and e has field, line and column. */
int loom_scenario_parse(const char *text, size_t len, loom_scenario *out, loom_err *e);
/* Read and parse a file ("-" = stdin). */
int loom_scenario_load(const char *path, loom_scenario *out, loom_err *e);
void loom_scenario_free(loom_scenario *s);
/* A whole file ("-" = stdin, at most 64 MiB) into a new buffer the caller frees. */
int loom_spec_read_file(const char *path, char **text, size_t *len, loom_err *e);

/* `loom plan` inputs (docs/plan.md): a cluster file (devices, GPU types, links by level or
 * pair) and a workflow file decoded over the defaults already in *w. name receives the
 * cluster's optional "name". Errors as above. */
int loom_plan_cluster_parse(const char *text, size_t len, loom_plan_cluster *out, char *name,
                            size_t name_len, loom_err *e);
int loom_plan_workflow_parse(const char *text, size_t len, loom_plan_workflow *w, loom_err *e);
/* Their outputs (new references; NULL when a value has no JSON form, e.g. an infinite time):
 * a plan's groups and tasks with every cost term; `loom plan --json`'s object (fleet is the
 * cluster's name); and the loom job spec of a plan (loom_plan_to_job, GPU counts rounded up to
 * whole nodes of gpus_per_node, id "<algorithm>-<mode>-<model>"). */
json_t *loom_plan_to_json(const loom_plan_cluster *c, const loom_plan_workflow *w,
                          const loom_plan_result *r);
json_t *loom_plan_report_to_json(const char *fleet, const loom_plan_cluster *c,
                                 const loom_plan_workflow *w, const loom_plan_opts *o,
                                 const loom_plan_report *rep);
json_t *loom_plan_job_to_json(const loom_plan_workflow *w, const loom_plan_result *r, double slo,
                              int gpus_per_node);

/* A name a client gives (a job's id or name): any UTF-8 text without control characters
 * (C0, DEL, C1), which would forge lines and send terminal escapes wherever it is logged or
 * printed. 0, or LOOM_EINVAL naming field with the offending character's position. */
int loom_spec_name_check(const char *name, size_t len, const char *field, loom_err *e);

/*
 * Decode one object. `where` is the path prefix used in messages ("jobs[3]", "" for a top-level
 * body). text/len, when not NULL, is the document `obj` was parsed from, used to find line and
 * column of the offending field. extra_ok lists further field names the caller handles itself
 * (NULL-terminated, may be NULL): they are skipped instead of reported as unknown.
 *
 * Job fields: id (string), rollout_gpus, train_gpus (ints), t_roll_s, t_train_s (> 0),
 * sync_s (>= 0, default 0), slo (>= 1), mem_rollout_gb, mem_train_gb (>= 0; default from
 * WEAVE Table 2 when "model_b" is given, else 0), model_b, iterations (>= 0, default 0).
 */
int loom_job_spec_from_json(json_t *obj, const char *where, const char *text, size_t len,
                            const loom_cluster_cfg *c, const char *const *extra_ok,
                            loom_job_spec *out, loom_err *e);
int loom_cluster_cfg_from_json(json_t *obj, const char *where, const char *text, size_t len,
                               loom_cluster_cfg *out, loom_err *e);
int loom_policy_cfg_from_json(json_t *obj, const char *where, const char *text, size_t len,
                              const loom_cluster_cfg *c, loom_policy_cfg *out, loom_err *e);

/* Parse text into a JSON value with a loom_err naming line and column on syntax errors.
 * Returns a new reference or NULL. */
json_t *loom_json_parse(const char *text, size_t len, loom_err *e);

/* Find where the value at `path` (e.g. "jobs[2].slo") starts in text; 0 on success. */
int loom_json_locate(const char *text, size_t len, const char *path, int *line, int *col);

/* Encoders for replies and reports (new references). */
json_t *loom_decision_to_json(const loom_decision *d, const char *job_name);
json_t *loom_job_spec_to_json(const loom_job_spec *s);
json_t *loom_cluster_cfg_to_json(const loom_cluster_cfg *c);

#endif
