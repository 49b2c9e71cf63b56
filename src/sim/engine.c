/*
 * engine.c - the discrete-event driver of the scheduling core, for the policies the core
 * decides (loom, loom-nomig, random, greedy).
 *
 * The engine owns a virtual clock and an event heap. Arrivals are submitted to loom_sched;
 * every action it emits is applied to the modelled cluster at once: START_PHASE schedules the
 * phase's end (and, for rollouts, the instant its tail threshold is reached), MIGRATE_TAIL and
 * RESIZE_PHASE change a running rollout's speed, PROVISION/RELEASE_NODE move the cost meter,
 * JOB_DONE records the completion. Phase ends and threshold crossings are reported back.
 *
 * Job state: at admission the job's working set is read from disk into the host memory of its
 * nodes in the background (cold_s); its first phase on a pool waits for what is left of that
 * load and then starts warm. Later, a node that no longer holds the state (evicted because
 * memory was over-committed) pays a full cold start on its GPUs.
 *
 * Rollout model: a rollout has W microseconds of work at full speed (its longest response) and
 * crosses the tail threshold after Wq of them. Running on g of the job's G GPUs it advances at
 * g/G; a migrated tail is latency-bound and advances at 1/tail_slowdown on its kept GPUs. A
 * phase pays a switch latency before its work: warm when the node last ran another job,
 * nothing when it ran this job; the switch begins when the node frees up, so only the part
 * of it that exceeds the node's idle time delays the phase (the core's meta-iteration
 * simulation makes the same assumption).
 * Events made stale by a speed change are skipped through a per-job version number.
 *
 * What the core is told a phase took is what loomd would measure: the wall-clock time of its
 * work (after its switch) on the nodes and GPUs it had. A job stopped for a crash, a drift or
 * a move is re-admitted at once and waits out its restart on the nodes it is given, which are
 * billed meanwhile. A node holds one migrated tail at a time (on_progress).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_int.h"

#define RES_SLOTS 24 /* resident working sets remembered per node (LRU) */

typedef struct resident {
        int job; /* workload index + 1 (negated: a lone member's rollout state); 0 = free */
        uint64_t bytes;
        uint64_t stamp;
} resident;

typedef struct node_state {
        int last;        /* workload index + 1 of the job that ran last */
        loom_us free_at; /* when its last phase ended (or was squeezed into a tail) */
        loom_us up_at;   /* when it came up (PROVISION_NODE + boot_s) */
        int tail_job;    /* workload index + 1 of the migrated tail running here; 0: none */
        int tail_gpus;   /* the GPUs that tail keeps */
        uint64_t used;
        resident res[RES_SLOTS];
} node_state;

typedef struct sjob {
        loom_job_id id;
        /* where each phase's worker runs (pool, first node, when those nodes came up, when it
         * last started a phase; launched: set since the job's last admission, at admitted),
         * for launch_s */
        loom_pool wk_pool[2];
        loom_node_id wk_node[2];
        loom_us wk_up[2], wk_at[2];
        bool launched[2];
        loom_us admitted;
        int64_t iter;
        bool running, rolling, migrated, past_threshold;
        loom_phase phase;
        loom_group_id group;
        uint32_t version;
        /* rollout progress: work(t) = anchor_w + rate * (t - anchor_t) for t >= anchor_t */
        loom_us anchor_t;
        double anchor_w, rate, work, work_q;
        int busy_gpus;
        loom_pool busy_pool;
        loom_us phase_start, seg_start;
        int n_nodes;
        loom_node_id nodes[LOOM_MAX_JOB_NODES];
        loom_us done_at, first_start;
        loom_us ready;   /* the admission-time load into host memory is done */
        bool touched[2]; /* has run a phase on this pool */
        /* drift and failures: the profile it was last admitted with, its recent fractions of
         * it, and whether it is in the core now */
        loom_job_spec cur;
        loom_us decl[2]; /* declared t_roll, t_train: at arrival, or observed at a drift resubmit */
        float recent[2][5];
        int n_recent;
        bool active, waiting, failed;
        int restarts;
        loom_us work_start; /* when the running phase's work began (after its switch) */
        /* the rollout crossed its tail threshold while another job's tail held its first
         * node: its progress is reported when that tail ends (one tail per node) */
        bool progress_due;
        /* the timeline's current segment: since when, on how many GPUs of each node, and
         * whether it is the phase's first (which carries the switch) */
        loom_us tl_start;
        bool tl_first;
        int64_t tl_iter;
        int tl_gpus[LOOM_MAX_JOB_NODES];
        /* the training call running, of n_calls (0: the whole phase) */
        int call, n_calls;
} sjob;

typedef struct engine {
        const loom_sim_cfg *c;
        loom_sim_policy pol;
        const loom_sim_workload *w;
        loom_sched *s;
        loom_sim_result *r;
        sim_heap heap;
        sim_meter meter;
        sjob *jobs;
        int *by_id; /* core job id -> workload index */
        size_t cap_by_id;
        node_state *nodes[2];
        size_t cap_nodes[2];
        uint64_t stamp;
        size_t gantt_cap;
        int finished;
        loom_us now;
        loom_err *e;
        bool resubmit_drift; /* re-admit a job whose phases outgrow its declared profile */
        bool skip_starts;    /* while every job is being stopped (regroup) */
        /* nodes by group kind and lone members' nodes by SLO (loom_sim_result.group_cost),
         * since the last event */
        int kind_nodes[LOOM_MAX_GROUP_SIZE + 1][2];
        int lone_slo_nodes[4];
        bool groups_dirty;   /* membership or nodes changed: the counts above are redone */
        loom_group_id *gids; /* scratch for count_groups */
        int cap_gids;
} engine;

/* The nodes of every group kind now (loom's placer) into kind_nodes and lone_slo_nodes. 0 or
 * LOOM_ENOMEM. */
