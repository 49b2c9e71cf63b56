/*
 * report.c - the `loom sync` commands that compute and print: a model's layout, the plans'
 * streams and link volumes (or the shard map as JSON lines), the codec's speed table, and one
 * row of a transfer's result. The command line parses options and calls these; suite.c runs
 * the transfers. Errors go into loom_err with the option at fault as the field.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"

void loom_sync_opts_default(loom_sync_opts *o)
{
        *o = (loom_sync_opts){.model = "qwen2.5-0.5b",
                              .train = "tp=2,pp=1,dp=4",
                              .rollout = "tp=1,dp=8",
                              .plan = "all",
                              .link = "auto",
                              .gbps = 5,
                              .density = 0.01,
                              .bucket_mib = 64,
                              .timeout_s = 600,
                              .seed = 1,
                              .repeat = 1};
}

/* Name the option at fault when the callee named nothing. */
static int blame(loom_err *e, int rc, const char *what)
{
        if (!e->field[0])
                snprintf(e->field, sizeof e->field, "%s", what);
        return rc;
}

int loom__setup_build(const loom_sync_opts *o, loom__setup *s, loom_err *e)
{
        loom_sync_model m;
        int rc;
        memset(s, 0, sizeof *s);
        if ((rc = loom_sync_model_preset(o->model, &m, e)))
                return blame(e, rc, "--model");
        if (o->layers) {
                if (o->layers > m.layers)
                        return loom_err_set(e, LOOM_EINVAL, "--layers", "%s has only %u layers",
                                            o->model, m.layers);
                m.layers = o->layers;
                snprintf(m.name + strlen(m.name), sizeof m.name - strlen(m.name), "/%uL",
                         o->layers);
        }
        if ((rc = loom_sync_layout_new(&m, &s->layout, e)))
                return blame(e, rc, "--model");
        if ((rc = loom_sync_par_parse(o->train, 0, "--train", &s->train, e)) ||
            (rc = loom_sync_par_parse(o->rollout, 1, "--rollout", &s->roll, e)) ||
            (rc = loom_sync_par_check(s->layout, &s->train, "--train", e)) ||
            (rc = loom_sync_par_check(s->layout, &s->roll, "--rollout", e)))
                return blame(e, rc, "layout");
        if (loom_sync_par_ranks(&s->roll) > LOOM_SYNC_MAX_ROLLOUT)
                return loom_err_set(e, LOOM_EINVAL, "--rollout", "at most %d rollout ranks",
                                    LOOM_SYNC_MAX_ROLLOUT);
        if (!strcmp(o->plan, "all")) {
                s->nplans = 3;
                for (int k = 0; k < 3; k++)
                        s->plans[k] = (loom_sync_plan_kind)k;
        } else {
                if ((rc = loom_sync_plan_parse(o->plan, &s->plans[0], e)))
                        return blame(e, rc, "--plan");
                s->nplans = 1;
        }
        if ((rc = loom_sync_map_new(s->layout, &s->train, &s->roll, &s->map, e)))
                return blame(e, rc, "layout");
        return 0;
}

void loom__setup_free(loom__setup *s)
{
        loom_sync_map_free(s->map);
        loom_sync_layout_free(s->layout);
        memset(s, 0, sizeof *s);
}

static const char *split_name(loom_sync_split k)
{
        return k == LOOM_SYNC_COLUMN ? "column" : k == LOOM_SYNC_ROW ? "row" : "replicated";
}

int loom_sync_layout_print(const loom_sync_opts *o, FILE *out, loom_err *e)
{
        loom__setup s;
        int rc = loom__setup_build(o, &s, e);
        if (!rc) {
                const loom_sync_layout *l = s.layout;
                fprintf(out, "%s: %llu parameters, %.3f GB in bf16, %zu tensors\n", l->model.name,
                        (unsigned long long)l->elems, (double)l->elems * 2 / 1e9, l->ntensors);
                for (size_t i = 0; i < l->ntensors; i++) {
                        const loom_sync_tensor *t = &l->tensors[i];
                        fprintf(out, "  %-48s %8llu x %-6llu %-10s\n", t->name,
                                (unsigned long long)t->rows, (unsigned long long)t->cols,
                                split_name(t->split));
                }
        }
        loom__setup_free(&s);
        return rc;
}

/* The shard map itself, one JSON line per piece: which training rank sends which rows and
 * columns of which tensor, as byte ranges of the tensor, to which rollout TP ranks. */
