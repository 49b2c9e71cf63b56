/*
 * test_sync_run.c - real multi-process transfers of a small model over loopback TCP: every plan
 * delivers bit-identical weights (checked per bucket, per tensor, and against the generator),
 * topo sends one copy across the slow link, late joiners catch up from their peers' relays, and
 * a bucket corrupted on the wire or in content is rejected while every rank keeps serving
 * intact weights.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "loom/sync.h"

static loom_sync_layout *tiny(void)
{
        loom_sync_model m;
        loom_sync_layout *l;
        loom_err e;
        cr_assert_eq(loom_sync_model_preset("tiny", &m, &e), 0);
        cr_assert_eq(loom_sync_layout_new(&m, &l, &e), 0, "%s", e.msg);
        return l;
}

static loom_sync_run_cfg base(const loom_sync_layout *l, loom_sync_plan_kind plan)
{
        return (loom_sync_run_cfg){.layout = l,
                                   .train = {2, 2, 2},
                                   .roll = {2, 1, 3},
                                   .plan = plan,
                                   .bucket_bytes = 4096, /* many buckets, a partial last one */
                                   .density = 0.05,
                                   .seed = 7,
                                   .timeout_s = 120};
}

static void run_ok(const loom_sync_run_cfg *cfg, loom_sync_result *r)
{
        loom_err e = {0};
        cr_assert_eq(loom_sync_run(cfg, r, &e), 0, "%s", e.msg);
        cr_assert(r->verified, "%s: %s", loom_sync_plan_name(cfg->plan), r->failure);
        uint32_t nr = loom_sync_par_ranks(&cfg->roll);
        cr_assert_eq(r->ranks_ok, nr);
        cr_assert_eq(r->ranks_failed, 0);
        cr_assert_eq(r->ranks_intact, nr);
}

Test(sync_run, every_plan_delivers_identical_weights)
{
        loom_sync_layout *l = tiny();
        uint64_t model = 2 * l->elems;
        loom_sync_result r[3];
        for (int k = 0; k < 3; k++) {
                loom_sync_run_cfg cfg = base(l, (loom_sync_plan_kind)k);
                run_ok(&cfg, &r[k]);
                cr_expect_eq(r[k].model_bytes, model);
                cr_expect_lt(r[k].goodput_fraction, 0, "unshaped runs report no goodput");
        }
        /* flat: every rollout rank pulls its half (plus replicated norms) itself: 3 copies */
        cr_expect_gt(r[0].slow_link_copies, 3.0);
        cr_expect_lt(r[0].slow_link_copies, 3.2);
        cr_expect_eq(r[0].fast_link_bytes, 0);
        /* topo: one copy plus frame headers and manifests */
        cr_expect_geq(r[1].slow_link_bytes, model);
        cr_expect_lt(r[1].slow_link_copies, 1.1);
        cr_expect_gt(r[1].fast_link_bytes, model); /* two peers per landing rank */
        /* topo+sparse: a 5% delta is a small fraction of a copy, and fast links shrink too */
        cr_expect_lt(r[2].slow_link_copies, 0.3);
        cr_expect_lt(r[2].fast_link_bytes, r[1].fast_link_bytes / 3);
        loom_sync_layout_free(l);
}

Test(sync_run, layouts_with_replicated_kv_heads_and_pipeline_stages)
{
        loom_sync_layout *l = tiny();
        /* tiny has 4 KV heads: rollout tp=8 keeps each on two ranks */
        loom_sync_run_cfg cfg = base(l, LOOM_SYNC_TOPO_SPARSE);
        cfg.train = (loom_sync_par){1, 4, 2};
        cfg.roll = (loom_sync_par){8, 1, 1};
        loom_sync_result r;
        run_ok(&cfg, &r);
        cfg.plan = LOOM_SYNC_FLAT;
        run_ok(&cfg, &r);
        loom_sync_layout_free(l);
}