static int count_groups(engine *g)
{
        int n = loom_sched_groups(g->s, g->gids, g->cap_gids);
        if (n > g->cap_gids) {
                int cap = n * 2;
                loom_group_id *p = realloc(g->gids, sizeof *p * (size_t)cap);
                if (!p)
                        return LOOM_ENOMEM;
                g->gids = p;
                g->cap_gids = cap;
                n = loom_sched_groups(g->s, g->gids, g->cap_gids);
        }
        memset(g->kind_nodes, 0, sizeof g->kind_nodes);
        memset(g->lone_slo_nodes, 0, sizeof g->lone_slo_nodes);
        for (int i = 0; i < n; i++) {
                loom_group_info gi;
                if (loom_sched_group_info(g->s, g->gids[i], &gi))
                        continue;
                int k = gi.lone ? 0 : gi.n_members;
                g->kind_nodes[k][0] += gi.lone ? 0 : gi.n_rollout_nodes;
                g->kind_nodes[k][1] += gi.n_train_nodes;
                loom_job_info ji;
                if (gi.lone && !loom_sched_job_info(g->s, gi.members[0], &ji))
                        g->lone_slo_nodes[loom__sim_slo_band(ji.spec.slo)] += gi.n_train_nodes;
        }
        return 0;
}

static int fail(engine *g, int rc, const char *what)
{
        if (g->e && !g->e->msg[0])
                loom_err_set(g->e, rc, "", "%s: %s", what, loom_strerror(rc));
        return rc;
}

static node_state *node_get(engine *g, loom_pool p, loom_node_id id)
{
        if (id >= g->cap_nodes[p]) {
                size_t cap = g->cap_nodes[p] ? g->cap_nodes[p] : 64;
                while (cap <= id)
                        cap *= 2;
                node_state *n = realloc(g->nodes[p], cap * sizeof *n);
                if (!n)
                        return NULL;
                memset(n + g->cap_nodes[p], 0, (cap - g->cap_nodes[p]) * sizeof *n);
                g->nodes[p] = n;
                g->cap_nodes[p] = cap;
        }
        return &g->nodes[p][id];
}

/* Bytes job ji keeps on a node of pool p while running a phase on `gpus` GPUs there. */
static uint64_t job_bytes(const engine *g, int ji, loom_pool p, int gpus)
{
        const loom_job_spec *s = &g->w->jobs[ji].spec;
        if (p == LOOM_POOL_ROLLOUT)
                return s->mem_rollout;
        return loom_group_train_mem(s->mem_train, s->train_gpus, gpus);
}

/* Switch latency for job ji starting on node n, updating the node's residency. key: the
 * working set's identity (ji + 1; -(ji + 1) for a lone member's rollout on its training node,
 * which switches between its rollout and training states as the colocated baseline does). */
static loom_us node_switch(engine *g, node_state *n, loom_pool pool, int ji, int key,
                           uint64_t bytes, int *kind)
{
        const loom_sim_job *j = &g->w->jobs[ji];
        g->stamp++;
        int free_slot = -1;
        for (int i = 0; i < RES_SLOTS; i++) {
                if (n->res[i].job == key) {
                        n->res[i].stamp = g->stamp;
                        bool same = n->last == key;
                        n->last = key;
                        *kind = same ? 0 : 1;
                        if (same)
                                return 0;
                        /* The switch starts as soon as the node is free: only the part that
                         * does not fit in its idle time delays the phase. */
                        loom_us left = loom_sim_warm(g->c, j->model_b) - (g->now - n->free_at);
                        return left > 0 ? left : 0;
                }
                if (!n->res[i].job && free_slot < 0)
                        free_slot = i;
        }
        /* Not resident: load it, evicting least recently used states until it fits. */
        uint64_t cap = g->c->cluster.host_mem_bytes;
        while (n->used + bytes > cap || free_slot < 0) {
                int lru = -1;
                for (int i = 0; i < RES_SLOTS; i++)
                        if (n->res[i].job && (lru < 0 || n->res[i].stamp < n->res[lru].stamp))
                                lru = i;
                if (lru < 0)
                        break;
                n->used -= n->res[lru].bytes;
                n->res[lru].job = 0;
                if (free_slot < 0 || lru < free_slot)
                        free_slot = lru;
        }
        if (free_slot >= 0) {
                n->res[free_slot] = (resident){key, bytes, g->stamp};
                n->used += bytes;
        }
        n->last = key;
        *kind = 2;
        const sjob *sj = &g->jobs[ji];
        if (!sj->touched[pool]) /* the admission-time load: wait for what is left, then warm */
                return (sj->ready > g->now ? sj->ready - g->now : 0) +
                       loom_sim_warm(g->c, j->model_b);
        return loom_sim_cold(g->c, j->model_b);
}

static loom_us phase_switch(engine *g, int ji, const loom_action *a)
{
        loom_us worst = 0;
        int kind_max = 0;
        bool colo = a->phase == LOOM_PHASE_ROLLOUT && a->pool == LOOM_POOL_TRAIN;
        loom_pool state = colo ? LOOM_POOL_ROLLOUT : a->pool; /* whose working set */
        for (int k = 0; k < a->n_nodes; k++) {
                node_state *n = node_get(g, a->pool, a->nodes[k]);
                if (!n)
                        return -1;
                int kind;
                int gpus = state == LOOM_POOL_TRAIN ? a->n_nodes * g->c->cluster.gpus_per_node : 0;
                loom_us t = node_switch(g, n, state, ji, colo ? -(ji + 1) : ji + 1,
                                        job_bytes(g, ji, state, gpus), &kind);
                if (n->up_at > g->now && n->up_at - g->now > t) /* still booting */
                        t = n->up_at - g->now;
                if (t > worst)
                        worst = t;
                if (kind > kind_max)
                        kind_max = kind;
        }
        /* A job re-admitted after a stop holds its nodes from then on, and its first phase on
         * each pool waits out its restart there, resident state or not. */
        const sjob *sj = &g->jobs[ji];
        if (a->n_nodes && !sj->touched[state] && sj->ready > g->now) {
                loom_us first = sj->ready - g->now + loom_sim_warm(g->c, g->w->jobs[ji].model_b);
                worst = first > worst ? first : worst;
        }
        if (a->n_nodes)
                g->jobs[ji].touched[state] = true;
        if (kind_max == 2)
                g->r->cold_starts++;
        else if (kind_max == 1)
                g->r->warm_switches++;
        return worst;
}

static loom_us time_at(const sjob *j, double work)
{
        double dt = (work - j->anchor_w) / j->rate;
        if (dt < 0)
                dt = 0;
        return j->anchor_t + (loom_us)ceil(dt - 1e-6);
}