static void print_pieces(const loom__setup *s, FILE *out)
{
        for (size_t i = 0; i < s->map->npieces; i++) {
                const loom_sync_piece *p = &s->map->pieces[i];
                const loom_sync_tensor *t = &s->layout->tensors[p->tensor];
                uint64_t w = p->rect.c1 - p->rect.c0;
                fprintf(out,
                        "{\"piece\":%zu,\"tensor\":\"%s\",\"rows\":[%llu,%llu],"
                        "\"cols\":[%llu,%llu],\"src\":%u,\"rollout_tp\":[%u,%u],\"bytes\":%llu,",
                        i, t->name, (unsigned long long)p->rect.r0, (unsigned long long)p->rect.r1,
                        (unsigned long long)p->rect.c0, (unsigned long long)p->rect.c1, p->src,
                        p->need0, p->need1,
                        (unsigned long long)(2 * loom_sync_rect_elems(&p->rect)));
                /* whole rows are one range; otherwise one range per row, every `stride` bytes */
                fprintf(
                    out,
                    "\"byte_ranges\":{\"first\":%llu,\"length\":%llu,\"count\":%llu,"
                    "\"stride\":%llu}}\n",
                    (unsigned long long)(2 * (p->rect.r0 * t->cols + p->rect.c0)),
                    (unsigned long long)(w == t->cols ? 2 * loom_sync_rect_elems(&p->rect) : 2 * w),
                    (unsigned long long)(w == t->cols ? 1 : p->rect.r1 - p->rect.r0),
                    (unsigned long long)(2 * t->cols));
        }
}

uint64_t loom__all_ranks(uint32_t n)
{
        return n >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << n) - 1;
}

uint64_t loom__bucket_bytes(const loom_sync_opts *o)
{
        return (uint64_t)(o->bucket_mib * (1 << 20)) & ~UINT64_C(1);
}

static int print_volumes(const loom__setup *s, uint64_t bucket, FILE *out, loom_err *e)
{
        double model = (double)s->layout->elems * 2;
        fprintf(out,
                "%s: %.3f GB; training tp=%u,pp=%u,dp=%u (%u ranks) -> rollout tp=%u,dp=%u "
                "(%u ranks); %zu pieces\n",
                s->layout->model.name, model / 1e9, s->train.tp, s->train.pp, s->train.dp,
                loom_sync_par_ranks(&s->train), s->roll.tp, s->roll.dp,
                loom_sync_par_ranks(&s->roll), s->map->npieces);
        for (int i = 0; i < s->nplans; i++) {
                loom_sync_plan *p;
                int rc = loom_sync_plan_new(s->map, s->plans[i], bucket,
                                            loom__all_ranks(loom_sync_par_ranks(&s->roll)), &p, e);
                if (rc)
                        return blame(e, rc, "--plan");
                uint64_t buckets = 0;
                for (size_t k = 0; k < p->nstreams; k++)
                        buckets += loom_sync_stream_buckets(p, &p->streams[k]);
                fprintf(out,
                        "  %-12s %4zu streams %6llu buckets  slow link %.3f GB (%.2f copies)  "
                        "fast links %.3f GB (dense)\n",
                        loom_sync_plan_name(p->kind), p->nstreams, (unsigned long long)buckets,
                        (double)p->slow_elems * 2 / 1e9, (double)p->slow_elems * 2 / model,
                        (double)p->fast_elems * 2 / 1e9);
                loom_sync_plan_free(p);
        }
        return 0;
}

int loom_sync_plan_print(const loom_sync_opts *o, FILE *out, loom_err *e)
{
        loom__setup s;
        int rc = loom__setup_build(o, &s, e);
        if (!rc && o->json)
                print_pieces(&s, out);
        else if (!rc)
                rc = print_volumes(&s, loom__bucket_bytes(o), out, e);
        loom__setup_free(&s);
        return rc;
}

void loom__result_json(const loom_sync_opts *o, const loom__setup *s, const loom_sync_result *r,
                       FILE *out)
{
        char train[64], roll[48];
        snprintf(train, sizeof train, "tp=%u,pp=%u,dp=%u", s->train.tp, s->train.pp, s->train.dp);
        snprintf(roll, sizeof roll, "tp=%u,dp=%u", s->roll.tp, s->roll.dp);
        json_t *j = json_pack(
            "{s:s, s:s, s:I, s:s, s:s, s:f, s:f, s:I, s:b, s:f, s:f, s:I, s:I, s:f, s:I, s:o,"
            " s:f, s:f, s:b, s:i, s:i, s:i, s:f, s:I, s:s, s:s, s:b}",
            "plan", loom_sync_plan_name(r->plan), "model", s->layout->model.name, "params",
            (json_int_t)s->layout->elems, "train", train, "rollout", roll, "density", o->density,
            "link_gbps", o->gbps, "repeat", (json_int_t)o->repeat, "shaped", r->shaped, "wall_s",
            r->wall_s, "slow_s", r->slow_s, "model_bytes", (json_int_t)r->model_bytes,
            "slow_link_bytes", (json_int_t)r->slow_link_bytes, "slow_link_copies",
            r->slow_link_copies, "fast_link_bytes", (json_int_t)r->fast_link_bytes,
            "goodput_fraction",
            r->goodput_fraction >= 0 ? json_real(r->goodput_fraction) : json_null(), "encode_gbps",
            r->encode_gbps, "decode_gbps", r->decode_gbps, "verified", r->verified, "ranks_ok",
            (int)r->ranks_ok, "ranks_failed", (int)r->ranks_failed, "ranks_intact",
            (int)r->ranks_intact, "catchup_s", r->catchup_s, "catchup_bytes",
            (json_int_t)r->catchup_bytes, "link", r->link_note, "failure", r->failure, "keyed",
            r->keyed);
        char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
        fprintf(out, "%s\n", text ? text : "{}");
        free(text);
        json_decref(j);
        fflush(out);
}

