/*
 * test_harvest_mech.c - the pure mechanisms of ROSE and the page pool in real memory: remapping
 * pages between the two models' virtual ranges, the per-step budget, the watermark emergency
 * cut (halve once, free whole requests, freeze), leases, the static split, dual-SLO admission
 * with the worked examples, stall detection, and the job's choice of serving GPUs.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom/harvest.h"

#define MS LOOM_US_PER_MS

/* ---- page pool ----------------------------------------------------------------------- */

Test(pool, remap_moves_the_physical_page)
{
        loom_harvest_pool *p;
        loom_err e;
        cr_assert_eq(loom_harvest_pool_new(4, LOOM_HARVEST_PAGE, &p, &e), 0, "%s", e.msg);
        uint32_t v;
        cr_assert_eq(loom_harvest_pool_map(p, LOOM_HARVEST_SERVING, &v, &e), 0);
        cr_assert_eq(v, 0);
        uint32_t ph = loom_harvest_pool_phys(p, LOOM_HARVEST_SERVING, v);
        char *a = loom_harvest_pool_addr(p, LOOM_HARVEST_SERVING, v);
        memset(a, 0x5a, LOOM_HARVEST_PAGE);
        cr_assert_eq(loom_harvest_pool_unmap(p, LOOM_HARVEST_SERVING, v), 0);
        cr_assert_eq(loom_harvest_pool_phys(p, LOOM_HARVEST_SERVING, v), LOOM_HARVEST_NONE);
        uint32_t w;
        cr_assert_eq(loom_harvest_pool_map(p, LOOM_HARVEST_ROLLOUT, &w, &e), 0);
        /* the freed physical page is reused and its bytes appear at the rollout address */
        cr_assert_eq(loom_harvest_pool_phys(p, LOOM_HARVEST_ROLLOUT, w), ph);
        unsigned char *b = loom_harvest_pool_addr(p, LOOM_HARVEST_ROLLOUT, w);
        cr_assert_eq(b[0], 0x5a);
        cr_assert_eq(b[LOOM_HARVEST_PAGE - 1], 0x5a);
        cr_assert_neq((void *)a, (void *)b);
        cr_assert_eq(loom_harvest_pool_used(p, LOOM_HARVEST_ROLLOUT), 1);
        cr_assert_eq(loom_harvest_pool_used(p, LOOM_HARVEST_SERVING), 0);
        loom_harvest_pool_free(p);
}

Test(pool, exhaustion_and_contiguous_ranges)
{
        loom_harvest_pool *p;
        loom_err e;
        cr_assert_eq(loom_harvest_pool_new(3, LOOM_HARVEST_PAGE, &p, &e), 0);
        uint32_t v[3];
        for (int i = 0; i < 3; i++) {
                cr_assert_eq(loom_harvest_pool_map(p, LOOM_HARVEST_ROLLOUT, &v[i], &e), 0);
                cr_assert_eq(v[i], (uint32_t)i); /* the model sees a contiguous range */
                memset(loom_harvest_pool_addr(p, LOOM_HARVEST_ROLLOUT, v[i]), i, 4096);
        }
        uint32_t x;
        cr_assert_eq(loom_harvest_pool_map(p, LOOM_HARVEST_SERVING, &x, &e), LOOM_ERANGE);
        cr_assert_eq(loom_harvest_pool_free_pages(p), 0);
        cr_assert_eq(loom_harvest_pool_unmap(p, LOOM_HARVEST_ROLLOUT, 1), 0);
        cr_assert_eq(loom_harvest_pool_unmap(p, LOOM_HARVEST_ROLLOUT, 1), LOOM_ENOENT);
        cr_assert_eq(loom_harvest_pool_map(p, LOOM_HARVEST_SERVING, &x, &e), 0);
        cr_assert_eq(((char *)loom_harvest_pool_addr(p, LOOM_HARVEST_ROLLOUT, 2))[0], 2);
        loom_harvest_pool_free(p);
}

Test(pool, unmapped_page_faults)
{
        loom_harvest_pool *p;
        loom_err e;
        uint32_t v;
        cr_assert_eq(loom_harvest_pool_new(2, LOOM_HARVEST_PAGE, &p, &e), 0);
        cr_assert_eq(loom_harvest_pool_map(p, LOOM_HARVEST_SERVING, &v, &e), 0);
        cr_assert_eq(loom_harvest_pool_unmap(p, LOOM_HARVEST_SERVING, v), 0);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) {
                signal(SIGSEGV, SIG_DFL); /* not the sanitizer's report: the plain fault */
                volatile char *a = loom_harvest_pool_addr(p, LOOM_HARVEST_SERVING, v);
                a[0] = 1; /* PROT_NONE again: must fault */
                _exit(0);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
        loom_harvest_pool_free(p);
}