/* (Re)schedule a rollout's threshold and end events after a speed change. */
static int schedule_rollout(engine *g, int ji)
{
        sjob *j = &g->jobs[ji];
        j->version++;
        int rc;
        if (!j->migrated && !j->past_threshold && g->c->policy.tail_migration &&
            j->work_q < j->work &&
            (rc = loom__sim_heap_push(&g->heap, time_at(j, j->work_q), SIM_EV_PROGRESS,
                                      (uint32_t)ji, j->version)))
                return rc;
        return loom__sim_heap_push(&g->heap, time_at(j, j->work), SIM_EV_END, (uint32_t)ji,
                                   j->version);
}

static void set_rate(engine *g, sjob *j, double rate)
{
        if (g->now > j->anchor_t) {
                j->anchor_w += j->rate * (double)(g->now - j->anchor_t);
                j->anchor_t = g->now;
        }
        j->rate = rate;
}

static int record(engine *g, int ji, loom_us end)
{
        sjob *j = &g->jobs[ji];
        if (!g->c->record_gantt || end <= j->seg_start)
                return 0;
        int rows = j->phase == LOOM_PHASE_ROLLOUT && !j->migrated ? j->n_nodes : 1;
        if (j->phase == LOOM_PHASE_SYNC)
                rows = 1;
        for (int k = 0; k < rows; k++) {
                loom_sim_interval iv = {.job = ji,
                                        .phase = j->phase,
                                        .pool = j->phase == LOOM_PHASE_SYNC ? LOOM_POOL_ROLLOUT
                                                                            : j->busy_pool,
                                        .row = j->n_nodes ? (int)j->nodes[k] : -1,
                                        .start = j->seg_start,
                                        .end = end,
                                        .tail = j->migrated};
                int rc = loom__sim_gantt_add(g->r, &g->gantt_cap, &iv);
                if (rc)
                        return rc;
        }
        j->seg_start = end;
        return 0;
}

/* The GPUs job ji's segment holds on each of its nodes: a training phase spreads over them
 * evenly; a rollout takes what other jobs' tails leave free, node by node, and whatever does
 * not fit shows on its last node (more than the node has: an over-commit, for the record). */
static void tl_alloc(engine *g, int ji, int total)
{
        sjob *j = &g->jobs[ji];
        int per = g->c->cluster.gpus_per_node, left = total;
        for (int k = 0; k < j->n_nodes; k++) {
                int take = j->phase == LOOM_PHASE_TRAIN ? total / j->n_nodes : per;
                if (j->busy_pool == LOOM_POOL_ROLLOUT && j->nodes[k] < g->cap_nodes[j->busy_pool]) {
                        const node_state *n = &g->nodes[j->busy_pool][j->nodes[k]];
                        if (n->tail_job && n->tail_job != ji + 1)
                                take -= n->tail_gpus;
                }
                take = k == j->n_nodes - 1 ? left : take < left ? take : left;
                j->tl_gpus[k] = take;
                left -= take;
        }
}

/* Job ji's current segment ends now: to the timeline, and the next one starts. */
static void tl_seg(engine *g, int ji, bool lost)
{
        sjob *j = &g->jobs[ji];
        if (!g->c->timeline)
                return;
        sim_tl_seg s = {.job = ji,
                        .iter = j->tl_iter,
                        .phase = j->phase,
                        .pool = j->busy_pool,
                        .n_nodes = j->phase == LOOM_PHASE_SYNC ? 0 : j->n_nodes,
                        .nodes = j->nodes,
                        .gpus = j->tl_gpus,
                        .sw = j->phase_start,
                        .work = j->work_start,
                        .start = j->tl_start,
                        .end = g->now,
                        .tail = j->migrated,
                        .lost = lost,
                        .call = j->call,
                        .calls = j->n_calls};
        loom__sim_tl_seg(g->c, g->pol, &s);
        j->tl_start = g->now;
}

static int64_t draw_index(const loom_sim_job *sj, const sjob *j)
{
        return j->iter < sj->spec.iterations ? j->iter : sj->spec.iterations - 1;
}

static int start_phase(engine *g, const loom_action *a)
{
        int ji = g->by_id[a->job];
        sjob *j = &g->jobs[ji];
        const loom_sim_job *sj = &g->w->jobs[ji];
        int64_t it = draw_index(sj, j);
        loom_us ovh = a->phase == LOOM_PHASE_SYNC ? 0 : phase_switch(g, ji, a);
        if (ovh < 0)
                return LOOM_ENOMEM;
        int wk = a->phase == LOOM_PHASE_TRAIN;
        if (a->phase != LOOM_PHASE_SYNC && a->n_nodes && g->c->launch_s > 0) {
                /* loomd's executor launches an admission's workers side by side, each once
                 * its nodes are up: the phase waits for its own worker only */
                loom_us launch = loom_us_from_s(g->c->launch_s), up = 0, ready = -1;
                for (int k = 0; k < a->n_nodes; k++) {
                        const node_state *n = node_get(g, a->pool, a->nodes[k]);
                        if (n && n->up_at > up)
                                up = n->up_at;
                }
                if (!j->launched[wk]) /* launched at its admission, once the nodes are up */
                        ready = (up > j->admitted ? up : j->admitted);
                else if (j->wk_pool[wk] != a->pool || j->wk_node[wk] != a->nodes[0] ||
                         j->wk_up[wk] != up) /* moved: to nodes provisioned for it since its
                                              * last phase (launched there once they are up),
                                              * or to older ones (launched now) */
                        ready = up > j->wk_at[wk] ? up : g->now;
                if (ready >= 0 && ready + launch - g->now > ovh)
                        ovh = ready + launch - g->now;
                j->launched[wk] = true;
                j->wk_pool[wk] = a->pool;
                j->wk_node[wk] = a->nodes[0];
                j->wk_up[wk] = up;
                j->wk_at[wk] = g->now;
        }
        j->running = true;
        j->phase = a->phase;
        j->group = a->group;
        j->migrated = j->past_threshold = false;
        j->phase_start = j->seg_start = g->now;
        j->n_nodes = a->n_nodes;
        memcpy(j->nodes, a->nodes, sizeof(loom_node_id) * (size_t)a->n_nodes);
        j->busy_gpus = a->phase == LOOM_PHASE_SYNC ? 0 : a->gpus;
        j->busy_pool = a->pool;
        j->work_start = g->now + ovh;
        j->tl_start = g->now;
        j->tl_iter = j->iter;
        j->progress_due = false;
        j->call = j->n_calls = 0;
        tl_alloc(g, ji, j->busy_gpus);
        if (j->busy_gpus)
                loom__sim_meter_busy(&g->meter, g->now, a->pool, j->busy_gpus);
        if (a->phase == LOOM_PHASE_ROLLOUT) {
                if (j->first_start < 0)
                        j->first_start = g->now;
                j->rolling = true;
                j->work = (double)sim_phase_us(sj->spec.t_roll, sj->roll[it]);
                j->work_q = (double)sim_phase_us(sj->spec.t_roll, sj->tailq[it]);
                if (a->pool == LOOM_POOL_TRAIN) { /* a lone member, on its training GPUs */
                        j->work *= g->c->colocated_roll_factor;
                        j->work_q *= g->c->colocated_roll_factor;
                }
                j->anchor_t = g->now + ovh;
                j->anchor_w = 0;
                j->rate = a->gpus >= sj->spec.rollout_gpus
                              ? 1.0
                              : (double)a->gpus / sj->spec.rollout_gpus;
                return schedule_rollout(g, ji);
        }
        j->rolling = false;
        loom_us len;
        if (a->phase == LOOM_PHASE_TRAIN)
                len = sim_phase_us(loom_group_train_time(sj->spec.t_train, sj->spec.train_gpus,
                                                         a->gpus,
                                                         g->c->policy.train_scaling_efficiency),
                                   sj->train[it]);
        else
                len = sj->spec.t_sync;
        loom_us calls[LOOM_N_CALLS];
        j->call = a->call, j->n_calls = a->phase == LOOM_PHASE_TRAIN ? a->n_calls : 0;
        if (j->n_calls > 0 && loom_job_calls(&sj->spec, calls) == j->n_calls)
                len = (loom_us)((double)len * (double)calls[j->call] / (double)sj->spec.t_train);
        j->version++;
        return loom__sim_heap_push(&g->heap, g->now + ovh + len, SIM_EV_END, (uint32_t)ji,
                                   j->version);
}

