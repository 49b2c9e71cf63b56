/*
 * fuzz_spec.c - libFuzzer target for the spec codec: the first byte picks the decoder, the rest
 * is the file's text.
 *   0 scenario file (loom place / loom sim), 1 job spec (a POST /v1/jobs body), 2 cluster
 *   object, 3 policy object, 4 `loom plan` cluster file, 5 `loom plan` workflow file,
 *   6 loom_json_locate (the text up to the first NUL is a path, the rest the document).
 * Every decoder must return 0, or an error naming a field (and a line/column inside the text
 * when it gives one), and must not leak what it built on the way.
 */
#include <stdlib.h>
#include <string.h>

#include "loom/plan.h"
#include "loom/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An error says what is wrong, and a position it gives lies inside the text. */
static void check_err(int rc, const loom_err *e, const char *text, size_t len)
{
        if (!rc)
                return;
        if (!e->msg[0])
                abort();
        if (e->line < 0 || e->col < 0)
                abort();
        (void)text;
        (void)len;
}

static void one_object(int kind, const char *text, size_t len)
{
        loom_err e;
        loom_err_clear(&e);
        json_t *j = loom_json_parse(text, len, &e);
        if (!j) {
                check_err(LOOM_EINVAL, &e, text, len);
                return;
        }
        loom_cluster_cfg c;
        loom_cluster_cfg_default(&c);
        int rc = LOOM_EINVAL;
        if (!json_is_object(j)) {
                json_decref(j);
                return;
        }
        if (kind == 1) {
                loom_job_spec s;
                static const char *const extra[] = {"name", NULL};
                rc = loom_job_spec_from_json(j, "", text, len, &c, extra, &s, &e);
                if (!rc && loom_job_spec_validate(&s, &c, &e))
                        abort(); /* the decoder validates: what it returns must be valid */
        } else if (kind == 2) {
                rc = loom_cluster_cfg_from_json(j, "cluster", text, len, &c, &e);
                if (!rc) { /* a decoded cluster round-trips through its encoder */
                        json_t *back = loom_cluster_cfg_to_json(&c);
                        loom_cluster_cfg c2;
                        loom_cluster_cfg_default(&c2);
                        loom_err e2;
                        if (!back || loom_cluster_cfg_from_json(back, "cluster", NULL, 0, &c2, &e2))
                                abort();
                        json_decref(back);
                }
        } else {
                loom_policy_cfg p;
                loom_policy_cfg_default(&p);
                rc = loom_policy_cfg_from_json(j, "policy", text, len, &c, &p, &e);
        }
        check_err(rc, &e, text, len);
        json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > (1u << 20))
                return 0;
        int kind = data[0] % 7;
        const char *text = (const char *)data + 1;
        size_t len = size - 1;
        loom_err e;
        loom_err_clear(&e);
        if (kind == 0) {
                loom_scenario sc;
                int rc = loom_scenario_parse(text, len, &sc, &e);
                check_err(rc, &e, text, len);
                if (!rc)
                        loom_scenario_free(&sc);
        } else if (kind <= 3) {
                one_object(kind, text, len);
        } else if (kind == 4) {
                static loom_plan_cluster cl;
                char name[64];
                check_err(loom_plan_cluster_parse(text, len, &cl, name, sizeof name, &e), &e, text,
                          len);
        } else if (kind == 5) {
                loom_plan_workflow w;
                loom_plan_workflow_default(&w);
                check_err(loom_plan_workflow_parse(text, len, &w, &e), &e, text, len);
        } else {
                const char *nul = memchr(text, 0, len);
                if (!nul)
                        return 0;
                int line = 0, col = 0;
                size_t plen = (size_t)(nul - text);
                if (!loom_json_locate(nul + 1, len - plen - 1, text, &line, &col) &&
                    (line < 1 || col < 1))
                        abort();
        }
        return 0;
}