Test(pool, bad_sizes)
{
        loom_harvest_pool *p;
        loom_err e;
        cr_assert_eq(loom_harvest_pool_new(0, LOOM_HARVEST_PAGE, &p, &e), LOOM_EINVAL);
        cr_assert_eq(loom_harvest_pool_new(2, 1000, &p, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "page_bytes");
}

/* ---- memory policy ------------------------------------------------------------------- */

static loom_harvest_mem mk(int preempt)
{
        loom_harvest_mem m;
        loom_harvest_mem_cfg c = {.pages = 100,
                                  .headroom_pages = 20,
                                  .watermark = 0.5,
                                  .lease = 10 * LOOM_US_PER_S,
                                  .preempt = preempt};
        loom_err e;
        cr_assert_eq(loom_harvest_mem_init(&m, &c, &e), 0, "%s", e.msg);
        return m;
}

Test(mem, budget_keeps_headroom)
{
        loom_harvest_mem m = mk(1);
        loom_harvest_mem_step(&m, 10);
        cr_assert_eq(m.budget, 70); /* 100 - H 20 - recent 10 */
        cr_assert_eq(loom_harvest_mem_watermark(&m), 20);
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 1, 60), 0);
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 2, 11), LOOM_ERANGE);
        cr_assert_eq(m.rollout_used, 60);
        cr_assert_null(loom_harvest_mem_find(&m, 2)); /* nothing changed */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 2, 10), 0);
        loom_harvest_mem_fini(&m);
}

/* A step's budget may fall below what running requests hold; freeing a cached prefix then
 * raises the free pages but not the budget's room. The take must be refused (it used to run
 * out of victims and remove entry -1). */
Test(mem, budget_below_running_requests_refuses_without_reclaiming)
{
        loom_harvest_mem m = mk(1);
        loom_harvest_mem_step(&m, 0); /* budget 80 */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 1, 60), 0);
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 2, 5), 0);
        loom_harvest_mem_step(&m, 30); /* budget 50 < 65 held by running requests */
        cr_assert_eq(m.budget, 50);
        loom_harvest_mem_rollout_idle(&m, 0, 2, 1); /* 5 pages cached */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 3, 3), LOOM_ERANGE);
        cr_assert_eq(m.rollout_used, 65);
        cr_assert_not_null(loom_harvest_mem_find(&m, 2)); /* nothing changed */
        cr_assert_null(loom_harvest_mem_find(&m, 3));
        loom_harvest_mem_rollout_idle(&m, 0, 1, 1); /* now 65 cached: reclaim, then fit */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 3, 40), 0);
        cr_assert_null(loom_harvest_mem_find(&m, 1)); /* both prefixes had to go */
        cr_assert(m.rollout_used <= m.budget);
        loom_harvest_mem_fini(&m);
}

Test(mem, emergency_cut_halves_once_frees_whole_requests_and_freezes)
{
        loom_harvest_mem m = mk(1);
        loom_harvest_mem_step(&m, 10);
        size_t na;
        uint32_t ab[8];
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 10, ab, 8, &na), 0);
        cr_assert_eq(na, 0);
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 1, 30), 0); /* A, oldest */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 2, 30), 0); /* B, newest */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 3, 10), 0); /* C, then idle */
        loom_harvest_mem_rollout_idle(&m, 0, 3, 1);
        cr_assert_eq(m.rollout_used, 70);
        /* burst: serving to 25 pages > watermark 20 */
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 15, ab, 8, &na), 0);
        cr_assert_eq(m.cuts, 1);
        cr_assert_eq(m.budget, 35);
        cr_assert(m.frozen);
        /* cached C goes first, then the newest running request B; A survives */
        cr_assert_eq(na, 1);
        cr_assert_eq(ab[0], 2);
        cr_assert_eq(m.rollout_used, 30);
        cr_assert_not_null(loom_harvest_mem_find(&m, 1));
        cr_assert_null(loom_harvest_mem_find(&m, 3));
        /* more serving: no second halving while frozen */
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 5, ab, 8, &na), 0);
        cr_assert_eq(m.budget, 35);
        cr_assert_eq(m.cuts, 1);
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 4, 6), LOOM_ERANGE); /* 30+6 > 35 */
        /* the next RL step recomputes from serving's recent use and unfreezes */
        loom_harvest_mem_serving_put(&m, 20);
        loom_harvest_mem_step(&m, 10);
        cr_assert_not(m.frozen);
        cr_assert_eq(m.budget, 70);
        loom_harvest_mem_fini(&m);
}

