/*
 * node_json.c - a live node's statistics as one line of JSON: GET /v1/stats, GET /v1/weights
 * and the line `loom harvest node` prints when it stops.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/harvest.h"

/* Times are printed to the millisecond (or microsecond for routing): more is noise. */
static json_t *r3(double x)
{
        return json_real(round(x * 1e3) / 1e3);
}

static json_t *hex(const char *fmt, unsigned long long v)
{
        char b[24];
        snprintf(b, sizeof b, fmt, v);
        return json_string(b);
}

/* Turns done per weight version, oldest version first. */
static json_t *turns_by_version(const loom_harvest_node_stats *s)
{
        json_t *o = json_object();
        uint32_t top = 0;
        for (int i = 0; i < LOOM_HARVEST_NODE_VERSIONS; i++)
                if (s->turn_count[i] && s->turn_version[i] > top)
                        top = s->turn_version[i];
        for (uint32_t k = LOOM_HARVEST_NODE_VERSIONS; k-- > 0;) {
                if (top < k)
                        continue;
                uint32_t v = top - k, slot = v % LOOM_HARVEST_NODE_VERSIONS;
                if (!s->turn_count[slot] || s->turn_version[slot] != v)
                        continue;
                char key[16];
                snprintf(key, sizeof key, "%u", v);
                json_object_set_new(o, key, json_integer((json_int_t)s->turn_count[slot]));
        }
        return o;
}

static json_t *weights(const loom_harvest_node_stats *s)
{
        const loom_harvest_wlive_stats *w = &s->w;
        json_t *o = json_pack(
            "{s:I,s:I,s:b,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "version",
            (json_int_t)s->version, "policy_version", (json_int_t)s->policy_version, "routable",
            s->routable, "hash", hex("%016llx", w->hash), "crc32c", hex("%08llx", w->crc), "elems",
            (json_int_t)w->elems, "pulls", (json_int_t)w->pulls, "pulls_delta",
            (json_int_t)w->pulls_delta, "pulls_dense", (json_int_t)w->pulls_dense, "pulls_failed",
            (json_int_t)w->pulls_failed, "probes_failed", (json_int_t)w->probes_failed, "bytes",
            (json_int_t)w->bytes, "last_bytes", (json_int_t)w->last_bytes, "last_changed",
            (json_int_t)w->last_changed, "last_pull_ms", r3(w->last_pull_s * 1e3));
        if (w->version)
                json_object_set_new(o, "last_pull_age_s", r3(w->now_s - w->last_ok_at_s));
        json_object_set_new(o, "held", json_boolean(w->held));
        json_object_set_new(o, "keyed", json_boolean(w->keyed));
        json_object_set_new(o, "route_stale", json_integer((json_int_t)s->route_stale));
        json_object_set_new(o, "turns_by_version", turns_by_version(s));
        json_object_set_new(o, "last_error", json_string(w->last_error));
        return o;
}

void loom_harvest_node_stats_json(const loom_harvest_node_stats *s, int with_weights, char *buf,
                                  size_t cap)
{
        json_t *o =
            json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:i,s:i,s:o,s:o,s:I,s:o}", "served",
                      (json_int_t)s->served, "turns_done", (json_int_t)s->turns_done,
                      "turns_aborted", (json_int_t)s->turns_aborted, "cuts", (json_int_t)s->cuts,
                      "rl_steps", (json_int_t)s->rl_steps, "stalls", (json_int_t)s->stalls, "pages",
                      (int)s->pages, "budget", (int)s->budget, "pool_serving", (int)s->pool_serving,
                      "pool_rollout", (int)s->pool_rollout, "busy_serving_s", r3(s->busy_serving_s),
                      "busy_rollout_s", r3(s->busy_rollout_s), "route_calls",
                      (json_int_t)s->route_calls, "route_us_max", r3(s->route_us_max));
        if (o) {
                json_object_set_new(o, "host_lag_s", r3(s->host_lag_s));
                json_object_set_new(o, "host_lag_max_ms", r3((double)s->host_lag_max_us / 1e3));
        }
        if (o && with_weights)
                json_object_set_new(o, "weights", weights(s));
        char *t =
            o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12)) : NULL;
        snprintf(buf, cap, "%s\n", t ? t : "{}");
        free(t);
        json_decref(o);
}
