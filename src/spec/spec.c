/*
 * spec.c - JSON codec for cluster, policy, job specs and `loom place` scenarios.
 *
 * Decoding walks a jansson object field by field, so every error can name the field by path.
 * Jansson reports positions only for syntax errors; for a semantic error we find the field's
 * position by walking the original text (loom_json_locate in locate.c).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/spec.h"
#include "spec_int.h"

/* Decoding context: where we are, and the text for line/column. */
typedef struct dctx {
        const char *where;
        const char *text;
        size_t len;
        loom_err *e;
} dctx;

static int fail(const dctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(const dctx *c, const char *field, const char *fmt, ...)
{
        char path[128], msg[400];
        if (c->where && c->where[0])
                snprintf(path, sizeof path, "%s%s%s", c->where, field[0] ? "." : "", field);
        else
                snprintf(path, sizeof path, "%s", field);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        int line = 0, col = 0;
        if (c->text)
                loom_json_locate(c->text, c->len, path, &line, &col);
        int rc = loom_err_set(c->e, LOOM_EINVAL, path, "%s: %s", path, msg);
        if (c->e) {
                c->e->line = line;
                c->e->col = col;
        }
        return rc;
}

/* An optional boolean: 0 (absent: *out unchanged) or the failure. */
static int get_bool(const dctx *c, json_t *obj, const char *k, bool *out)
{
        json_t *v = json_object_get(obj, k);
        if (v && !json_is_boolean(v))
                return fail(c, k, "must be true or false");
        if (v)
                *out = json_is_true(v);
        return 0;
}

static int get_number(const dctx *c, json_t *obj, const char *k, bool required, double *out)
{
        json_t *v = json_object_get(obj, k);
        if (!v) {
                if (required)
                        return fail(c, k, "missing required field");
                return 1;
        }
        if (!json_is_number(v))
                return fail(c, k, "must be a number");
        double d = json_number_value(v);
        if (!isfinite(d))
                return fail(c, k, "must be a finite number");
        *out = d;
        return 0;
}

static int get_int(const dctx *c, json_t *obj, const char *k, bool required, int64_t lo, int64_t hi,
                   int64_t *out)
{
        json_t *v = json_object_get(obj, k);
        if (!v) {
                if (required)
                        return fail(c, k, "missing required field");
                return 1;
        }
        if (!json_is_integer(v))
                return fail(c, k, "must be an integer");
        json_int_t x = json_integer_value(v);
        if (x < lo || x > hi)
                return fail(c, k, "must be in %lld..%lld, got %lld", (long long)lo, (long long)hi,
                            (long long)x);
        *out = x;
        return 0;
}

/* An optional number >= 0: *out is left alone when absent; 0 or a negative error. */
static int get_nonneg(const dctx *c, json_t *obj, const char *k, double *out)
{
        double d = 0;
        int rc = get_number(c, obj, k, false, &d);
        if (rc)
                return rc < 0 ? rc : 0;
        if (d < 0)
                return fail(c, k, "must be >= 0, got %g", d);
        *out = d;
        return 0;
}

/* Seconds -> microseconds with a range check. */
static int get_seconds(const dctx *c, json_t *obj, const char *k, bool required, bool positive,
                       loom_us *out)
{
        double s = 0;
        int rc = get_number(c, obj, k, required, &s);
        if (rc)
                return rc;
        if (positive ? !(s > 0) : !(s >= 0))
                return fail(c, k, "must be %s seconds, got %g", positive ? "> 0" : ">= 0", s);
        if (s > 1e6)
                return fail(c, k, "must be at most 1e6 seconds, got %g", s);
        *out = loom_us_from_s(s);
        if (positive && *out == 0)
                return fail(c, k, "must be at least 1 microsecond");
        return 0;
}

static int get_gb(const dctx *c, json_t *obj, const char *k, uint64_t *out)
{
        double gb = 0;
        int rc = get_number(c, obj, k, false, &gb);
        if (rc)
                return rc;
        if (gb < 0 || gb > 1e9)
                return fail(c, k, "must be 0..1e9 GB, got %g", gb);
        *out = (uint64_t)llround(gb * 1e9);
        return 0;
}

const char *loom__spec_unknown_key(json_t *obj, const char *const *known, const char *const *extra)
{
        const char *key;
        json_t *v;
        json_object_foreach(obj, key, v)
        {
                bool ok = false;
                for (int i = 0; known[i] && !ok; i++)
                        ok = !strcmp(known[i], key);
                for (int i = 0; extra && extra[i] && !ok; i++)
                        ok = !strcmp(extra[i], key);
                if (!ok)
                        return key;
        }
        return NULL;
}

/* Levenshtein distance of a and b (letters compared without case), both at most 63 bytes
 * (longer ones count as far apart). */
static size_t edit_distance(const char *a, const char *b)
{
        size_t n = strlen(a), m = strlen(b), row[64];
        if (n >= 64 || m >= 64)
                return SIZE_MAX;
        for (size_t j = 0; j <= m; j++)
                row[j] = j;
        for (size_t i = 1; i <= n; i++) {
                size_t diag = row[0];
                row[0] = i;
                for (size_t j = 1; j <= m; j++) {
                        size_t up = row[j];
                        size_t sub = diag + (tolower((unsigned char)a[i - 1]) !=
                                             tolower((unsigned char)b[j - 1]));
                        size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
                        row[j] = sub < best ? sub : best;
                        diag = up;
                }
        }
        return row[m];
}

const char *loom__spec_nearest(const char *key, const char *const *known, const char *const *extra)
{
        size_t len = strlen(key), limit = len / 3 > 2 ? len / 3 : 2, best_d = SIZE_MAX;
        const char *best = NULL;
        for (int l = 0; l < 2; l++) {
                const char *const *names = l ? extra : known;
                for (int i = 0; names && names[i]; i++) {
                        size_t d = edit_distance(key, names[i]);
                        if (d < best_d && d < strlen(names[i])) {
                                best_d = d;
                                best = names[i];
                        }
                }
        }
        return best_d <= limit ? best : NULL;
}

static int check_fields(const dctx *c, json_t *obj, const char *const *known,
                        const char *const *extra)
{
        const char *key = loom__spec_unknown_key(obj, known, extra);
        const char *near = key ? loom__spec_nearest(key, known, extra) : NULL;
        if (near)
                return fail(c, key, "unknown field (did you mean \"%s\"?)", near);
        return key ? fail(c, key, "unknown field") : 0;
}

/* The serviceized training calls (job_calls.c), optional in a job spec. */
#define CALLS_KNOWN "compute_log_prob_s", "update_actor_s", "sync_weight_s",

int loom_spec_name_check(const char *name, size_t len, const char *field, loom_err *e)
{
        const unsigned char *p = (const unsigned char *)name;
        for (size_t i = 0; i < len; i++) {
                bool c1 = p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f;
                if (p[i] < 0x20 || p[i] == 0x7f || c1)
                        return loom_err_set(e, LOOM_EINVAL, field,
                                            "control character U+%04X at byte %zu: names may "
                                            "not contain control characters",
                                            c1 ? p[i + 1] : p[i], i);
        }
        return 0;
}

int loom_job_spec_from_json(json_t *obj, const char *where, const char *text, size_t len,
                            const loom_cluster_cfg *cl, const char *const *extra_ok,
                            loom_job_spec *out, loom_err *e)
{
        static const char *const known[] = {
            "id",         "rollout_gpus", "train_gpus",     "t_roll_s",     "t_train_s",
            "sync_s",     "slo",          "mem_rollout_gb", "mem_train_gb", "model_b",
            "iterations", "max_restarts", "switch_s",       "head_s",       "cold_s",
            CALLS_KNOWN NULL};
        dctx c = {where, text, len, e};
        if (!json_is_object(obj))
                return fail(&c, "", "a job must be a JSON object");
        int rc = check_fields(&c, obj, known, extra_ok);
        if (rc)
                return rc;
        loom_job_spec s;
        loom_job_spec_init(&s);
        json_t *id = json_object_get(obj, "id");
        if (id) {
                if (!json_is_string(id))
                        return fail(&c, "id", "must be a string");
                if (json_string_length(id) == 0 || json_string_length(id) >= LOOM_JOB_ID_MAX)
                        return fail(&c, "id", "must be 1..%d characters", LOOM_JOB_ID_MAX - 1);
                loom_err ne;
                if (loom_spec_name_check(json_string_value(id), json_string_length(id), "id", &ne))
                        return fail(&c, "id", "%s", ne.msg);
                snprintf(s.id, sizeof s.id, "%s", json_string_value(id));
        }
        int64_t v = 0;
        if ((rc = get_int(&c, obj, "rollout_gpus", true, 1, 1 << 20, &v)))
                return rc;
        s.rollout_gpus = (int)v;
        if ((rc = get_int(&c, obj, "train_gpus", true, 1, 1 << 20, &v)))
                return rc;
        s.train_gpus = (int)v;
        bool calls = false; /* serviceized training calls: t_train_s is then their sum */
        for (int i = 0; i < LOOM_N_CALLS; i++) {
                char k[40];
                snprintf(k, sizeof k, "%s_s", loom_call_name(i));
                if ((rc = get_seconds(&c, obj, k, false, true, &s.t_calls[i])) < 0)
                        return rc;
                calls |= rc == 0;
                s.t_train += s.t_calls[i];
        }
        if ((rc = get_seconds(&c, obj, "t_roll_s", true, true, &s.t_roll)) ||
            (rc = get_seconds(&c, obj, "t_train_s", !calls, true, &s.t_train)) < 0 ||
            (rc = get_seconds(&c, obj, "sync_s", false, false, &s.t_sync)) < 0 ||
            (rc = get_seconds(&c, obj, "switch_s", false, true, &s.t_switch)) < 0 ||
            (rc = get_seconds(&c, obj, "head_s", false, true, &s.t_head)) < 0 ||
            (rc = get_seconds(&c, obj, "cold_s", false, true, &s.t_cold)) < 0)
                return rc;
        if ((rc = get_number(&c, obj, "slo", true, &s.slo)))
                return rc;
        if (s.slo < 1.0 || s.slo > 1000.0)
                return fail(&c, "slo", "must be a slowdown factor in 1..1000, got %g", s.slo);
        double model_b = 0;
        if ((rc = get_number(&c, obj, "model_b", false, &model_b)) < 0)
                return rc;
        if (rc == 0 && !(model_b > 0 && model_b <= 10000))
                return fail(&c, "model_b", "must be a model size in billions, > 0");
        if (rc == 0) {
                s.mem_rollout = loom_table2_mem_rollout(model_b);
                s.mem_train = loom_table2_mem_train(model_b);
        }
        if ((rc = get_gb(&c, obj, "mem_rollout_gb", &s.mem_rollout)) < 0 ||
            (rc = get_gb(&c, obj, "mem_train_gb", &s.mem_train)) < 0)
                return rc;
        if ((rc = get_int(&c, obj, "iterations", false, 0, INT64_C(1) << 40, &v)) < 0)
                return rc;
        if (rc == 0)
                s.iterations = v;
        if ((rc = get_int(&c, obj, "max_restarts", false, 0, LOOM_MAX_RESTARTS_LIMIT, &v)) < 0)
                return rc;
        if (rc == 0)
                s.max_restarts = (int)v;
        loom_err ve;
        loom_err_clear(&ve);
        if (loom_job_spec_validate(&s, cl, &ve))
                return fail(&c, ve.field, "%s", ve.msg);
        *out = s;
        return 0;
}

static int gpu_from_json(const dctx *c, json_t *obj, const char *k, loom_gpu_type *g)
{
        static const char *const known[] = {"name",   "price_per_hour", "hbm_gb",
                                            "tflops", "hbm_tbps",       NULL};
        json_t *o = json_object_get(obj, k);
        if (!o)
                return 0;
        char where[128];
        snprintf(where, sizeof where, "%s%s%s", c->where, c->where[0] ? "." : "", k);
        dctx sub = {where, c->text, c->len, c->e};
        if (!json_is_object(o))
                return fail(&sub, "", "must be an object");
        int rc = check_fields(&sub, o, known, NULL);
        if (rc)
                return rc;
        json_t *name = json_object_get(o, "name");
        if (name) {
                if (!json_is_string(name) || json_string_length(name) == 0 ||
                    json_string_length(name) >= sizeof g->name)
                        return fail(&sub, "name", "must be a string of 1..%d characters",
                                    (int)sizeof g->name - 1);
                snprintf(g->name, sizeof g->name, "%s", json_string_value(name));
        }
        if ((rc = get_nonneg(&sub, o, "price_per_hour", &g->price_per_hour)) ||
            (rc = get_nonneg(&sub, o, "tflops", &g->tflops)) ||
            (rc = get_nonneg(&sub, o, "hbm_tbps", &g->hbm_tbps)))
                return rc;
        if ((rc = get_gb(&sub, o, "hbm_gb", &g->hbm_bytes)) < 0)
                return rc;
        return 0;
}

int loom_cluster_cfg_from_json(json_t *obj, const char *where, const char *text, size_t len,
                               loom_cluster_cfg *out, loom_err *e)
{
        static const char *const known[] = {"gpus_per_node", "host_mem_gb", "rollout_gpu",
                                            "train_gpu", NULL};
        dctx c = {where ? where : "", text, len, e};
        if (!json_is_object(obj))
                return fail(&c, "", "the cluster must be a JSON object");
        int rc = check_fields(&c, obj, known, NULL);
        if (rc)
                return rc;
        loom_cluster_cfg cl;
        loom_cluster_cfg_default(&cl);
        int64_t v = 0;
        if ((rc = get_int(&c, obj, "gpus_per_node", false, 1, 64, &v)) < 0)
                return rc;
        if (rc == 0)
                cl.gpus_per_node = (int)v;
        if ((rc = get_gb(&c, obj, "host_mem_gb", &cl.host_mem_bytes)) < 0)
                return rc;
        if (cl.host_mem_bytes == 0)
                return fail(&c, "host_mem_gb", "must be > 0");
        if ((rc = gpu_from_json(&c, obj, "rollout_gpu", &cl.gpu[LOOM_POOL_ROLLOUT])) ||
            (rc = gpu_from_json(&c, obj, "train_gpu", &cl.gpu[LOOM_POOL_TRAIN])))
                return rc;
        *out = cl;
        return 0;
}

int loom_policy_cfg_from_json(json_t *obj, const char *where, const char *text, size_t len,
                              const loom_cluster_cfg *cl, loom_policy_cfg *out, loom_err *e)
{
        static const char *const known[] = {"max_group_size",   "train_scaling_efficiency",
                                            "warm_switch_s",    "tail_migration",
                                            "tail_threshold",   "tail_keep_gpus",
                                            "placer",           "seed",
                                            "dispatch",         "preempt_margin",
                                            "plex_alpha",       "plex_w1",
                                            "plex_w2",          "plex_duty_max",
                                            "admission",        "learn_after",
                                            "multirate",        "train_rightsize",
                                            "colocate_lone",    "lone_grow",
                                            "join_wait",        "learn_bound",
                                            "move_lone",        "move_members",
                                            "rate_search_open", "plan_tails",
                                            "regroup",          "pool_grow",
                                            "slo_premium",      NULL};
        dctx c = {where ? where : "", text, len, e};
        if (!json_is_object(obj))
                return fail(&c, "", "the policy must be a JSON object");
        int rc = check_fields(&c, obj, known, NULL);
        if (rc)
                return rc;
        loom_policy_cfg p;
        loom_policy_cfg_default(&p);
        int64_t v = 0;
        if ((rc = get_int(&c, obj, "max_group_size", false, 1, LOOM_MAX_GROUP_SIZE, &v)) < 0)
                return rc;
        if (rc == 0)
                p.max_group_size = (int)v;
        if ((rc = get_number(&c, obj, "train_scaling_efficiency", false,
                             &p.train_scaling_efficiency)) < 0)
                return rc;
        if ((rc = get_seconds(&c, obj, "warm_switch_s", false, false, &p.warm_switch)) < 0)
                return rc;
        if ((rc = get_bool(&c, obj, "tail_migration", &p.tail_migration)) ||
            (rc = get_bool(&c, obj, "multirate", &p.multirate)) ||
            (rc = get_bool(&c, obj, "colocate_lone", &p.colocate_lone)) ||
            (rc = get_bool(&c, obj, "lone_grow", &p.lone_grow)) ||
            (rc = get_bool(&c, obj, "join_wait", &p.join_wait)) ||
            (rc = get_bool(&c, obj, "move_lone", &p.move_lone)) ||
            (rc = get_bool(&c, obj, "move_members", &p.move_members)) ||
            (rc = get_bool(&c, obj, "plan_tails", &p.plan_tails)) ||
            (rc = get_bool(&c, obj, "regroup", &p.regroup)) ||
            (rc = get_bool(&c, obj, "pool_grow", &p.pool_grow)) ||
            (rc = get_bool(&c, obj, "train_rightsize", &p.train_rightsize)))
                return rc;
        json_t *lb = json_object_get(obj, "learn_bound");
        if (lb &&
            loom_learn_bound_parse(json_is_string(lb) ? json_string_value(lb) : "", &p.learn_bound))
                return fail(&c, "learn_bound", "must be \"normal\" or \"order\"");
        if ((rc = get_int(&c, obj, "rate_search_open", false, 0, 1000000000, &v)) < 0)
                return rc;
        if (rc == 0)
                p.rate_search_open = (int)v;
        if ((rc = get_number(&c, obj, "tail_threshold", false, &p.tail_threshold)) < 0)
                return rc;
        /* policy.slo_cap: a number >= 0 turns it on; absent or null, off */
        json_t *sp = json_object_get(obj, "slo_premium");
        if (sp && !json_is_null(sp)) {
                if (!json_is_number(sp) || !(json_number_value(sp) >= 0) ||
                    !(json_number_value(sp) <= 100))
                        return fail(&c, "slo_premium",
                                    "must be a number from 0 to 100 (a fraction: 0.25 is 25%%), "
                                    "or null for no cap");
                p.slo_cap = true;
                p.slo_premium = json_number_value(sp);
        }
        if ((rc = get_int(&c, obj, "tail_keep_gpus", false, 1, 64, &v)) < 0)
                return rc;
        if (rc == 0)
                p.tail_keep_gpus = (int)v;
        json_t *pl = json_object_get(obj, "placer");
        if (pl) {
                const char *n = json_is_string(pl) ? json_string_value(pl) : "";
                if (!strcmp(n, "loom"))
                        p.placer = LOOM_PLACER_LOOM;
                else if (!strcmp(n, "random"))
                        p.placer = LOOM_PLACER_RANDOM;
                else if (!strcmp(n, "greedy"))
                        p.placer = LOOM_PLACER_GREEDY;
                else if (!strcmp(n, "plex"))
                        p.placer = LOOM_PLACER_PLEX;
                else
                        return fail(&c, "placer",
                                    "must be \"loom\", \"random\", \"greedy\" or \"plex\"");
        }
        json_t *dp = json_object_get(obj, "dispatch");
        if (dp && loom_dispatch_parse(json_is_string(dp) ? json_string_value(dp) : "", &p.dispatch))
                return fail(&c, "dispatch", "must be \"rr\", \"hrrs\" or \"fcfs\"");
        json_t *ad = json_object_get(obj, "admission");
        if (ad &&
            loom_admission_parse(json_is_string(ad) ? json_string_value(ad) : "", &p.admission))
                return fail(&c, "admission", "must be \"worst\", \"p99\" or \"p95\"");
        if ((rc = get_int(&c, obj, "learn_after", false, 1, LOOM_LEARN_WINDOW, &v)) < 0)
                return rc;
        if (rc == 0)
                p.learn_after = (int)v;
        if ((rc = get_number(&c, obj, "preempt_margin", false, &p.preempt_margin)) < 0 ||
            (rc = get_number(&c, obj, "plex_alpha", false, &p.plex_alpha)) < 0 ||
            (rc = get_number(&c, obj, "plex_w1", false, &p.plex_w1)) < 0 ||
            (rc = get_number(&c, obj, "plex_w2", false, &p.plex_w2)) < 0 ||
            (rc = get_number(&c, obj, "plex_duty_max", false, &p.plex_duty_max)) < 0)
                return rc;
        if ((rc = get_int(&c, obj, "seed", false, 0, INT64_MAX, &v)) < 0)
                return rc;
        if (rc == 0)
                p.seed = (uint64_t)v;
        loom_err ve;
        loom_err_clear(&ve);
        if (loom_policy_cfg_validate(&p, cl, &ve))
                return fail(&c, ve.field, "%s", ve.msg);
        *out = p;
        return 0;
}

json_t *loom_json_parse(const char *text, size_t len, loom_err *e)
{
        json_error_t je;
        size_t blank = 0;
        while (text && blank < len && text[blank] && strchr(" \t\r\n", text[blank]))
                blank++;
        if (!text || blank == len) { /* jansson: "wrong arguments" at -1:-1 for no text at all */
                loom_err_set(e, LOOM_EINVAL, "", "invalid JSON: %s",
                             len ? "only white space, no value" : "empty, no value");
                if (e)
                        e->line = e->col = 1;
                return NULL;
        }
        json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!v) {
                loom_err_set(e, LOOM_EINVAL, "", "invalid JSON: %s", je.text);
                if (e) { /* jansson's column is 0 at a line's start (an end of file there) */
                        e->line = je.line > 0 ? je.line : 0;
                        e->col = je.line > 0 ? (je.column > 0 ? je.column : 1) : 0;
                }
        }
        return v;
}

