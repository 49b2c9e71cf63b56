/*
 * cluster.c - the fleet as the cost model sees it: links by level (machine, region, region
 * pair) and the bottleneck ring of Appendix B.
 *
 * The ring term is min over rings r through a device set of max over edges of alpha + v/beta.
 * Links are identical within a level (every pair of GPUs on one machine, every pair of machines
 * in one region, every pair of GPUs in two given regions), so the ring can be built from the
 * levels: inside a machine its GPUs are chained, machines of a region are chained, and regions
 * are joined along a minimum bottleneck spanning tree that the ring walks around (each region
 * is entered once per tree edge, which its GPUs allow when a region holds at least as many
 * GPUs of the set as its tree degree). Any ring must contain a spanning path, so the tree's
 * bottleneck is also a lower bound: the result is the exact minimum under those conditions.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/plan.h"

void loom_plan_link(const loom_plan_cluster *c, int a, int b, double *lat, double *bw)
{
        if (a == b) {
                *lat = 0;
                *bw = INFINITY;
                return;
        }
        const loom_plan_device *x = &c->dev[a], *y = &c->dev[b];
        if (x->machine == y->machine) {
                double ba = c->types[x->type].intra_gbps, bb = c->types[y->type].intra_gbps;
                *lat = c->intra_lat_s;
                *bw = (ba < bb ? ba : bb) * 1e9;
        } else if (x->region == y->region) {
                *lat = c->region_lat_s[x->region];
                *bw = c->region_bw[x->region];
        } else {
                *lat = c->pair_lat_s[x->region][y->region];
                *bw = c->pair_bw[x->region][y->region];
        }
}

static double edge(double lat, double bw, double bytes)
{
        return lat + bytes / bw;
}

double loom_plan_ring(const loom_plan_cluster *c, const int *devs, int n, double bytes)
{
        if (n <= 1)
                return 0;
        /* Per region: how many GPUs, which machines; per machine: how many GPUs. */
        int rcount[LOOM_PLAN_MAX_REGIONS] = {0}, rmach[LOOM_PLAN_MAX_REGIONS] = {0};
        unsigned short mcount[LOOM_PLAN_MAX_MACHINES];
        int mlist[LOOM_PLAN_MAX_DEV], nm = 0;
        int regions[LOOM_PLAN_MAX_REGIONS], nr = 0;
        for (int i = 0; i < n; i++) {
                const loom_plan_device *d = &c->dev[devs[i]];
                if (rcount[d->region]++ == 0)
                        regions[nr++] = d->region;
        }
        double mbw[LOOM_PLAN_MAX_MACHINES]; /* slowest intra link of each machine's GPUs */
        for (int i = 0; i < n; i++)
                mcount[c->dev[devs[i]].machine] = 0;
        for (int i = 0; i < n; i++) {
                const loom_plan_device *d = &c->dev[devs[i]];
                double b = c->types[d->type].intra_gbps * 1e9;
                if (mcount[d->machine]++ == 0) {
                        mlist[nm++] = devs[i];
                        rmach[d->region]++;
                        mbw[d->machine] = b;
                } else if (b < mbw[d->machine]) {
                        mbw[d->machine] = b;
                }
        }
        double worst = 0;
        for (int m = 0; m < nm; m++) {
                int mach = c->dev[mlist[m]].machine;
                if (mcount[mach] < 2)
                        continue;
                double e = edge(c->intra_lat_s, mbw[mach], bytes);
                if (e > worst)
                        worst = e;
        }
        for (int r = 0; r < nr; r++) {
                int g = regions[r];
                if (rmach[g] >= 2) {
                        double e = edge(c->region_lat_s[g], c->region_bw[g], bytes);
                        if (e > worst)
                                worst = e;
                }
        }
        if (nr >= 2) {
                /* Prim's algorithm gives a minimum bottleneck spanning tree. */
                double best[LOOM_PLAN_MAX_REGIONS];
                bool in[LOOM_PLAN_MAX_REGIONS] = {false};
                in[0] = true;
                for (int r = 1; r < nr; r++)
                        best[r] = edge(c->pair_lat_s[regions[0]][regions[r]],
                                       c->pair_bw[regions[0]][regions[r]], bytes);
                for (int step = 1; step < nr; step++) {
                        int pick = -1;
                        for (int r = 1; r < nr; r++)
                                if (!in[r] && (pick < 0 || best[r] < best[pick]))
                                        pick = r;
                        in[pick] = true;
                        if (best[pick] > worst)
                                worst = best[pick];
                        for (int r = 1; r < nr; r++) {
                                if (in[r])
                                        continue;
                                double e = edge(c->pair_lat_s[regions[pick]][regions[r]],
                                                c->pair_bw[regions[pick]][regions[r]], bytes);
                                if (e < best[r])
                                        best[r] = e;
                        }
                }
        }
        return worst;
}