void loom__result_text(const loom_sync_result *r, FILE *out)
{
        char gp[16];
        if (r->goodput_fraction >= 0)
                snprintf(gp, sizeof gp, "%.3f", r->goodput_fraction);
        else
                snprintf(gp, sizeof gp, "n/a");
        fprintf(out, "%-12s %8.3f %8.3f %7.3f %9.3f %8s %9.2f %9.2f  %s\n",
                loom_sync_plan_name(r->plan), r->wall_s, (double)r->slow_link_bytes / 1e9,
                r->slow_link_copies, (double)r->fast_link_bytes / 1e9, gp, r->encode_gbps,
                r->decode_gbps, r->verified ? "yes" : "NO");
        if (r->catchup_s > 0)
                fprintf(out,
                        "%-12s late joiners caught up in %.3f s (%.3f GB from peers' relays)\n", "",
                        r->catchup_s, (double)r->catchup_bytes / 1e9);
        if (r->failure[0])
                fprintf(out, "%-12s failure: %s\n", "", r->failure);
        fflush(out);
}

static void print_codec_row(const loom_sync_codec_row *r, int json, FILE *out)
{
        static const char *names[] = {"dense", "coo", "bitmap", "auto"};
        int autoenc = r->enc == LOOM_SYNC_ENC_AUTO;
        if (json)
                fprintf(out,
                        "{\"density\":%g,\"encoding\":\"%s\",\"chosen\":\"%s\","
                        "\"size_fraction\":%.6f,\"encode_gbps\":%.3f,"
                        "\"decode_gbps\":%.3f,\"round_trip\":%s,\"tag_encode_frac\":%.4f,"
                        "\"tag_decode_frac\":%.4f,\"hmac_encode_frac\":%.4f}\n",
                        r->density, names[r->enc], names[r->chosen], r->size_fraction,
                        r->encode_gbps, r->decode_gbps, r->round_trip ? "true" : "false",
                        r->tag_encode_frac, r->tag_decode_frac, r->hmac_encode_frac);
        else
                fprintf(out, "%-8g %-7s %10.3f %9.2f %9.2f %6.1f%% %6.1f%% %6.1f%%%s\n", r->density,
                        names[autoenc ? r->chosen : r->enc], 100 * r->size_fraction, r->encode_gbps,
                        r->decode_gbps, 100 * r->tag_encode_frac, 100 * r->tag_decode_frac,
                        100 * r->hmac_encode_frac, autoenc ? "  <- auto" : "");
}

int loom_sync_codec_print(const loom_sync_opts *o, FILE *out, loom_err *e)
{
        size_t n = (size_t)(o->bucket_mib * (1 << 20)) / 2;
        loom_sync_codec_row rows[LOOM_SYNC_CODEC_DENSITIES * (LOOM_SYNC_ENC_AUTO + 1)];
        int rc = loom_sync_codec_bench(o->seed, n, rows, e);
        if (rc)
                return blame(e, rc, "--bucket-mib");
        if (!o->json)
                fprintf(out,
                        "bucket %zu elements (%.1f MiB); GB/s are dense bytes per CPU-second;\n"
                        "tag_%%: UMAC-64 of the frame (keyed pulls) / encode, / decode time;\n"
                        "hmac_%%: HMAC-SHA-256 of the same bytes / encode time\n"
                        "%-8s %-7s %10s %9s %9s %7s %7s %7s\n",
                        n, (double)n * 2 / (1 << 20), "density", "enc", "size_%", "enc_GB/s",
                        "dec_GB/s", "tag_enc", "tag_dec", "hmac");
        int ok = 1;
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
                print_codec_row(&rows[i], o->json, out);
                ok &= rows[i].round_trip;
        }
        return ok ? 0 : loom_err_set(e, LOOM_ECORRUPT, "", "round trip failed");
}