int loom_scenario_parse(const char *text, size_t len, loom_scenario *out, loom_err *e)
{
        memset(out, 0, sizeof *out);
        json_t *root = loom_json_parse(text, len, e);
        if (!root)
                return LOOM_EINVAL;
        static const char *const known[] = {"cluster", "policy", "jobs", NULL};
        dctx c = {"", text, len, e};
        loom_scenario sc = {0};
        int rc = 0;
        json_t *jobs = NULL;
        bool bare = false;
        loom_cluster_cfg_default(&sc.cluster);
        loom_policy_cfg_default(&sc.policy);
        if (!json_is_object(root)) {
                rc = fail(&c, "", "a scenario must be a JSON object with a \"jobs\" array");
                goto out;
        }
        /* A bare job spec (what `loom plan --emit-job` prints) is one job on the defaults. */
        bare = json_object_get(root, "rollout_gpus") && !json_object_get(root, "jobs");
        if (bare) {
                jobs = json_pack("[O]", root);
                if (!jobs) {
                        rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                        goto out;
                }
                goto decode;
        }
        if ((rc = check_fields(&c, root, known, NULL)))
                goto out;
        json_t *cl = json_object_get(root, "cluster");
        if (cl && (rc = loom_cluster_cfg_from_json(cl, "cluster", text, len, &sc.cluster, e)))
                goto out;
        json_t *po = json_object_get(root, "policy");
        if (po &&
            (rc = loom_policy_cfg_from_json(po, "policy", text, len, &sc.cluster, &sc.policy, e)))
                goto out;
        jobs = json_object_get(root, "jobs");
        if (!jobs || !json_is_array(jobs)) {
                rc = fail(&c, "jobs", jobs ? "must be an array" : "missing required field");
                goto out;
        }
decode:
        sc.n_jobs = (int)json_array_size(jobs);
        sc.jobs = calloc(sc.n_jobs ? (size_t)sc.n_jobs : 1, sizeof *sc.jobs);
        if (!sc.jobs) {
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
                goto out;
        }
        for (int i = 0; i < sc.n_jobs && !rc; i++) {
                char where[32] = "";
                if (!bare)
                        snprintf(where, sizeof where, "jobs[%d]", i);
                rc = loom_job_spec_from_json(json_array_get(jobs, (size_t)i), where, text, len,
                                             &sc.cluster, NULL, &sc.jobs[i], e);
                if (!rc && !sc.jobs[i].id[0])
                        snprintf(sc.jobs[i].id, sizeof sc.jobs[i].id, "job%d", i);
                for (int k = 0; k < i && !rc; k++)
                        if (!strcmp(sc.jobs[k].id, sc.jobs[i].id)) {
                                dctx jc = {where, text, len, e};
                                rc = fail(&jc, "id", "duplicate job id \"%s\"", sc.jobs[i].id);
                        }
        }
out:
        if (bare)
                json_decref(jobs);
        json_decref(root);
        if (rc) {
                free(sc.jobs);
                return rc;
        }
        *out = sc;
        return 0;
}