Test(mem, serving_preempts_rollout_when_the_pool_is_full)
{
        loom_harvest_mem m = mk(1);
        loom_harvest_mem_step(&m, 0); /* budget 80, watermark 10 */
        size_t na;
        uint32_t ab[8];
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 1, 40), 0);
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 2, 40), 0);
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 30, ab, 8, &na), 0);
        /* 20 free: request 2 (newest) is preempted for room; then the cut (budget 40) holds */
        cr_assert_eq(na, 1);
        cr_assert_eq(ab[0], 2);
        cr_assert_eq(m.serving_used, 30);
        cr_assert_eq(m.rollout_used, 40);
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 71, ab, 8, &na), LOOM_ERANGE);
        cr_assert_eq(m.serving_used, 30);
        loom_harvest_mem_fini(&m);
}

Test(mem, lease_expires_idle_prefix)
{
        loom_harvest_mem m = mk(1);
        loom_harvest_mem_step(&m, 0);
        uint32_t out[4];
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 7, 5), 0);
        loom_harvest_mem_rollout_idle(&m, 1 * LOOM_US_PER_S, 7, 1);
        cr_assert_eq(loom_harvest_mem_expire(&m, 11 * LOOM_US_PER_S - 1, out, 4), 0);
        cr_assert_eq(loom_harvest_mem_find(&m, 7)->state, LOOM_HARVEST_CACHED);
        /* the next turn reuses and grows the cached prefix */
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 2 * LOOM_US_PER_S, 7, 8), 0);
        cr_assert_eq(m.rollout_used, 8);
        loom_harvest_mem_rollout_idle(&m, 3 * LOOM_US_PER_S, 7, 1);
        cr_assert_eq(loom_harvest_mem_expire(&m, 13 * LOOM_US_PER_S, out, 4), 1);
        cr_assert_eq(out[0], 7);
        cr_assert_eq(m.rollout_used, 0);
        loom_harvest_mem_fini(&m);
}

Test(mem, static_split_never_moves)
{
        loom_harvest_mem m = mk(0);
        loom_harvest_mem_step(&m, 30);
        cr_assert_eq(m.budget, 50);
        size_t na;
        uint32_t ab[4];
        cr_assert_eq(loom_harvest_mem_rollout_take(&m, 0, 1, 50), 0);
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 50, ab, 4, &na), 0);
        cr_assert_eq(loom_harvest_mem_serving_take(&m, 1, ab, 4, &na), LOOM_ERANGE);
        cr_assert_eq(m.cuts, 0);
        cr_assert_eq(m.rollout_used, 50);
        loom_harvest_mem_fini(&m);
}

