/*
 * test_harvest_router.c - the elastic turn router: 16 turns per dedicated GPU, spill to serving
 * GPUs, least-loaded choice, cache affinity, pinned trajectories, stall closing, heartbeat
 * failure rerouting, weight staleness.
 */
#include <criterion/criterion.h>

#include "loom/harvest.h"

static loom_harvest_router *mk(int affinity, int pinned)
{
        loom_harvest_router_cfg c = {.dedicated_cap = 16,
                                     .serving_cap = 4,
                                     .affinity = affinity,
                                     .pinned = pinned,
                                     .heartbeat_timeout = 5 * LOOM_US_PER_S,
                                     .max_staleness = 1};
        loom_harvest_router *r;
        loom_err e;
        cr_assert_eq(loom_harvest_router_new(&c, &r, &e), 0);
        cr_assert_eq(loom_harvest_router_add(r, LOOM_HARVEST_W_DEDICATED, 0), 0);
        cr_assert_eq(loom_harvest_router_add(r, LOOM_HARVEST_W_DEDICATED, 0), 1);
        cr_assert_eq(loom_harvest_router_add(r, LOOM_HARVEST_W_SERVING, 0), 2);
        cr_assert_eq(loom_harvest_router_add(r, LOOM_HARVEST_W_SERVING, 0), 3);
        return r;
}

/* More than twice the 40 slots active once: slots bind for the rest of the step (turn-level
 * routing, slots lent between turns); one trajectory stays queued so the step does not end. */
static void bind_slots(loom_harvest_router *r)
{
        for (uint32_t t = 1000; t <= 1080; t++)
                loom_harvest_router_route(r, 0, t, NULL);
        for (uint32_t t = 1000; t < 1080; t++) {
                loom_harvest_router_done(r, 0, t);
                loom_harvest_router_finish(r, t);
        }
        cr_assert_eq(loom_harvest_router_room(r, 0), 40);
}

Test(router, cap_then_spill_least_loaded)
{
        loom_harvest_router *r = mk(1, 0);
        uint32_t ded = 0, srv = 0;
        for (uint32_t t = 0; t < 32; t++)
                ded += loom_harvest_router_route(r, 0, t, NULL) < 2;
        cr_assert_eq(ded, 32);
        cr_assert_eq(loom_harvest_router_load(r, 0), 16); /* balanced, capped at 16 */
        cr_assert_eq(loom_harvest_router_load(r, 1), 16);
        for (uint32_t t = 32; t < 40; t++) {
                uint32_t w = loom_harvest_router_route(r, 0, t, NULL);
                srv += w == 2 || w == 3;
        }
        cr_assert_eq(srv, 8);
        cr_assert_eq(loom_harvest_router_load(r, 2), 4);
        cr_assert_eq(loom_harvest_router_load(r, 3), 4);
        cr_assert_eq(loom_harvest_router_route(r, 0, 40, NULL), LOOM_HARVEST_NONE);
        /* a finished trajectory frees its dedicated slot: the queued turn goes there */
        loom_harvest_router_done(r, 0, 5);
        loom_harvest_router_finish(r, 5);
        uint32_t w = loom_harvest_router_route(r, 0, 40, NULL);
        cr_assert(w < 2);
        loom_harvest_router_free(r);
}