int loom_spec_read_file(const char *path, char **text, size_t *len, loom_err *e)
{
        FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
        if (!f)
                return loom_err_set(e, LOOM_EIO, "", "%s: %s", path, strerror(errno));
        size_t cap = 1 << 16, n = 0;
        char *buf = malloc(cap);
        int rc = 0;
        while (buf) {
                size_t k = fread(buf + n, 1, cap - n, f);
                n += k;
                if (n < cap)
                        break;
                if (cap >= (size_t)64 << 20) {
                        rc = loom_err_set(e, LOOM_ERANGE, "", "%s: larger than 64 MiB", path);
                        break;
                }
                char *p = realloc(buf, cap *= 2);
                if (!p)
                        free(buf);
                buf = p;
        }
        if (!buf)
                rc = loom_err_set(e, LOOM_ENOMEM, "", "out of memory");
        else if (!rc && ferror(f))
                rc = loom_err_set(e, LOOM_EIO, "", "%s: read error", path);
        if (f != stdin)
                fclose(f);
        if (rc) {
                free(buf);
                return rc;
        }
        *text = buf;
        *len = n;
        return 0;
}

int loom_scenario_load(const char *path, loom_scenario *out, loom_err *e)
{
        char *text;
        size_t len;
        int rc = loom_spec_read_file(path, &text, &len, e);
        if (rc)
                return rc;
        rc = loom_scenario_parse(text, len, out, e);
        free(text);
        return rc;
}