/* The nodes a job's phase ran on are free from now on: those of the pool it ran on (a lone
 * member's rollout runs on its training nodes), whatever the phase. */
static void free_nodes(engine *g, const sjob *j)
{
        loom_pool pool = j->busy_pool;
        for (int k = 0; k < j->n_nodes; k++)
                if (j->nodes[k] < g->cap_nodes[pool])
                        g->nodes[pool][j->nodes[k]].free_at = g->now;
}

static int apply(engine *g, const loom_action *a)
{
        int ji;
        sjob *j;
        int rc;
        if (g->skip_starts && a->type != LOOM_ACT_PROVISION_NODE &&
            a->type != LOOM_ACT_RELEASE_NODE)
                return 0;
        switch (a->type) {
        case LOOM_ACT_START_PHASE:
                if ((rc = start_phase(g, a)))
                        return rc;
                return loom_sched_phase_started(g->s, g->now, a->job, a->phase);
        case LOOM_ACT_MIGRATE_TAIL:
                ji = g->by_id[a->job];
                j = &g->jobs[ji];
                if ((rc = record(g, ji, g->now)))
                        return rc;
                tl_seg(g, ji, false);
                loom__sim_meter_busy(&g->meter, g->now, LOOM_POOL_ROLLOUT,
                                     a->keep_gpus - j->busy_gpus);
                free_nodes(g, j);
                j->busy_gpus = a->keep_gpus;
                j->migrated = true;
                j->n_nodes = 1;
                j->nodes[0] = a->nodes[0];
                j->tl_gpus[0] = a->keep_gpus;
                node_state *tn = node_get(g, LOOM_POOL_ROLLOUT, a->nodes[0]);
                if (!tn)
                        return LOOM_ENOMEM;
                tn->tail_job = ji + 1;
                tn->tail_gpus = a->keep_gpus;
                set_rate(g, j, 1.0 / g->c->tail_slowdown);
                g->r->migrations++;
                return schedule_rollout(g, ji);
        case LOOM_ACT_RESIZE_PHASE:
                ji = g->by_id[a->job];
                j = &g->jobs[ji];
                if (!j->rolling || j->migrated)
                        return 0;
                tl_seg(g, ji, false);
                loom__sim_meter_busy(&g->meter, g->now, LOOM_POOL_ROLLOUT, a->gpus - j->busy_gpus);
                j->busy_gpus = a->gpus;
                tl_alloc(g, ji, a->gpus);
                int want = g->w->jobs[ji].spec.rollout_gpus;
                set_rate(g, j, a->gpus >= want ? 1.0 : (double)a->gpus / want);
                return schedule_rollout(g, ji);
        case LOOM_ACT_PROVISION_NODE:
        case LOOM_ACT_RELEASE_NODE: {
                node_state *n = node_get(g, a->pool, a->node);
                if (!n)
                        return LOOM_ENOMEM;
                memset(n, 0, sizeof *n); /* a node comes and goes with an empty host memory */
                n->up_at = n->free_at = g->now + loom_us_from_s(g->c->boot_s);
                g->groups_dirty = true;
                loom__sim_tl_node(g->c, g->pol, g->now, a->pool, a->node,
                                  a->type == LOOM_ACT_PROVISION_NODE);
                return loom__sim_meter_nodes(&g->meter, g->now, a->pool,
                                             a->type == LOOM_ACT_PROVISION_NODE ? 1 : -1);
        }
        case LOOM_ACT_JOB_DONE:
                g->groups_dirty = true;
                ji = g->by_id[a->job];
                g->jobs[ji].active = false;
                g->jobs[ji].done_at = g->now;
                g->finished++;
                loom__sim_tl_event(g->c, g->pol, "done", ji, g->now, NULL, -1);
                return 0;
        }
        return 0;
}

static int drain(engine *g)
{
        loom_action a;
        while (loom_sched_next_action(g->s, &a)) {
                int rc = apply(g, &a);
                if (rc)
                        return fail(g, rc, loom_action_type_name(a.type));
        }
        return 0;
}

/* What job sj declares of its model to the core: its warm switch and its cold start. */
static void declare_model(const engine *g, const loom_sim_job *sj, loom_job_spec *sp)
{
        sp->t_switch = loom__sim_job_switch(g->c, sj->model_b);
        sp->t_cold = loom_sim_cold(g->c, sj->model_b);
}

