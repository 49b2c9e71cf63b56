/*
 * print.c - the text and JSON forms of the bench figures and of a daemon's usage (loom-state
 * bench and stat).
 */
#include <inttypes.h>
#include <stdio.h>

#include "loom/state.h"

void loom_state_bench_print(FILE *f, const loom_state_bench_result *r, int json)
{
        if (json) {
                fprintf(f,
                        "{\"load_gbps\": %.3f, \"memcpy_gbps\": %.3f, \"disk_read_gbps\": %.3f, "
                        "\"dd_direct_gbps\": %.3f, \"dedup_ratio\": %.6f, "
                        "\"prefetch_hidden_fraction\": %.4f, \"switch_noprefetch_s\": %.4f, "
                        "\"switch_prefetch_s\": %.4f, \"state_bytes\": %" PRIu64
                        ", \"state_scale\": %" PRIu64 ", \"cold_switch_s\": %.4f, "
                        "\"warm_switch_s\": %.4f, \"host_locked\": %s, "
                        "\"prefetch_by_phase\": [",
                        r->load_gbps, r->memcpy_gbps, r->disk_read_gbps, r->dd_direct_gbps,
                        r->dedup_ratio, r->prefetch_hidden_fraction, r->switch_noprefetch_s,
                        r->switch_prefetch_s, r->state_bytes, r->state_scale, r->cold_switch_s,
                        r->warm_switch_s, r->host_locked ? "true" : "false");
                for (int i = 0; i < 4; i++)
                        fprintf(f,
                                "%s{\"phase_vs_cold_load\": %.2f, \"hidden_fraction\": %.4f, "
                                "\"switch_s\": %.4f}",
                                i ? ", " : "", r->phase_fraction[i], r->hidden_at[i],
                                r->switch_at_s[i]);
                fprintf(f, "]}\n");
                return;
        }
        fprintf(f, "host -> device load      %8.2f GB/s   memcpy %8.2f GB/s   ratio %.2f\n",
                r->load_gbps, r->memcpy_gbps, r->load_gbps / r->memcpy_gbps);
        fprintf(f, "disk read (O_DIRECT)     %8.2f GB/s   dd     %8.2f GB/s   ratio %.2f %s\n",
                r->disk_read_gbps, r->dd_direct_gbps,
                r->dd_direct_gbps > 0 ? r->disk_read_gbps / r->dd_direct_gbps : 0, r->dd_note);
        fprintf(f, "DP=8 offload footprint   %8.4f of the naive bytes\n", r->dedup_ratio);
        fprintf(f, "prefetch one phase ahead %8.1f%% of the load hidden (%.3f s -> %.3f s)\n",
                100 * r->prefetch_hidden_fraction, r->switch_noprefetch_s, r->switch_prefetch_s);
        for (int i = 0; i < 4; i++)
                fprintf(f, "  phase %4.2fx the cold load %8.1f%% hidden (%.3f s)\n",
                        r->phase_fraction[i], 100 * r->hidden_at[i], r->switch_at_s[i]);
        fprintf(f,
                "7B-class state (1/%" PRIu64 ", %.0f MiB)  cold %.3f s  warm %.3f s;"
                "  full size ~ cold %.1f s  warm %.1f s\n",
                r->state_scale, (double)r->state_bytes / (1 << 20), r->cold_switch_s,
                r->warm_switch_s, r->cold_switch_s * (double)r->state_scale,
                r->warm_switch_s * (double)r->state_scale);
        if (!r->host_locked)
                fprintf(f, "note: the host pool was not mlocked (RLIMIT_MEMLOCK too low)\n");
}

void loom_state_stats_print(FILE *f, const loom_state_stats *st, int json)
{
        if (json) {
                fprintf(
                    f,
                    "{\"host_cap\": %" PRIu64 ", \"host_used\": %" PRIu64 ", \"disk_cap\": %" PRIu64
                    ", \"disk_used\": %" PRIu64 ", \"host_locked\": %s, \"evictions\": %" PRIu64
                    ", \"prefetches\": %" PRIu64 ", \"prefetch_bytes\": %" PRIu64 ", \"jobs\": [",
                    st->host_cap, st->host_used, st->disk_cap, st->disk_used,
                    st->host_locked ? "true" : "false", st->evictions, st->prefetches,
                    st->prefetch_bytes);
                for (size_t i = 0; i < st->njobs; i++)
                        fprintf(f,
                                "%s{\"job\": \"%s\", \"host_bytes\": %" PRIu64
                                ", \"disk_bytes\": %" PRIu64 ", \"slices\": %" PRIu64 "}",
                                i ? ", " : "", st->jobs[i].job, st->jobs[i].host_bytes,
                                st->jobs[i].disk_bytes, st->jobs[i].slices);
                fprintf(f, "]}\n");
                return;
        }
        fprintf(f,
                "host %" PRIu64 "/%" PRIu64 " bytes%s, disk %" PRIu64 "/%" PRIu64 " bytes, %" PRIu64
                " evictions\n",
                st->host_used, st->host_cap, st->host_locked ? " (pinned)" : "", st->disk_used,
                st->disk_cap, st->evictions);
        for (size_t i = 0; i < st->njobs; i++)
                fprintf(f, "  %-24s host %12" PRIu64 "  disk %12" PRIu64 "  slices %" PRIu64 "\n",
                        st->jobs[i].job, st->jobs[i].host_bytes, st->jobs[i].disk_bytes,
                        st->jobs[i].slices);
}