Test(mem, bad_config)
{
        loom_harvest_mem m;
        loom_err e;
        loom_harvest_mem_cfg c = {.pages = 10, .headroom_pages = 11, .watermark = 0.5};
        cr_assert_eq(loom_harvest_mem_init(&m, &c, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "headroom");
}

/* ---- dual-SLO admission -------------------------------------------------------------- */

Test(admit, ttft_worked_example)
{
        /* t_arr 0, B_TTFT 500 ms, now 200 ms, prefill estimate 150 ms: slack 150 ms */
        loom_us s = loom_harvest_slack_ttft(200 * MS, 0, 500 * MS, 150 * MS);
        cr_assert_eq(s, 150 * MS);
        loom_us in_force =
            loom_harvest_slack(LOOM_HARVEST_ADMIT_DUAL, LOOM_HARVEST_PREFILL, s, LOOM_HARVEST_INF);
        cr_assert_eq(in_force, 150 * MS);
        cr_assert(loom_harvest_admit(in_force, 100 * MS, 0, 0));
        cr_assert_not(loom_harvest_admit(in_force, 200 * MS, 0, 0));
}

Test(admit, tpot_and_colocated)
{
        /* last token at 1000 ms, B_TPOT 150 ms, now 1020 ms, decode step 30 ms: 100 ms */
        loom_us d = loom_harvest_slack_tpot(1020 * MS, 1000 * MS, 150 * MS, 30 * MS);
        cr_assert_eq(d, 100 * MS);
        loom_us p = 150 * MS;
        cr_assert_eq(loom_harvest_slack(LOOM_HARVEST_ADMIT_DUAL, LOOM_HARVEST_DECODE, p, d), d);
        cr_assert_eq(loom_harvest_slack(LOOM_HARVEST_ADMIT_DUAL, LOOM_HARVEST_COLOCATED, p, d), d);
        cr_assert_eq(
            loom_harvest_slack(LOOM_HARVEST_ADMIT_DUAL, LOOM_HARVEST_COLOCATED, 50 * MS, d),
            50 * MS);
        /* single-objective policies check nothing on the other instance kind */
        cr_assert_eq(loom_harvest_slack(LOOM_HARVEST_ADMIT_TTFT, LOOM_HARVEST_DECODE, p, d),
                     LOOM_HARVEST_INF);
        cr_assert_eq(loom_harvest_slack(LOOM_HARVEST_ADMIT_TPOT, LOOM_HARVEST_PREFILL, p, d),
                     LOOM_HARVEST_INF);
        cr_assert_eq(loom_harvest_slack(LOOM_HARVEST_ADMIT_TPOT, LOOM_HARVEST_DECODE, p, d), d);
        cr_assert_not(loom_harvest_checks(LOOM_HARVEST_ADMIT_NONE, LOOM_HARVEST_DECODE));
        cr_assert_not(loom_harvest_checks(LOOM_HARVEST_ADMIT_DUAL, LOOM_HARVEST_DEDICATED));
        /* memory headroom: a step that needs more pages than the budget has free waits */
        cr_assert_not(loom_harvest_admit(d, 10 * MS, 5, 4));
        cr_assert(loom_harvest_admit(d, 10 * MS, 4, 4));
}

Test(admit, stall_after_two_seconds)
{
        loom_us two = 2 * LOOM_US_PER_S;
        cr_assert_not(loom_harvest_stalled(2 * LOOM_US_PER_S - 1, 0, two));
        cr_assert(loom_harvest_stalled(2 * LOOM_US_PER_S, 0, two));
}

/* ---- latency models ------------------------------------------------------------------ */

Test(latency, shapes)
{
        loom_harvest_model a, b;
        loom_err e;
        cr_assert_eq(loom_harvest_model_preset("7b", &a, &e), 0);
        cr_assert_eq(loom_harvest_model_preset("32b", &b, &e), 0);
        cr_assert_eq(loom_harvest_model_preset("70b", &b, &e), LOOM_EINVAL);
        cr_assert_eq(loom_harvest_model_preset("32b", &b, &e), 0);
        /* prefill grows with prompt length, super-linearly with attention */
        loom_us p1 = loom_harvest_t_prefill(&a, 1000, 0), p8 = loom_harvest_t_prefill(&a, 8000, 0);
        cr_assert(p8 > 8 * (p1 - a.prf_overhead));
        cr_assert(loom_harvest_t_prefill(&a, 512, 8000) > loom_harvest_t_prefill(&a, 512, 0));
        /* decode: weights dominate a small batch; 7B bf16 on one H800 is several ms per step */
        loom_us d1 = loom_harvest_t_decode(&a, 1, 1000), d64 = loom_harvest_t_decode(&a, 64, 64000);
        cr_assert(d1 > 5 * MS && d1 < 20 * MS, "%lld", (long long)d1);
        cr_assert(d64 > d1 && d64 < 3 * d1);
        cr_assert(loom_harvest_t_decode(&b, 1, 1000) > d1);
        cr_assert_eq(loom_harvest_kv_pages(&a, 0), 0);
        cr_assert(loom_harvest_kv_pages(&a, 100000) > loom_harvest_kv_pages(&a, 1000));
}

/* ---- job setup ----------------------------------------------------------------------- */

Test(setup, lowest_kv_use_one_owner)
{
        loom_harvest_gpu g[5] = {
            {0, 0.50, -1}, {1, 0.10, -1}, {2, 0.30, -1}, {3, 0.10, 7}, {4, 0.05, -1},
        };
        uint32_t picked[3];
        loom_err e;
        int n = loom_harvest_setup(g, 5, 1, 8, 3, picked, &e);
        cr_assert_eq(n, 3);
        cr_assert_eq(picked[0], 4);
        cr_assert_eq(picked[1], 1); /* gpu 3 is as idle but owned by job 7 */
        cr_assert_eq(picked[2], 2);
        cr_assert_eq(g[4].owner, 1);
        /* a second job gets only what is left */
        n = loom_harvest_setup(g, 5, 2, 4, 4, picked, &e);
        cr_assert_eq(n, 1);
        cr_assert_eq(picked[0], 0);
        cr_assert_eq(loom_harvest_setup(g, 5, 2, 4, 1, picked, &e), LOOM_EEXIST);
        cr_assert_eq(loom_harvest_setup(g, 5, 3, 0, 1, picked, &e), LOOM_EINVAL);
        cr_assert_str_eq(e.field, "n_rl");
        loom_harvest_release(g, 5, 1);
        cr_assert_eq(g[4].owner, -1);
        cr_assert_eq(g[3].owner, 7);
}