Test(router, affinity_returns_to_prefix_holder)
{
        loom_harvest_router *r = mk(1, 0);
        for (uint32_t t = 0; t < 32; t++)
                loom_harvest_router_route(r, 0, t, NULL);
        uint32_t w = loom_harvest_router_route(r, 0, 100, NULL); /* spilled */
        cr_assert(w >= 2);
        loom_harvest_router_done(r, 0, 100);
        loom_harvest_router_done(r, 0, 0); /* room on a dedicated GPU now */
        int affine;
        cr_assert_eq(loom_harvest_router_route(r, 0, 100, &affine), w);
        cr_assert(affine);
        /* without affinity the dedicated GPU wins */
        loom_harvest_router *n = mk(0, 0);
        for (uint32_t t = 0; t < 32; t++)
                loom_harvest_router_route(n, 0, t, NULL);
        uint32_t w2 = loom_harvest_router_route(n, 0, 100, NULL);
        loom_harvest_router_done(n, 0, 100);
        loom_harvest_router_done(n, 0, 0);
        cr_assert_neq(loom_harvest_router_route(n, 0, 100, &affine), w2);
        cr_assert_not(affine);
        /* an aborted turn loses its prefix: no affinity */
        loom_harvest_router_abort(r, 100);
        loom_harvest_router_route(r, 0, 100, &affine);
        cr_assert_not(affine);
        loom_harvest_router_free(r);
        loom_harvest_router_free(n);
}

Test(router, pinned_holds_its_slot_and_waits_for_its_worker)
{
        loom_harvest_router *r = mk(0, 1);
        uint32_t w = loom_harvest_router_route(r, 0, 1, NULL);
        loom_harvest_router_done(r, 0, 1);
        /* between turns a pinned trajectory keeps its slot (the environment step idles it) */
        cr_assert_eq(loom_harvest_router_load(r, w), 1);
        /* other trajectories fill both dedicated GPUs around it */
        for (uint32_t t = 10; t < 10 + 31; t++)
                cr_assert(loom_harvest_router_route(r, 0, t, NULL) < 2);
        cr_assert_eq(loom_harvest_router_load(r, w), 16);
        int affine = 0;
        cr_assert_eq(loom_harvest_router_route(r, 0, 1, &affine), w); /* its own slot */
        cr_assert(affine);
        cr_assert_eq(loom_harvest_router_load(r, w), 16);
        /* an aborted turn loses the slot: serving GPUs have room, but it waits for its worker */
        loom_harvest_router_abort(r, 1);
        cr_assert_eq(loom_harvest_router_load(r, w), 15);
        uint32_t y = 100;
        while (loom_harvest_router_route(r, 0, y, NULL) != w)
                y++; /* another trajectory takes the freed slot */
        cr_assert_eq(loom_harvest_router_route(r, 0, 1, NULL), LOOM_HARVEST_NONE);
        uint32_t x = 10;
        while (loom_harvest_router_running(r, x) != w)
                x++;
        loom_harvest_router_done(r, 0, x);
        cr_assert_eq(loom_harvest_router_load(r, w), 16); /* x keeps its slot too */
        loom_harvest_router_finish(r, x);                 /* x's last turn: the slot is free */
        cr_assert_eq(loom_harvest_router_load(r, w), 15);
        cr_assert_eq(loom_harvest_router_route(r, 0, 1, NULL), w);
        loom_harvest_router_done(r, 0, 1);
        loom_harvest_router_finish(r, 1);
        cr_assert_eq(loom_harvest_router_load(r, w), 15);
        loom_harvest_router_finish(r, 1); /* twice changes nothing */
        cr_assert_eq(loom_harvest_router_load(r, w), 15);
        loom_harvest_router_free(r);
}

Test(router, stall_closes_serving_worker)
{
        loom_harvest_router *r = mk(1, 0);
        for (uint32_t t = 0; t < 32; t++)
                loom_harvest_router_route(r, 0, t, NULL);
        loom_harvest_router_close(r, 2, 2 * LOOM_US_PER_S);
        for (uint32_t t = 50; t < 54; t++)
                cr_assert_eq(loom_harvest_router_route(r, 0, t, NULL), 3);
        cr_assert_eq(loom_harvest_router_route(r, 0, 60, NULL), LOOM_HARVEST_NONE);
        cr_assert_eq(loom_harvest_router_route(r, 2 * LOOM_US_PER_S, 60, NULL), 2);
        loom_harvest_router_free(r);
}

