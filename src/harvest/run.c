/*
 * run.c - the runs behind `loom harvest sim`, `node` and `replay`, and their printed forms: the
 * simulator over a list of policies (a table, or one JSON object per policy), a node served
 * until its caller says stop, a trace file replayed against a node. Errors go into loom_err
 * with the complete message; results go to the FILE * the caller passes.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "loom/harvest.h"
#include "sim_int.h"

int hv_err_lead(loom_err *e, int rc, const char *what)
{
        if (!rc || !e)
                return rc;
        if (!what)
                what = e->field;
        if (what[0]) {
                char msg[sizeof e->msg];
                snprintf(msg, sizeof msg, "%s", e->msg);
                snprintf(e->msg, sizeof e->msg, "%.127s: %.380s", what, msg);
        }
        return rc;
}

int loom_harvest_policy_list(const char *s, loom_harvest_policy *out, size_t *n, loom_err *e)
{
        *n = 0;
        if (!strcmp(s, "all")) {
                for (int i = 0; i < LOOM_HARVEST_NPOLICIES; i++)
                        out[(*n)++] = (loom_harvest_policy)i;
                return 0;
        }
        char buf[256];
        snprintf(buf, sizeof buf, "%s", s);
        for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (*n >= LOOM_HARVEST_NPOLICIES)
                        return loom_err_set(e, LOOM_ERANGE, "policy", "too many");
                int rc = loom_harvest_policy_parse(tok, &out[*n], e);
                if (rc)
                        return rc;
                (*n)++;
        }
        return 0;
}

int loom_harvest_role_parse(const char *s, loom_harvest_role *out, loom_err *e)
{
        if (!strcmp(s, "colocated"))
                *out = LOOM_HARVEST_COLOCATED;
        else if (!strcmp(s, "decode"))
                *out = LOOM_HARVEST_DECODE;
        else
                return loom_err_set(e, LOOM_EINVAL, "role", "'%s' is not colocated or decode", s);
        return 0;
}

int loom_harvest_admit_parse(const char *s, loom_harvest_admit_mode *out, int *plain, loom_err *e)
{
        static const char *const names[] = {"dual", "ttft", "tpot", "none"};
        *plain = !strcmp(s, "eq12");
        if (*plain) {
                *out = LOOM_HARVEST_ADMIT_DUAL;
                return 0;
        }
        for (int k = 0; k < 4; k++)
                if (!strcmp(s, names[k])) {
                        *out = (loom_harvest_admit_mode)k;
                        return 0;
                }
        return loom_err_set(e, LOOM_EINVAL, "admit", "'%s' is not dual, eq12, ttft, tpot or none",
                            s);
}

void loom_harvest_sim_print(FILE *f, const loom_harvest_sim_cfg *c,
                            const loom_harvest_sim_result *r, double roll_s, int json)
{
        double speedup = r->rollout_s > 0 ? roll_s / r->rollout_s : 0;
        if (!json) {
                fprintf(f, "%-11s %10.1f %8.3f %8.1f %8.1f %8.1f %8.4f %8.4f %7llu %7llu %7llu\n",
                        loom_harvest_policy_name(r->policy), r->rollout_s, speedup, r->ttft_p99_ms,
                        r->tpot_p99_ms, r->itl_p99_ms, r->serving_slo_attainment,
                        r->preempted_gpu_time_frac, (unsigned long long)r->turns_on_serving,
                        (unsigned long long)r->aborted, (unsigned long long)r->cuts);
                return;
        }
        fprintf(f,
                "{\"policy\":\"%s\",\"pair\":\"%s\",\"density\":%g,\"borrow\":%u,\"batch\":%u,"
                "\"group\":%u,\"trajectories_per_step\":%llu,\"rollout_s\":%.3f,"
                "\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,\"tpot_p50_ms\":%.2f,"
                "\"tpot_p99_ms\":%.2f,\"itl_p50_ms\":%.2f,\"itl_p99_ms\":%.2f,"
                "\"serving_slo_attainment\":%.5f,\"speedup_vs_roll\":%.4f,"
                "\"preempted_gpu_time_frac\":%.5f,\"served\":%llu,\"turns\":%llu,"
                "\"turns_on_serving\":%llu,\"affinity_hits\":%llu,\"aborted\":%llu,"
                "\"stalls\":%llu,\"cuts\":%llu,\"evictions\":%llu,\"route_us_mean\":%.3f,"
                "\"route_us_p99\":%.1f,\"route_us_max\":%.3f,\"sim_s\":%.1f,\"wall_s\":%.3f}\n",
                loom_harvest_policy_name(r->policy), c->pair, c->density,
                r->policy == LOOM_HARVEST_ROLL ? 0 : c->borrow, c->batch, c->group,
                (unsigned long long)c->batch * c->group, r->rollout_s, r->ttft_p50_ms,
                r->ttft_p99_ms, r->tpot_p50_ms, r->tpot_p99_ms, r->itl_p50_ms, r->itl_p99_ms,
                r->serving_slo_attainment, speedup, r->preempted_gpu_time_frac,
                (unsigned long long)r->served, (unsigned long long)r->turns,
                (unsigned long long)r->turns_on_serving, (unsigned long long)r->affinity_hits,
                (unsigned long long)r->aborted, (unsigned long long)r->stalls,
                (unsigned long long)r->cuts, (unsigned long long)r->evictions, r->route_us_mean,
                r->route_us_p99, r->route_us_max, r->sim_s, r->wall_s);
}

/* Every policy of list after roll's result: a row (or JSON line) each, flushed as it comes. */
static int sim_rows(loom_harvest_sim_cfg *c, const loom_harvest_sim_result *roll,
                    const loom_harvest_policy *list, size_t n, int json, FILE *out, loom_err *e)
{
        if (!json)
                fprintf(out, "%-11s %10s %8s %8s %8s %8s %8s %8s %7s %7s %7s\n", "policy",
                        "rollout_s", "speedup", "ttft99", "tpot99", "itl99", "slo_att", "preempt",
                        "spill", "aborts", "cuts");
        for (size_t i = 0; i < n; i++) {
                loom_harvest_sim_result r = *roll;
                if (list[i] != LOOM_HARVEST_ROLL) {
                        c->policy = list[i];
                        int rc = loom_harvest_sim_run(c, &r, e);
                        if (rc)
                                return hv_err_lead(e, rc, loom_harvest_policy_name(list[i]));
                }
                loom_harvest_sim_print(out, c, &r, roll->rollout_s, json);
                fflush(out);
        }
        return 0;
}