static int arrival(engine *g, int ji)
{
        const loom_sim_job *sj = &g->w->jobs[ji];
        sjob *j = &g->jobs[ji];
        if (!j->waiting) {
                j->cur = sj->spec;
                declare_model(g, sj, &j->cur);
                j->decl[0] = sj->spec.t_roll;
                j->decl[1] = sj->spec.t_train;
                j->ready = g->now + j->cur.t_cold;
        }
        j->waiting = false;
        j->cur.iterations = sj->spec.iterations - j->iter;
        j->admitted = g->now; /* its workers are launched anew (launch_s) */
        j->launched[0] = j->launched[1] = false;
        loom_decision d;
        loom_decision_init(&d, false);
        loom_job_id id = 0;
        loom_err e2;
        loom_err_clear(&e2);
        int rc = loom_sched_submit(g->s, g->now, &j->cur, &d, &id, &e2);
        g->groups_dirty = true;
        loom_decision_free(&d);
        if (rc == LOOM_EREJECT || rc == LOOM_ERANGE) {
                /* ERANGE: the core could not evaluate a candidate group (its meta-iteration
                 * found no period); the job is counted as rejected and the run goes on. */
                g->r->jobs_rejected++;
                g->finished++;
                loom__sim_tl_event(g->c, g->pol, "rejected", ji, g->now, NULL, -1);
                if (rc == LOOM_ERANGE && !g->r->note[0])
                        snprintf(g->r->note, sizeof g->r->note,
                                 "the core could not place job %d (%.40s): %.120s", ji, sj->spec.id,
                                 e2.msg);
                return 0;
        }
        if (rc) {
                if (g->e)
                        loom_err_set(g->e, rc, e2.field, "job %d (%s): %s", ji, sj->spec.id,
                                     e2.msg);
                return rc;
        }
        if (d.kind <= LOOM_DECISION_NEW_GROUP)
                g->r->decisions[d.kind]++;
        g->r->rate_sum += (uint64_t)(d.rate > 1 ? d.rate : 1);
        g->r->rate_n++;
        if (loom_reserve(&g->by_id, &g->cap_by_id, (size_t)id + 1, sizeof *g->by_id, 1024))
                return LOOM_ENOMEM;
        g->by_id[id] = ji;
        j->id = id;
        j->active = true;
        j->touched[0] = j->touched[1] = false;
        j->n_recent = 0;
        return drain(g);
}

/* The running phase of job ji ends now (lost: cut by a stop): recorded, its nodes and busy GPUs
 * given back, and a tail's place on its node. */
static int phase_over(engine *g, int ji, bool lost)
{
        sjob *j = &g->jobs[ji];
        int rc = record(g, ji, g->now);
        if (rc)
                return rc;
        tl_seg(g, ji, lost);
        if (j->migrated && j->nodes[0] < g->cap_nodes[LOOM_POOL_ROLLOUT] &&
            g->nodes[LOOM_POOL_ROLLOUT][j->nodes[0]].tail_job == ji + 1)
                g->nodes[LOOM_POOL_ROLLOUT][j->nodes[0]].tail_job = 0;
        if (j->phase != LOOM_PHASE_SYNC)
                free_nodes(g, j);
        if (j->busy_gpus)
                loom__sim_meter_busy(&g->meter, g->now, j->busy_pool, -j->busy_gpus);
        j->busy_gpus = 0;
        j->running = j->rolling = false;
        return 0;
}

static int report_progress(engine *g, int ji)
{
        int n = g->w->noise.responses;
        int rc = loom_sched_progress(g->s, g->now, g->jobs[ji].id, LOOM_PHASE_ROLLOUT,
                                     (int64_t)ceil(g->w->noise.tail_threshold * n), n);
        return rc < 0 ? fail(g, rc, "progress") : 0;
}

/* The tail on rollout node `node` ended or left: a rollout there whose progress waited for it
 * reports it now (the caller drains). */
static int flush_progress(engine *g, loom_node_id node)
{
        for (int ji = 0; ji < g->w->n; ji++) {
                sjob *j = &g->jobs[ji];
                if (!j->progress_due || !j->rolling || j->migrated ||
                    j->busy_pool != LOOM_POOL_ROLLOUT || j->nodes[0] != node)
                        continue;
                j->progress_due = false;
                int rc = report_progress(g, ji);
                if (rc)
                        return rc;
        }
        return 0;
}

/* Stop job ji at once: its running phase is abandoned (the iteration in flight is lost, as
 * after a crash), and it leaves the core. cause names the stop in the timeline. */
static int stop_job(engine *g, int ji, loom_exit why, const char *cause)
{
        sjob *j = &g->jobs[ji];
        int rc;
        bool tail = j->running && j->migrated && j->busy_pool == LOOM_POOL_ROLLOUT;
        loom_node_id tn = j->nodes[0];
        if (j->running && (rc = phase_over(g, ji, true)))
                return rc;
        j->version++;
        j->active = false;
        g->groups_dirty = true;
        loom__sim_tl_event(g->c, g->pol, "stop", ji, g->now, cause, -1);
        if ((rc = loom_sched_job_exit(g->s, g->now, j->id, why)))
                return fail(g, rc, "job_exit");
        return tail ? flush_progress(g, tn) : 0;
}

/* Re-admit job ji now with spec j->cur; it is ready to run after `delay` (migration and
 * restart). It is placed at once, as loomd re-admits a job, and holds (and pays for) its new
 * nodes while it restarts there, as a cloud bills nodes from their launch: its first phase on
 * each pool waits out the restart (phase_switch). */
static int resubmit(engine *g, int ji, loom_us delay)
{
        sjob *j = &g->jobs[ji];
        j->waiting = true;
        j->ready = g->now + delay;
        loom__sim_tl_event(g->c, g->pol, "restart", ji, g->now, NULL, j->ready);
        return arrival(g, ji);
}

/* A stopped job ji declares (roll, train, solo_ref) and is re-admitted after its restart;
 * 1 (resubmitted) or an error. */
static int redeclare(engine *g, int ji, loom_us roll, loom_us train, loom_us solo_ref, loom_us head)
{
        sjob *j = &g->jobs[ji];
        j->cur.t_roll = roll;
        j->cur.t_head = head < roll ? head : 0;
        j->cur.t_train = train;
        j->cur.t_solo_ref = solo_ref;
        g->r->resubmits++;
        int rc = resubmit(g, ji, loom__sim_restart(g->c, g->w->jobs[ji].model_b));
        return rc ? rc : 1;
}