Test(router, heartbeat_loss_reroutes)
{
        loom_harvest_router *r = mk(1, 0);
        for (uint32_t t = 0; t < 36; t++)
                loom_harvest_router_route(r, 0, t, NULL);
        uint32_t on2 = 0;
        for (uint32_t t = 0; t < 36; t++)
                on2 += loom_harvest_router_running(r, t) == 2;
        cr_assert(on2 > 0);
        loom_us now = 6 * LOOM_US_PER_S;
        for (uint32_t w = 0; w < 4; w++)
                if (w != 2)
                        loom_harvest_router_heartbeat(r, w, now, 0);
        uint32_t out[64];
        size_t n = loom_harvest_router_check(r, now, out, 64);
        cr_assert_eq(n, on2);
        for (size_t i = 0; i < n; i++) {
                cr_assert_eq(loom_harvest_router_running(r, out[i]), LOOM_HARVEST_NONE);
                cr_assert_eq(loom_harvest_router_route(r, now, out[i], NULL), 3);
        }
        loom_harvest_router_free(r);
}

Test(router, staleness)
{
        loom_harvest_router *r = mk(1, 0);
        loom_harvest_router_set_version(r, 3);
        loom_harvest_router_heartbeat(r, 0, 0, 3);
        loom_harvest_router_heartbeat(r, 1, 0, 1); /* two behind: out */
        loom_harvest_router_heartbeat(r, 2, 0, 2); /* one behind: allowed */
        loom_harvest_router_heartbeat(r, 3, 0, 0);
        for (uint32_t t = 0; t < 16; t++)
                cr_assert_eq(loom_harvest_router_route(r, 0, t, NULL), 0);
        for (uint32_t t = 16; t < 20; t++)
                cr_assert_eq(loom_harvest_router_route(r, 0, t, NULL), 2);
        cr_assert_eq(loom_harvest_router_route(r, 0, 20, NULL), LOOM_HARVEST_NONE);
        loom_harvest_router_free(r);
}

/* The re-prefill vs queueing cost model, against costs worked out by hand. Serving worker 2
 * holds the prefixes of trajectories 100 and 101; each of their turns there took 1 s, so its
 * mean turn time is 1 s and, full (4 slots), a slot frees every 1 s / 4 = 250 ms on average.
 * Moving a turn of an 8,192-token context that keeps 7,792 tokens cached re-prefills them:
 * about 274 - 21 = 253 ms on the 7b model (docs/harvest.md's table: prefill 8k 274 ms, a
 * 512 chunk after 8k 21 ms); a 1,024-token context costs about 33 ms. */