int loom_plan_cluster_check(const loom_plan_cluster *c, loom_err *e)
{
        if (c->n_types < 1 || c->n_types > LOOM_PLAN_MAX_TYPES)
                return loom_err_set(e, LOOM_EINVAL, "gpu_types", "need 1..%d GPU types, got %d",
                                    LOOM_PLAN_MAX_TYPES, c->n_types);
        for (int t = 0; t < c->n_types; t++) {
                const loom_plan_gpu *g = &c->types[t];
                if (!(g->tflops > 0 && g->hbm_gb > 0 && g->hbm_gbps > 0 && g->intra_gbps > 0))
                        return loom_err_set(e, LOOM_EINVAL, "gpu_types",
                                            "GPU type '%s' needs positive tflops, hbm_gb, "
                                            "hbm_gbps and intra_gbps",
                                            g->name);
        }
        if (c->n_dev < 1 || c->n_dev > LOOM_PLAN_MAX_DEV)
                return loom_err_set(e, LOOM_EINVAL, "devices", "need 1..%d devices, got %d",
                                    LOOM_PLAN_MAX_DEV, c->n_dev);
        if (c->n_regions < 1 || c->n_regions > LOOM_PLAN_MAX_REGIONS)
                return loom_err_set(e, LOOM_EINVAL, "regions", "need 1..%d regions, got %d",
                                    LOOM_PLAN_MAX_REGIONS, c->n_regions);
        if (c->n_machines < 1 || c->n_machines > LOOM_PLAN_MAX_MACHINES)
                return loom_err_set(e, LOOM_EINVAL, "devices", "need 1..%d machines, got %d",
                                    LOOM_PLAN_MAX_MACHINES, c->n_machines);
        for (int i = 0; i < c->n_dev; i++) {
                const loom_plan_device *d = &c->dev[i];
                if (d->type < 0 || d->type >= c->n_types || d->machine < 0 ||
                    d->machine >= c->n_machines || d->region < 0 || d->region >= c->n_regions ||
                    d->zone < 0)
                        return loom_err_set(e, LOOM_EINVAL, "devices",
                                            "device %d: index out of range", i);
        }
        /* A machine lives in one region. */
        int mreg[LOOM_PLAN_MAX_MACHINES];
        for (int m = 0; m < c->n_machines; m++)
                mreg[m] = -1;
        for (int i = 0; i < c->n_dev; i++) {
                const loom_plan_device *d = &c->dev[i];
                if (mreg[d->machine] >= 0 && mreg[d->machine] != d->region) {
                        char f[64];
                        snprintf(f, sizeof f, "devices[%d].region", i);
                        return loom_err_set(e, LOOM_EINVAL, f,
                                            "a machine's GPUs must sit in one region");
                }
                mreg[d->machine] = d->region;
        }
        if (!(c->intra_lat_s >= 0))
                return loom_err_set(e, LOOM_EINVAL, "links.intra_machine", "latency must be >= 0");
        for (int r = 0; r < c->n_regions; r++) {
                if (!(c->region_lat_s[r] >= 0 && c->region_bw[r] > 0))
                        return loom_err_set(e, LOOM_EINVAL, "links.intra_region",
                                            "region '%s' needs latency >= 0 and bandwidth > 0",
                                            c->region_name[r]);
                for (int q = 0; q < c->n_regions; q++)
                        if (q != r && !(c->pair_lat_s[r][q] >= 0 && c->pair_bw[r][q] > 0))
                                return loom_err_set(e, LOOM_EINVAL, "links.regions",
                                                    "no link between regions '%s' and '%s'",
                                                    c->region_name[r], c->region_name[q]);
        }
        return 0;
}