static int on_fail(engine *g, int ji)
{
        sjob *j = &g->jobs[ji];
        if (!j->active)
                return 0; /* done, rejected, or already restarting */
        int rc = stop_job(g, ji, LOOM_EXIT_FAILED, "failed");
        if (!rc)
                rc = drain(g);
        if (rc)
                return rc;
        if (j->restarts >= g->c->max_restarts) {
                j->failed = true;
                g->r->jobs_failed++;
                g->finished++;
                return 0;
        }
        j->restarts++;
        g->r->restarts++;
        return resubmit(g, ji, loom__sim_restart(g->c, g->w->jobs[ji].model_b));
}

/* After job ji's iteration `it`: has it outgrown the profile it was admitted with (an upper
 * bound on the p95 of the last five iterations above drift_trigger x declared, per phase)? Then
 * stop it and re-admit it on what it was observed to need. Returns 1 if it did. */
static int check_drift(engine *g, int ji, int64_t it)
{
        sjob *j = &g->jobs[ji];
        const loom_sim_job *sj = &g->w->jobs[ji];
        double fr = sj->roll[it] * (double)sj->spec.t_roll / (double)j->decl[0];
        double ft = sj->train[it] * (double)sj->spec.t_train / (double)j->decl[1];
        j->recent[0][j->n_recent % 5] = (float)fr;
        j->recent[1][j->n_recent % 5] = (float)ft;
        j->n_recent++;
        if (!g->resubmit_drift || j->n_recent < 5 || j->iter >= sj->spec.iterations)
                return 0;
        /* The p95 is bounded as admission bounds its quantiles (loom_quantile_ucb at
         * LOOM_LEARN_CONFIDENCE); five iterations are too few to bound a p95 (45 are needed at
         * 90%), so this is the worst case seen, the largest of the five: a sample p95 of five
         * would be no bound either, and it interpolated below the largest. */
        double p95[2], mx[2];
        for (int p = 0; p < 2; p++) {
                double v[5];
                for (int k = 0; k < 5; k++)
                        v[k] = j->recent[p][k];
                qsort(v, 5, sizeof *v, loom_cmp_double);
                double top[5] = {v[4], v[3], v[2], v[1], v[0]};
                bool ok;
                p95[p] = loom_quantile_ucb(top, 5, 5, 0.95, LOOM_LEARN_CONFIDENCE, &ok);
                mx[p] = v[4];
        }
        if (p95[0] <= g->c->drift_trigger && p95[1] <= g->c->drift_trigger)
                return 0;
        int rc = stop_job(g, ji, LOOM_EXIT_CANCELLED, "drift");
        if (rc)
                return rc;
        /* The observed profile, with headroom: the worst of the last five iterations times
         * drift_headroom (a job still drifting would otherwise be caught again within a few
         * iterations), never below what it declared. */
        for (int p = 0; p < 2; p++) {
                double f = mx[p] * g->c->drift_headroom;
                if (f > 1)
                        j->decl[p] = (loom_us)llround((double)j->decl[p] * f);
        }
        /* a new declaration: measured against itself */
        return redeclare(g, ji, j->decl[0], j->decl[1], 0, 0);
}

static int on_progress(engine *g, int ji)
{
        sjob *j = &g->jobs[ji];
        j->past_threshold = true;
        /* its head as loomd measures it: the wall-clock time from the start of its work to the
         * threshold, on the GPUs it had */
        int rc = loom_sched_observe_head(g->s, j->id, g->now - j->work_start);
        if (rc < 0)
                return fail(g, rc, "observe_head");
        /* A node holds one tail: while another job's tail runs on this rollout's first node
         * (where its own tail would go), its progress waits, so its tail cannot migrate there
         * and over-commit the node's GPUs. */
        if (j->busy_pool == LOOM_POOL_ROLLOUT && j->nodes[0] < g->cap_nodes[LOOM_POOL_ROLLOUT]) {
                const node_state *n = &g->nodes[LOOM_POOL_ROLLOUT][j->nodes[0]];
                if (n->tail_job && n->tail_job != ji + 1) {
                        j->progress_due = true;
                        return 0;
                }
        }
        /* Reported once: the core migrates the tail whenever the next rollout is ready. */
        if ((rc = report_progress(g, ji)))
                return rc;
        return drain(g);
}

/* The core found that job ji's group cannot meet its SLO on what the job achieves alone (obs
 * 2), or that another group would take it for less (obs 3, a move): stop it and re-admit it on
 * its learned profile, its SLO measured on its mean solo iteration. Returns 1 if it did. */
static int readmit_learned(engine *g, int ji, int obs)
{
        sjob *j = &g->jobs[ji];
        const loom_sim_job *sj = &g->w->jobs[ji];
        if (j->iter >= sj->spec.iterations)
                return 0;
        loom_job_info in;
        int rc = loom_sched_job_info(g->s, j->id, &in);
        if (rc || !in.learned_roll)
                return rc;
        /* A restart is worth it only if what is left of the job dwarfs it; a short remainder
         * stays where it is. */
        double left = (double)(sj->spec.iterations - j->iter) * (double)in.learned_budget;
        loom_us restart = loom__sim_restart(g->c, sj->model_b);
        if (left < g->c->readmit_min_ratio * (double)restart)
                return 0;
        /* Under member moves a move is optional: it is made only when the slack the job has
         * banked (its budget times its iterations so far, less the time they took) pays for
         * the restart, so a job never moves itself out of its SLO. */
        if (obs == 3 && g->c->policy.move_members &&
            (double)(g->now - j->first_start + restart) >
                (double)j->iter * (double)in.learned_budget)
                return 0;
        if ((rc = stop_job(g, ji, LOOM_EXIT_CANCELLED, obs == 3 ? "moved" : "learned")))
                return rc;
        return redeclare(g, ji, in.learned_roll, in.learned_train,
                         (loom_us)((double)in.learned_budget / j->cur.slo), in.learned_head);
}