Test(router, wait_for_the_prefix_when_the_wait_is_shorter_than_the_re_prefill)
{
        loom_harvest_model m;
        loom_err e;
        cr_assert_eq(loom_harvest_model_preset("7b", &m, &e), 0);
        loom_us big = loom_harvest_t_prefill(&m, 8192, 0) - loom_harvest_t_prefill(&m, 400, 7792);
        loom_us small = loom_harvest_t_prefill(&m, 1024, 0) - loom_harvest_t_prefill(&m, 400, 624);
        cr_assert(big > 250000 && big < 290000, "%lld", (long long)big);
        cr_assert(small < 50000, "%lld", (long long)small);

        loom_harvest_router *r = mk(1, 0);
        bind_slots(r);
        for (uint32_t t = 0; t < 32; t++) /* the dedicated GPUs are full */
                cr_assert(loom_harvest_router_route(r, 0, t, NULL) < 2);
        cr_assert_eq(loom_harvest_router_route(r, 0, 100, NULL), 2);
        cr_assert_eq(loom_harvest_router_route(r, 0, 150, NULL), 3);
        cr_assert_eq(loom_harvest_router_route(r, 0, 101, NULL), 2);
        loom_harvest_router_done(r, LOOM_US_PER_S, 100);
        loom_harvest_router_done(r, LOOM_US_PER_S, 101);
        loom_harvest_router_done(r, LOOM_US_PER_S, 150);
        for (uint32_t t = 200; t < 207; t++) /* 2, 3, 2, 3, ...: worker 2 full, 3 has a slot */
                loom_harvest_router_route(r, LOOM_US_PER_S, t, NULL);
        cr_assert_eq(loom_harvest_router_load(r, 2), 4);
        cr_assert_eq(loom_harvest_router_load(r, 3), 3);
        cr_assert_eq(loom_harvest_router_wait_us(r, 2), 250000);
        cr_assert_eq(loom_harvest_router_wait_us(r, 3), 0);

        /* 250 ms of waiting < 253 ms of re-prefill: stay */
        loom_us now = LOOM_US_PER_S;
        cr_assert_eq(loom_harvest_router_route_cost(r, now, 100, big, NULL), LOOM_HARVEST_NONE);
        cr_assert_eq(loom_harvest_router_waiting(r, 100), 2);
        /* behind it the wait doubles to 500 ms > 253 ms: move to the free slot */
        cr_assert_eq(loom_harvest_router_wait_us(r, 2), 500000);
        int affine = 1;
        cr_assert_eq(loom_harvest_router_route_cost(r, now, 101, big, &affine), 3);
        cr_assert_not(affine);
        /* a short context is cheaper to re-prefill than the wait: it moves */
        loom_harvest_router_done(r, now, 101); /* 3 has a slot again */
        cr_assert_eq(loom_harvest_router_route_cost(r, now, 100, small, &affine), 3);
        cr_assert_not(affine);
        cr_assert_eq(loom_harvest_router_waiting(r, 100), LOOM_HARVEST_NONE);
        loom_harvest_router_abort(r, 100); /* its prefix stays on 2 */
        /* without a move cost (nothing worth keeping) a full holder is never waited for */
        cr_assert_eq(loom_harvest_router_route(r, now, 100, NULL), 3);
        loom_harvest_router_abort(r, 100);
        /* a slot frees on 2: the waiting turn lands on its prefix */
        loom_harvest_router_done(r, now, 200);
        cr_assert_eq(loom_harvest_router_route_cost(r, now, 100, big, &affine), 2);
        cr_assert(affine);
        cr_assert_eq(loom_harvest_router_waiting(r, 100), LOOM_HARVEST_NONE);
        loom_harvest_router_free(r);
}

/* While the active trajectories fit in twice the slots (40 here), a trajectory between turns
 * keeps its slot on its prefix worker: a new trajectory does not take it, its own next turn
 * does. Once more are active, slots are lent between turns until the step's end. */
Test(router, reserves_slots_between_turns_until_slots_bind)
{
        loom_harvest_router *r = mk(1, 0);
        for (uint32_t t = 0; t < 40; t++)
                cr_assert_neq(loom_harvest_router_route(r, 0, t, NULL), LOOM_HARVEST_NONE);
        uint32_t w0 = loom_harvest_router_running(r, 0);
        loom_harvest_router_done(r, 0, 0); /* trajectory 0 waits for its environment */
        cr_assert_eq(loom_harvest_router_room(r, 0), 0);
        cr_assert_eq(loom_harvest_router_route(r, 0, 40, NULL), LOOM_HARVEST_NONE);
        int affine;
        cr_assert_eq(loom_harvest_router_route(r, 0, 0, &affine), w0);
        cr_assert(affine);
        /* 81 active trajectories > 2 x 40 slots: slots bind, a free slot is lent */
        for (uint32_t t = 41; t <= 80; t++)
                cr_assert_eq(loom_harvest_router_route(r, 0, t, NULL), LOOM_HARVEST_NONE);
        loom_harvest_router_done(r, 0, 1);
        cr_assert_eq(loom_harvest_router_room(r, 0), 1);
        cr_assert_neq(loom_harvest_router_route(r, 0, 40, NULL), LOOM_HARVEST_NONE);
        loom_harvest_router_free(r);
}