int loom_harvest_sim_report(const loom_harvest_sim_cfg *cfg, const char *trace,
                            const loom_harvest_policy *list, size_t n, int json, FILE *out,
                            loom_err *e)
{
        loom_harvest_trace tr;
        int rc = loom_harvest_trace_load(trace, &tr, e);
        if (rc)
                return rc;
        loom_harvest_sim_cfg c = *cfg;
        c.trace = &tr;
        c.policy = LOOM_HARVEST_ROLL; /* roll first: every other policy's speedup is against it */
        loom_harvest_sim_result roll;
        rc = loom_harvest_sim_run(&c, &roll, e);
        if (rc)
                hv_err_lead(e, rc, NULL);
        else
                rc = sim_rows(&c, &roll, list, n, json, out, e);
        loom_harvest_trace_free(&tr);
        return rc;
}

int loom_harvest_node_serve(const loom_harvest_node_cfg *c, double for_s, int (*stop)(void),
                            FILE *out, loom_err *e)
{
        loom_harvest_node_cfg own = *c;
        if (own.headroom_pages == UINT32_MAX) /* not given: 20% of the pool (0 from the pair's) */
                own.headroom_pages = own.pages / 5;
        if (own.pages && own.headroom_pages > own.pages)
                return loom_err_set(e, LOOM_EINVAL, "headroom_pages",
                                    "--headroom-pages: %u exceeds --pages %u", own.headroom_pages,
                                    own.pages);
        c = &own;
        loom_harvest_node *n;
        int rc = loom_harvest_node_start(c, &n, e);
        if (rc)
                return hv_err_lead(e, rc, NULL);
        fprintf(out, "listening on 127.0.0.1:%u\n", loom_harvest_node_port(n));
        fflush(out);
        /* counts polls, not the clock: a loaded host stretches --for-s rather than cut it */
        for (double waited = 0; !stop() && (for_s <= 0 || waited < for_s); waited += 0.02)
                usleep(20000);
        loom_harvest_node_stats s;
        loom_harvest_node_stats_get(n, &s);
        loom_harvest_node_stop(n);
        char line[2048];
        loom_harvest_node_stats_json(&s, c->weights != NULL, line, sizeof line);
        fputs(line, out);
        return 0;
}