static int on_end(engine *g, int ji)
{
        sjob *j = &g->jobs[ji];
        bool tail = j->migrated && j->busy_pool == LOOM_POOL_ROLLOUT;
        loom_pool ran_on = j->busy_pool; /* a lone member's rollout: the training pool */
        loom_node_id tn = j->nodes[0];
        int rc = phase_over(g, ji, false);
        if (rc)
                return rc;
        loom_phase ph = j->phase;
        /* a training phase run call by call ends with its last call; learned profiles
         * observe whole phases only. What is observed is what loomd observes: the wall-clock
         * time the phase's work took on the nodes and GPUs it had (partial-GPU starts, a slow
         * tail, a lone member's rollout on training GPUs), its switch excepted: the core plans
         * switches on their own. */
        bool whole = j->n_calls == 0;
        loom_us took = g->now - j->work_start;
        int obs = whole ? loom_sched_observe_ran(
                              g->s, g->now, j->id, ph,
                              ph == LOOM_PHASE_ROLLOUT ? ran_on : LOOM_POOL_TRAIN,
                              ph == LOOM_PHASE_TRAIN ? j->n_nodes * g->c->cluster.gpus_per_node : 0,
                              took < 0 ? 0 : took)
                        : 0;
        if (obs < 0)
                return fail(g, obs, "observe");
        if (ph == LOOM_PHASE_TRAIN && (whole || j->call + 1 == j->n_calls)) {
                j->iter++;
                if ((rc = check_drift(g, ji, j->iter - 1)))
                        return rc < 0 ? rc : drain(g);
                /* 2: its group cannot serve it; 3: another group would take it for less (a
                 * member moved): either way it is re-admitted on its learned profile */
                if ((obs == 2 || obs == 3) && (rc = readmit_learned(g, ji, obs))) {
                        if (rc > 0 && obs == 3)
                                g->r->moves++;
                        return rc < 0 ? rc : drain(g);
                }
        }
        if ((rc = loom_sched_phase_done(g->s, g->now, j->id, ph)))
                return fail(g, rc, "phase_done");
        if (tail && (rc = flush_progress(g, tn)))
                return rc;
        return drain(g);
}

/* Job ji's profile now: its declared worst case under its drift template's current factor. */
static loom_job_spec current_profile(const engine *g, int ji)
{
        const loom_sim_job *sj = &g->w->jobs[ji];
        loom_job_spec sp = sj->spec;
        double f = loom_sim_drift_factor(sj->drift_dir, sj->drift_scale, sj->model_b,
                                         (double)g->jobs[ji].iter / (double)sp.iterations);
        sp.t_roll = (loom_us)llround((double)sp.t_roll * f);
        sp.t_train = (loom_us)llround((double)sp.t_train * f);
        sp.iterations -= g->jobs[ji].iter;
        declare_model(g, sj, &sp);
        return sp;
}

/* regroup: re-place every active job from scratch under its current profile when that is
 * cheaper, or when the current grouping no longer meets some member's SLO. */
static int on_regroup(engine *g)
{
        const loom_sim_workload *w = g->w;
        int n = 0, rc = LOOM_ENOMEM;
        size_t m = (size_t)(w->n ? w->n : 1);
        int *idx = malloc(sizeof *idx * m * 4);
        loom_job_spec *sp = malloc(sizeof *sp * m);
        loom_job_spec *by_id = calloc(g->cap_by_id + 1, sizeof *by_id);
        bool *moved = malloc(sizeof *moved * m);
        if (!idx || !sp || !by_id || !moved)
                goto out;
        int *order = idx + m, *new_g = idx + 2 * m, *old_g = idx + 3 * m;
        for (int ji = 0; ji < w->n; ji++)
                if (g->jobs[ji].active) {
                        sp[n] = current_profile(g, ji);
                        by_id[g->jobs[ji].id] = sp[n];
                        loom_job_info info;
                        loom_sched_job_info(g->s, g->jobs[ji].id, &info);
                        old_g[n] = (int)info.group;
                        idx[n++] = ji;
                }
        rc = 0;
        if (n == 0)
                goto out;
        bool ok;
        double cost;
        loom_sched_stats st;
        loom_sched_stats_get(g->s, &st);
        if ((rc = loom__sim_regroup_feasible(g->s, by_id, &ok)) ||
            (rc = loom__sim_regroup_plan(g->c, sp, n, g->c->policy.seed ^ (uint64_t)g->now, order,
                                         new_g, &cost, g->e)))
                goto out;
        if (ok && !(cost < st.cost_per_hour - 1e-6))
                goto out;
        g->r->moves += (uint64_t)loom__sim_mark_moved(old_g, new_g, n, moved);
        g->skip_starts = true;
        for (int k = 0; k < n && !rc; k++)
                rc = stop_job(g, idx[k], LOOM_EXIT_CANCELLED, "regroup");
        if (!rc)
                rc = drain(g);
        g->skip_starts = false;
        for (int k = 0; k < n && !rc; k++) {
                int ji = idx[order[k]];
                sjob *j = &g->jobs[ji];
                loom_us delay = moved[order[k]] ? loom__sim_restart(g->c, w->jobs[ji].model_b) : 0;
                if (delay)
                        g->r->regroup_migration_h += loom_us_to_s(delay) / 3600.0;
                j->cur = sp[order[k]];
                j->waiting = true;
                j->ready = g->now + delay;
                loom__sim_tl_event(g->c, g->pol, "restart", ji, g->now, NULL, j->ready);
                rc = arrival(g, ji);
                j->ready = g->now + delay;
        }
        g->r->regroups++;
out:
        free(idx);
        free(sp);
        free(by_id);
        free(moved);
        if (!rc && g->finished < w->n)
                rc = loom__sim_heap_push(&g->heap,
                                         g->now + loom_us_from_s(g->c->regroup_period_h * 3600.0),
                                         SIM_EV_REGROUP, 0, 0);
        return rc;
}

static void engine_free(engine *g)
{
        loom_sched_free(g->s);
        loom__sim_heap_free(&g->heap);
        free(g->jobs);
        free(g->gids);
        free(g->by_id);
        free(g->nodes[0]);
        free(g->nodes[1]);
}

