/*
 * node_json.c - a live node's statistics as one line of JSON: GET /v1/stats, GET /v1/weights
 * and the line `loom harvest node` prints when it stops.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "loom/harvest.h"

typedef struct out {
        char *buf;
        size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...)
{
        if (o->len >= o->cap)
                return;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (k > 0)
                o->len += (size_t)k;
}

/* A JSON string: quotes and backslashes escaped, control characters dropped. */
static void put_str(out *o, const char *s)
{
        put(o, "\"");
        for (; *s; s++) {
                if (*s == '"' || *s == '\\')
                        put(o, "\\%c", *s);
                else if ((unsigned char)*s >= 0x20)
                        put(o, "%c", *s);
        }
        put(o, "\"");
}

static void put_weights(out *o, const loom_harvest_node_stats *s)
{
        const loom_harvest_wlive_stats *w = &s->w;
        put(o,
            ",\"weights\":{\"version\":%u,\"policy_version\":%u,\"routable\":%s,\"hash\":"
            "\"%016llx\",\"crc32c\":\"%08x\",\"elems\":%llu,\"pulls\":%llu,\"pulls_delta\":%llu,"
            "\"pulls_dense\":%llu,\"pulls_failed\":%llu,\"probes_failed\":%llu,\"bytes\":%llu,"
            "\"last_bytes\":%llu,\"last_changed\":%llu,\"last_pull_ms\":%.3f,",
            s->version, s->policy_version, s->routable ? "true" : "false",
            (unsigned long long)w->hash, w->crc, (unsigned long long)w->elems,
            (unsigned long long)w->pulls, (unsigned long long)w->pulls_delta,
            (unsigned long long)w->pulls_dense, (unsigned long long)w->pulls_failed,
            (unsigned long long)w->probes_failed, (unsigned long long)w->bytes,
            (unsigned long long)w->last_bytes, (unsigned long long)w->last_changed,
            w->last_pull_s * 1e3);
        if (w->version)
                put(o, "\"last_pull_age_s\":%.3f,", w->now_s - w->last_ok_at_s);
        put(o, "\"held\":%s,\"route_stale\":%llu,\"turns_stale\":%llu,\"turns_by_version\":{",
            w->held ? "true" : "false", (unsigned long long)s->route_stale,
            (unsigned long long)s->turns_stale);
        /* oldest version first */
        uint32_t top = 0;
        for (int i = 0; i < LOOM_HARVEST_NODE_VERSIONS; i++)
                if (s->turn_count[i] && s->turn_version[i] > top)
                        top = s->turn_version[i];
        int first = 1;
        for (uint32_t k = LOOM_HARVEST_NODE_VERSIONS; k-- > 0;) {
                if (top < k)
                        continue;
                uint32_t v = top - k, slot = v % LOOM_HARVEST_NODE_VERSIONS;
                if (!s->turn_count[slot] || s->turn_version[slot] != v)
                        continue;
                put(o, "%s\"%u\":%llu", first ? "" : ",", v,
                    (unsigned long long)s->turn_count[slot]);
                first = 0;
        }
        put(o, "},\"last_error\":");
        put_str(o, w->last_error);
        put(o, "}");
}

void loom_harvest_node_stats_json(const loom_harvest_node_stats *s, int weights, char *buf,
                                  size_t cap)
{
        out o = {buf, cap, 0};
        if (cap)
                buf[0] = 0;
        put(&o,
            "{\"served\":%llu,\"turns_done\":%llu,\"turns_aborted\":%llu,\"cuts\":%llu,"
            "\"stalls\":%llu,\"pages\":%u,\"budget\":%u,\"pool_serving\":%u,"
            "\"pool_rollout\":%u,\"busy_serving_s\":%.3f,\"busy_rollout_s\":%.3f,"
            "\"route_calls\":%llu,\"route_us_max\":%.3f",
            (unsigned long long)s->served, (unsigned long long)s->turns_done,
            (unsigned long long)s->turns_aborted, (unsigned long long)s->cuts,
            (unsigned long long)s->stalls, s->pages, s->budget, s->pool_serving, s->pool_rollout,
            s->busy_serving_s, s->busy_rollout_s, (unsigned long long)s->route_calls,
            s->route_us_max);
        if (weights)
                put_weights(&o, s);
        put(&o, "}\n");
}