void loom_scenario_free(loom_scenario *s)
{
        if (s) {
                free(s->jobs);
                s->jobs = NULL;
                s->n_jobs = 0;
        }
}

/* ---- encoders ---------------------------------------------------------------------- */

static json_t *node_ids(const loom_node_id *ids, int n)
{
        json_t *a = json_array();
        for (int i = 0; i < n; i++)
                json_array_append_new(a, json_integer(ids[i]));
        return a;
}

static double round6(double x)
{
        return round(x * 1e6) / 1e6;
}

json_t *loom_decision_to_json(const loom_decision *d, const char *job_name)
{
        json_t *o = json_object();
        json_object_set_new(o, "job", json_string(job_name ? job_name : ""));
        json_object_set_new(o, "decision", json_string(loom_decision_kind_name(d->kind)));
        if (d->kind != LOOM_DECISION_REJECTED) {
                json_object_set_new(o, "group", json_integer(d->group));
                json_object_set_new(o, "rollout_nodes",
                                    node_ids(d->rollout_nodes, d->n_rollout_nodes));
                json_object_set_new(o, "train_nodes", node_ids(d->train_nodes, d->n_train_nodes));
                json_object_set_new(o, "marginal_cost_per_hour",
                                    json_real(round6(d->marginal_cost_per_hour)));
                json_object_set_new(o, "t_meta_s", json_real(loom_us_to_s(d->t_meta)));
                json_object_set_new(o, "utilisation", json_real(round6(d->utilisation)));
                json_object_set_new(o, "rate", json_integer(d->rate > 1 ? d->rate : 1));
                if (d->slo_effective > 0) /* policy.slo_cap relaxed the SLO to this */
                        json_object_set_new(o, "slo_effective",
                                            json_real(round6(d->slo_effective)));
        }
        json_t *cs = json_array();
        for (int i = 0; i < d->n_candidates; i++) {
                const loom_candidate *c = &d->candidates[i];
                json_t *j = json_object();
                json_object_set_new(j, "kind", json_string(loom_decision_kind_name(c->kind)));
                json_object_set_new(
                    j, "group", c->group == LOOM_NEW_GROUP ? json_null() : json_integer(c->group));
                json_object_set_new(j, "rollout_nodes",
                                    node_ids(c->rollout_nodes, c->n_rollout_nodes));
                json_object_set_new(j, "new_rollout_nodes", json_integer(c->new_rollout_nodes));
                json_object_set_new(j, "new_train_nodes", json_integer(c->new_train_nodes));
                json_object_set_new(j, "marginal_cost_per_hour",
                                    json_real(round6(c->marginal_cost_per_hour)));
                json_object_set_new(j, "t_meta_s", json_real(loom_us_to_s(c->t_meta)));
                json_object_set_new(j, "utilisation", json_real(round6(c->utilisation)));
                json_object_set_new(j, "rate", json_integer(c->rate > 1 ? c->rate : 1));
                json_object_set_new(j, "verdict",
                                    json_string(c->reject == LOOM_REJECT_NONE
                                                    ? "chosen"
                                                    : loom_reject_name(c->reject)));
                json_object_set_new(j, "why", json_string(c->why));
                json_array_append_new(cs, j);
        }
        json_object_set_new(o, "candidates", cs);
        json_object_set_new(o, "reason", json_string(d->reason));
        return o;
}