int loom__sim_run_core(const loom_sim_cfg *c, const loom_sim_workload *w, loom_sim_policy p,
                       loom_sim_result *r, loom_err *e)
{
        loom_sim_cfg cc = *c;
        cc.policy.tail_migration = p != LOOM_SIM_LOOM_NOMIG && c->policy.tail_migration;
        cc.policy.placer = p == LOOM_SIM_RANDOM       ? LOOM_PLACER_RANDOM
                           : p == LOOM_SIM_GREEDY     ? LOOM_PLACER_GREEDY
                           : p == LOOM_SIM_RANDOM_SLO ? LOOM_PLACER_RANDOM_SLO
                           : p == LOOM_SIM_GREEDY_SLO ? LOOM_PLACER_GREEDY_SLO
                                                      : LOOM_PLACER_LOOM;
        if (p == LOOM_SIM_LOOM && c->policy.placer == LOOM_PLACER_PLEX)
                cc.policy.placer = LOOM_PLACER_PLEX; /* PlexRL's placer through the same core */
        if (c->sleep_phases) { /* sleeping workers: no progress reports, no switch (loomd's) */
                cc.policy.tail_migration = false;
                cc.policy.warm_switch = 0;
        }
        /* SLO-blind placers and regroup plan on declared worst cases only */
        r->admits = p != LOOM_SIM_RANDOM && p != LOOM_SIM_GREEDY;
        if (!r->admits || p == LOOM_SIM_REGROUP)
                cc.policy.admission = LOOM_ADMIT_WORST;
        r->admission = cc.policy.admission;
        r->multirate = cc.policy.multirate && cc.policy.placer == LOOM_PLACER_LOOM;
        r->plan_tails = loom_policy_plans_tails(&cc.policy, cc.cluster.gpus_per_node) &&
                        cc.policy.admission != LOOM_ADMIT_WORST;
        r->drift = w->drift;
        engine g = {.c = &cc, .w = w, .r = r, .e = e, .pol = p};
        loom__sim_tl_head(&cc, w, p);
        g.resubmit_drift = p != LOOM_SIM_REGROUP && c->drift_trigger > 0;
        loom__sim_heap_init(&g.heap);
        loom__sim_meter_init(&g.meter, &cc.cluster, r, c->record_series);
        int rc = LOOM_ENOMEM;
        g.jobs = calloc((size_t)(w->n ? w->n : 1), sizeof *g.jobs);
        if (!g.jobs)
                goto out;
        g.s = loom_sched_new(&cc.cluster, &cc.policy, e);
        if (!g.s) {
                rc = LOOM_EINVAL;
                goto out;
        }
        for (int i = 0; i < w->n; i++)
                g.jobs[i].done_at = g.jobs[i].first_start = -1;
        if ((rc = loom__sim_heap_seed(&g.heap, w)))
                goto out;
        if (p == LOOM_SIM_REGROUP && w->n &&
            (rc = loom__sim_heap_push(
                 &g.heap, w->jobs[0].arrival + loom_us_from_s(cc.regroup_period_h * 3600.0),
                 SIM_EV_REGROUP, 0, 0)))
                goto out;
        sim_event ev;
        rc = 0;
        bool by_group = p == LOOM_SIM_LOOM; /* loom's bill by group kind (count_groups) */
        while (!rc && loom__sim_heap_pop(&g.heap, &ev)) {
                sjob *j = &g.jobs[ev.job];
                if ((ev.type == SIM_EV_PROGRESS || ev.type == SIM_EV_END) &&
                    ev.version != j->version)
                        continue;
                /* a failure of a job not running, or a regroup after the last job: no event */
                if ((ev.type == SIM_EV_FAIL && !j->active) ||
                    (ev.type == SIM_EV_REGROUP && g.finished >= w->n))
                        continue;
                if (by_group) {
                        double dt = (double)(ev.t - g.now);
                        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++)
                                for (int q = 0; q < 2; q++)
                                        r->group_cost[k][q] += dt * g.kind_nodes[k][q];
                        for (int b = 0; b < 4; b++)
                                r->lone_cost_by_slo[b] += dt * g.lone_slo_nodes[b];
                }
                g.now = ev.t;
                r->events++;
                if (ev.type == SIM_EV_ARRIVAL || ev.type == SIM_EV_RESUBMIT)
                        rc = arrival(&g, (int)ev.job);
                else if (ev.type == SIM_EV_FAIL)
                        rc = on_fail(&g, (int)ev.job);
                else if (ev.type == SIM_EV_REGROUP)
                        rc = on_regroup(&g);
                else if (ev.type == SIM_EV_PROGRESS)
                        rc = on_progress(&g, (int)ev.job);
                else
                        rc = on_end(&g, (int)ev.job);
                if (!rc && by_group && g.groups_dirty)
                        rc = count_groups(&g);
                g.groups_dirty = false;
                if ((r->events & 0xFFFF) == 0)
                        sim_progress(c, p, (double)g.finished / (w->n ? w->n : 1));
        }
        sim_progress(c, p, -1);
        if (rc)
                goto out;
        loom__sim_meter_finish(&g.meter, g.now);
        double per_us[2] = {loom_cluster_node_price(&cc.cluster, LOOM_POOL_ROLLOUT) / 1e6 / 3600.0,
                            loom_cluster_node_price(&cc.cluster, LOOM_POOL_TRAIN) / 1e6 / 3600.0};
        for (int k = 0; k <= LOOM_MAX_GROUP_SIZE; k++)
                for (int q = 0; q < 2; q++)
                        r->group_cost[k][q] *= per_us[q];
        for (int b = 0; b < 4; b++)
                r->lone_cost_by_slo[b] *= per_us[1];
        /* one-member groups that are not lone pay their rollout nodes beside the training ones */
        r->lone_rollout_cost = r->group_cost[1][0];
        loom_sched_stats st;
        loom_sched_stats_get(g.s, &st);
        r->replans = st.replans;
        r->slo_relaxed = st.slo_relaxed;
        r->pool_grown = st.pool_grown;
        r->pool_shrunk = st.pool_shrunk;
        loom_us *done = malloc((size_t)(w->n ? w->n : 1) * 2 * sizeof *done);
        if (!done) {
                rc = LOOM_ENOMEM;
                goto out;
        }
        for (int i = 0; i < w->n; i++) {
                done[i] = g.jobs[i].done_at;
                done[w->n + i] = g.jobs[i].first_start;
        }
        rc = loom__sim_finish_jobs(&cc, w, done, done + w->n, r);
        free(done);
        if (!rc && r->jobs_done + r->jobs_rejected < w->n && !r->note[0])
                snprintf(r->note, sizeof r->note, "%d jobs did not finish",
                         w->n - r->jobs_done - r->jobs_rejected);
out:
        engine_free(&g);
        if (rc == LOOM_ENOMEM && e && !e->msg[0])
                loom_err_set(e, rc, "", "out of memory");
        return rc;
}