void loom_harvest_replay_print(FILE *f, const loom_harvest_replay_result *r, int json)
{
        if (json)
                fprintf(f,
                        "{\"sent\":%llu,\"ok\":%llu,\"failed\":%llu,\"ttft_p50_ms\":%.2f,"
                        "\"ttft_p99_ms\":%.2f,\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f,"
                        "\"node_figures\":%llu,\"node_ttft_p50_ms\":%.2f,\"node_ttft_p99_ms\":%.2f,"
                        "\"node_tpot_p50_ms\":%.2f,\"node_tpot_p99_ms\":%.2f,"
                        "\"host_ttft_p99_ms\":%.2f,\"host_tpot_p99_ms\":%.2f,"
                        "\"client_extra_p99_ms\":%.2f,\"send_lag_max_ms\":%.2f,\"wall_s\":%.2f}\n",
                        (unsigned long long)r->sent, (unsigned long long)r->ok,
                        (unsigned long long)r->failed, r->ttft_p50_ms, r->ttft_p99_ms,
                        r->tpot_p50_ms, r->tpot_p99_ms, (unsigned long long)r->node_figures,
                        r->node_ttft_p50_ms, r->node_ttft_p99_ms, r->node_tpot_p50_ms,
                        r->node_tpot_p99_ms, r->host_ttft_p99_ms, r->host_tpot_p99_ms,
                        r->client_extra_p99_ms, r->send_lag_max_ms, r->wall_s);
        else
                fprintf(f,
                        "sent %llu ok %llu failed %llu (%.1f s wall); emulated ms:\n"
                        "  node    ttft p50 %.1f p99 %.1f  tpot p50 %.1f p99 %.1f  (its clock, "
                        "from accepting each request; the p99 request lost %.1f / %.1f of it to "
                        "the host)\n"
                        "  client  ttft p50 %.1f p99 %.1f  tpot p50 %.1f p99 %.1f  (adds p99 %.1f "
                        "to ttft; sent up to %.1f late)\n",
                        (unsigned long long)r->sent, (unsigned long long)r->ok,
                        (unsigned long long)r->failed, r->wall_s, r->node_ttft_p50_ms,
                        r->node_ttft_p99_ms, r->node_tpot_p50_ms, r->node_tpot_p99_ms,
                        r->host_ttft_p99_ms, r->host_tpot_p99_ms, r->ttft_p50_ms, r->ttft_p99_ms,
                        r->tpot_p50_ms, r->tpot_p99_ms, r->client_extra_p99_ms, r->send_lag_max_ms);
}

int loom_harvest_replay_report(const loom_harvest_replay_cfg *cfg, const char *trace, int json,
                               FILE *out, loom_harvest_replay_result *r, loom_err *e)
{
        loom_harvest_trace tr;
        memset(r, 0, sizeof *r);
        int rc = loom_harvest_trace_load(trace, &tr, e);
        if (rc)
                return rc;
        loom_harvest_replay_cfg c = *cfg;
        c.trace = &tr;
        rc = loom_harvest_replay(&c, r, e);
        loom_harvest_trace_free(&tr);
        if (rc)
                return hv_err_lead(e, rc, NULL);
        loom_harvest_replay_print(out, r, json);
        return 0;
}