json_t *loom_job_spec_to_json(const loom_job_spec *s)
{
        json_t *o = json_object();
        if (s->id[0])
                json_object_set_new(o, "id", json_string(s->id));
        json_object_set_new(o, "rollout_gpus", json_integer(s->rollout_gpus));
        json_object_set_new(o, "train_gpus", json_integer(s->train_gpus));
        json_object_set_new(o, "t_roll_s", json_real(loom_us_to_s(s->t_roll)));
        json_object_set_new(o, "t_train_s", json_real(loom_us_to_s(s->t_train)));
        json_object_set_new(o, "sync_s", json_real(loom_us_to_s(s->t_sync)));
        json_object_set_new(o, "slo", json_real(s->slo));
        json_object_set_new(o, "mem_rollout_gb", json_real((double)s->mem_rollout / 1e9));
        json_object_set_new(o, "mem_train_gb", json_real((double)s->mem_train / 1e9));
        json_object_set_new(o, "iterations", json_integer(s->iterations));
        json_object_set_new(o, "max_restarts", json_integer(s->max_restarts));
        if (s->t_switch > 0)
                json_object_set_new(o, "switch_s", json_real(loom_us_to_s(s->t_switch)));
        if (s->t_head > 0)
                json_object_set_new(o, "head_s", json_real(loom_us_to_s(s->t_head)));
        if (s->t_cold > 0)
                json_object_set_new(o, "cold_s", json_real(loom_us_to_s(s->t_cold)));
        for (int i = 0; i < LOOM_N_CALLS; i++)
                if (s->t_calls[i] > 0) {
                        char k[40];
                        snprintf(k, sizeof k, "%s_s", loom_call_name(i));
                        json_object_set_new(o, k, json_real(loom_us_to_s(s->t_calls[i])));
                }
        return o;
}

static json_t *gpu_to_json(const loom_gpu_type *g)
{
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(g->name));
        json_object_set_new(o, "price_per_hour", json_real(g->price_per_hour));
        json_object_set_new(o, "hbm_gb", json_real((double)g->hbm_bytes / 1e9));
        json_object_set_new(o, "tflops", json_real(g->tflops));
        json_object_set_new(o, "hbm_tbps", json_real(g->hbm_tbps));
        return o;
}

json_t *loom_cluster_cfg_to_json(const loom_cluster_cfg *c)
{
        json_t *o = json_object();
        json_object_set_new(o, "gpus_per_node", json_integer(c->gpus_per_node));
        json_object_set_new(o, "host_mem_gb", json_real((double)c->host_mem_bytes / 1e9));
        json_object_set_new(o, "rollout_gpu", gpu_to_json(&c->gpu[LOOM_POOL_ROLLOUT]));
        json_object_set_new(o, "train_gpu", gpu_to_json(&c->gpu[LOOM_POOL_TRAIN]));
        return o;
}
