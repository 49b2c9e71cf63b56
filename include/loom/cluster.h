/*
 * cluster.h - GPU types, pools and node prices. Pure data; no state.
 *
 * A cluster has two pools, rollout (inference GPUs) and training. A node has gpus_per_node GPUs
 * of its pool's type and host_mem bytes of DRAM that caches resident jobs' working sets.
 * Defaults follow WEAVE Table 1: H20 for rollout ($1.85/h, 96 GB, 148 TFLOPS, 4.0 TB/s) and
 * H800 for training ($5.28/h, 80 GB, 989.5 TFLOPS, 3.35 TB/s); 8 GPUs and 2 TB per node.
 */
#ifndef LOOM_CLUSTER_H
#define LOOM_CLUSTER_H

#include "loom/common.h"

typedef enum loom_pool { LOOM_POOL_ROLLOUT = 0, LOOM_POOL_TRAIN = 1 } loom_pool;

const char *loom_pool_name(loom_pool p); /* "rollout" or "train" */

typedef struct loom_gpu_type {
        char name[32];
        double price_per_hour; /* US$ per GPU-hour */
        uint64_t hbm_bytes;
        double tflops;   /* dense bf16 */
        double hbm_tbps; /* TB/s */
} loom_gpu_type;

typedef struct loom_cluster_cfg {
        loom_gpu_type gpu[2]; /* indexed by loom_pool */
        int gpus_per_node;
        uint64_t host_mem_bytes; /* per node, both pools */
} loom_cluster_cfg;

/* The defaults above. */
void loom_cluster_cfg_default(loom_cluster_cfg *c);
/* 0, or LOOM_EINVAL with the offending field named in e. */
int loom_cluster_cfg_validate(const loom_cluster_cfg *c, loom_err *e);
/* $/h of one node of pool p. */
double loom_cluster_node_price(const loom_cluster_cfg *c, loom_pool p);

#endif