Test(sync_run, extreme_densities)
{
        loom_sync_layout *l = tiny();
        loom_sync_result r;
        loom_sync_run_cfg cfg = base(l, LOOM_SYNC_TOPO_SPARSE);
        cfg.density = 0; /* nothing changed: only headers and manifests move */
        run_ok(&cfg, &r);
        cr_expect_lt(r.slow_link_copies, 0.1);
        cfg.density = 1; /* everything changed: buckets fall back to dense */
        run_ok(&cfg, &r);
        cr_expect_gt(r.slow_link_copies, 0.99);
        cr_expect_lt(r.slow_link_copies, 1.1);
        loom_sync_layout_free(l);
}

Test(sync_run, late_joiners_catch_up_from_relays)
{
        loom_sync_layout *l = tiny();
        loom_sync_result r;
        loom_sync_run_cfg cfg = base(l, LOOM_SYNC_TOPO_SPARSE);
        cfg.late = 2; /* ranks 4 and 5 (tp 0 and 1 of the third replica) */
        run_ok(&cfg, &r);
        cr_expect_gt(r.catchup_s, 0);
        /* each late rank pulls its whole half of the model, dense, from a peer */
        cr_expect_geq(r.catchup_bytes, l->elems * 2);
        loom_sync_layout_free(l);
}

Test(sync_run, corrupted_bucket_is_rejected_and_old_weights_kept)
{
        loom_sync_layout *l = tiny();
        loom_sync_result r;
        loom_err e = {0};
        /* mode 1: a payload byte flipped on the wire (the bucket CRC catches it); mode 2: a
         * well-formed bucket with a wrong value (only the per-tensor checksum can; for sparse
         * deltas this runs the in-place apply and its undo) */
        for (int mode = 1; mode <= 2; mode++) {
                for (int k = 0; k < 3; k++) {
                        loom_sync_run_cfg cfg = base(l, (loom_sync_plan_kind)k);
                        cfg.corrupt = mode;
                        cr_assert_eq(loom_sync_run(&cfg, &r, &e), 0, "%s", e.msg);
                        cr_expect_not(r.verified);
                        cr_expect_geq(r.ranks_failed, 1, "%s", loom_sync_plan_name(cfg.plan));
                        /* failed ranks still serve the old version bit for bit, the others the
                         * new one */
                        cr_expect_eq(r.ranks_intact, 6, "mode %d %s: %s", mode,
                                     loom_sync_plan_name(cfg.plan), r.failure);
                        cr_expect(strstr(r.failure, mode == 1 ? "payload checksum"
                                                              : "does not match the senders'"),
                                  "mode %d: %s", mode, r.failure);
                }
        }
        loom_sync_layout_free(l);
}

Test(sync_run, bad_configuration_is_refused)
{
        loom_sync_layout *l = tiny();
        loom_sync_result r;
        loom_err e = {0};
        loom_sync_run_cfg cfg = base(l, LOOM_SYNC_TOPO);
        cfg.density = 1.5;
        cr_expect_eq(loom_sync_run(&cfg, &r, &e), LOOM_EINVAL);
        cr_expect_str_eq(e.field, "density");
        cfg = base(l, LOOM_SYNC_TOPO);
        cfg.late = 6;
        cr_expect_eq(loom_sync_run(&cfg, &r, &e), LOOM_EINVAL);
        cr_expect_str_eq(e.field, "late");
        cfg = base(l, LOOM_SYNC_TOPO);
        cfg.late = 3; /* tp rank 1 of every replica absent: nobody to land its pieces on */
        cfg.roll = (loom_sync_par){2, 1, 2};
        cr_expect_neq(loom_sync_run(&cfg, &r, &e), 0);
        cfg = base(l, LOOM_SYNC_TOPO);
        cfg.train.tp = 3; /* does not divide 8 heads */
        cr_expect_eq(loom_sync_run(&cfg, &r, &e), LOOM_EINVAL);
        loom_sync_layout_free(l);
}
