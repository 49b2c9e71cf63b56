/*
 * sync.c - `loom sync`: the weight transfer engine from the command line.
 *
 *   loom sync layout --model M             tensors of a model and how TP splits them
 *   loom sync plan   [model/layout options] streams and link volumes of each plan (no processes)
 *   loom sync bench  [model/layout options] a real multi-process transfer, per plan
 *   loom sync bench --device cuda|host     publish + pull from and into GPU (or host) memory
 *   loom sync codec  [--bucket-mib N]       encode/decode speed and size by density
 *
 * The bench's transfers are keyed (the job's sync key, else a fresh one per run); --unkeyed,
 * for measuring what the tags cost, runs on loopback only.
 *
 * Exit status: 0 ok, 1 invalid input or a transfer that failed verification, 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "loom/sync.h"

static void usage(FILE *f)
{
        fprintf(f,
                "usage: loom sync <layout|plan|bench> [options]\n"
                "\n"
                "  layout   list the tensors of a model and how tensor parallelism splits them\n"
                "  plan     streams and slow/fast link volumes of each plan, computed only;\n"
                "           with --json the shard map: one line per piece with its byte ranges\n"
                "  bench    run a real multi-process transfer of one synthetic training step\n"
                "  codec    single-core speed and size of each bucket encoding by density\n"
                "           (takes --bucket-mib, --seed, --json)\n"
                "\n"
                "options (plan, bench; layout takes --model and --layers):\n"
                "  --model NAME        qwen2.5-0.5b (default), qwen2.5-1.5b, qwen2.5-7b, "
                "qwen2.5-14b,\n"
                "                      qwen2.5-32b, tiny\n"
                "  --layers N          keep only the first N transformer layers of the preset\n"
                "  --train tp=A,pp=B,dp=C    training layout (default tp=2,pp=1,dp=4)\n"
                "  --rollout tp=A,dp=B       rollout layout (default tp=1,dp=8)\n"
                "  --plan P            flat, topo, topo+sparse or all (default all)\n"
                "  --link-gbps G       rate of the shaped slow link (default 5; 0 = unshaped)\n"
                "  --density D         fraction of elements the step changes (default 0.01)\n"
                "  --bucket-mib N      bucket size (default 64)\n"
                "  --seed N            synthetic weights seed (default 1)\n"
                "  --link L            auto (default): namespaces + veth + tc when root and\n"
                "                      iproute2 allow, else loopback; netns; loopback\n"
                "  --late N            N rollout ranks join after the step and catch up\n"
                "  --repeat N          run each plan N times, report the fastest (default 1)\n"
                "  --timeout S         give up after S seconds per plan (default 600)\n"
                "  --max-mem-gb G      refuse runs estimated above G GB (default: 85%% of\n"
                "                      available memory)\n"
                "  --corrupt wire|content  fault injection on one bucket: a byte flipped after\n"
                "                      its checksum, or a wrong value in a well-formed frame\n"
                "  --key-file PATH     the job's sync key (64 hex digits; the file must not be\n"
                "                      group- or world-readable), else $LOOM_SYNC_KEY, else a\n"
                "                      fresh random key for this run: frames between ranks\n"
                "                      carry UMAC-64 tags\n"
                "  --unkeyed           frames between ranks are not authenticated (to measure\n"
                "                      what the tags cost); only with --link loopback\n"
                "  --rollout-key-file PATH  the rollout ranks' key, when it is not the job's\n"
                "                      (fault injection: they must refuse every frame)\n"
                "  --device cuda|host  bench: instead of the multi-process transfer, one process\n"
                "                      publishes the model and pulls it over loopback, from and\n"
                "                      into GPU memory (cuda) or host memory (host), and prints\n"
                "                      each stage's time (D2H, encode, send+recv, decode, H2D);\n"
                "                      takes --model, --layers, --density, --bucket-mib, --seed\n"
                "  --json              one JSON object per plan\n");
}

static int whole(const char *name, const char *v, double lo, double hi, uint32_t *out)
{
        double d;
        if (loom_cmd_num("loom sync", name, v, lo, hi, &d) || d != (long)d)
                return 1;
        *out = (uint32_t)d;
        return 0;
}

/* Returns 0 ok, 1 invalid value, 2 bad usage, 3 help shown. */
/* Paths of the key files; read once the options are known to be good. */
typedef struct key_files {
        const char *key, *rollout;
        int unkeyed; /* --unkeyed */
} key_files;

static int parse(int argc, char **argv, loom_sync_opts *o, key_files *kf)
{
        loom_sync_opts_default(o);
        for (int i = 2; i < argc; i++) {
                const char *a = argv[i], *v = NULL;
                if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
                        usage(stdout);
                        return 3;
                }
                if (!strcmp(a, "--json")) {
                        o->json = 1;
                        continue;
                }
                if (!strcmp(a, "--unkeyed")) {
                        kf->unkeyed = 1;
                        continue;
                }
                char key[32];
                const char *eq = strchr(a, '=');
                if (eq && (size_t)(eq - a) < sizeof key) {
                        snprintf(key, sizeof key, "%.*s", (int)(eq - a), a);
                        v = eq + 1;
                } else {
                        snprintf(key, sizeof key, "%s", a);
                        if (i + 1 < argc)
                                v = argv[++i];
                }
                if (strncmp(key, "--", 2)) {
                        fprintf(stderr, "loom sync: unexpected argument '%s'\n", a);
                        return 2;
                }
                if (!v) {
                        fprintf(stderr, "loom sync: %s needs a value\n", key);
                        return 2;
                }
                double d;
                if (!strcmp(key, "--model"))
                        o->model = v;
                else if (!strcmp(key, "--train"))
                        o->train = v;
                else if (!strcmp(key, "--rollout"))
                        o->rollout = v;
                else if (!strcmp(key, "--plan"))
                        o->plan = v;
                else if (!strcmp(key, "--device"))
                        o->device = v;
                else if (!strcmp(key, "--link"))
                        o->link = v;
                else if (!strcmp(key, "--key-file"))
                        kf->key = v;
                else if (!strcmp(key, "--rollout-key-file"))
                        kf->rollout = v;
                else if (!strcmp(key, "--corrupt")) {
                        if (strcmp(v, "wire") && strcmp(v, "content")) {
                                fprintf(stderr,
                                        "loom sync: --corrupt: '%s' is not wire or content\n", v);
                                return 1;
                        }
                        o->corrupt = strcmp(v, "wire") ? 2 : 1;
                } else if (!strcmp(key, "--layers")) {
                        if (whole(key, v, 1, 1000, &o->layers))
                                return 1;
                } else if (!strcmp(key, "--link-gbps")) {
                        if (loom_cmd_num("loom sync", key, v, 0, 1000, &o->gbps))
                                return 1;
                } else if (!strcmp(key, "--density")) {
                        if (loom_cmd_num("loom sync", key, v, 0, 1, &o->density))
                                return 1;
                } else if (!strcmp(key, "--bucket-mib")) {
                        if (loom_cmd_num("loom sync", key, v, 1.0 / (1 << 20), 2048,
                                         &o->bucket_mib))
                                return 1;
                } else if (!strcmp(key, "--timeout")) {
                        if (loom_cmd_num("loom sync", key, v, 1, 86400, &o->timeout_s))
                                return 1;
                } else if (!strcmp(key, "--max-mem-gb")) {
                        if (loom_cmd_num("loom sync", key, v, 0.001, 1e6, &o->max_mem_gb))
                                return 1;
                } else if (!strcmp(key, "--seed")) {
                        if (loom_cmd_num("loom sync", key, v, 0, 9e15, &d) ||
                            d != (double)(unsigned long long)d)
                                return 1;
                        o->seed = (unsigned long long)d;
                } else if (!strcmp(key, "--repeat")) {
                        if (whole(key, v, 1, 100, &o->repeat))
                                return 1;
                } else if (!strcmp(key, "--late")) {
                        if (whole(key, v, 0, 63, &o->late))
                                return 1;
                } else {
                        fprintf(stderr, "loom sync: unknown option %s\n", key);
                        return 2;
                }
        }
        if (strcmp(o->link, "auto") && strcmp(o->link, "netns") && strcmp(o->link, "loopback")) {
                fprintf(stderr, "loom sync: --link: '%s' is not auto, netns or loopback\n",
                        o->link);
                return 1;
        }
        if (kf->unkeyed && (kf->key || kf->rollout)) {
                fprintf(stderr,
                        "loom sync: --unkeyed: not with --key-file or --rollout-key-file\n");
                return 2;
        }
        if (kf->unkeyed && strcmp(o->link, "loopback")) {
                fprintf(stderr,
                        "loom sync: --unkeyed: frames between ranks may go unauthenticated on "
                        "loopback only; add --link loopback (--link %s may build a network "
                        "link)\n",
                        o->link);
                return 1;
        }
        return 0;
}

static int fail(const loom_err *e)
{
        fprintf(stderr, "loom sync: %s%s%s\n", e->field, e->field[0] ? ": " : "", e->msg);
        return 1;
}

/* The bench's keys: --key-file, else $LOOM_SYNC_KEY (as loomd starts a job's workers), else a
 * fresh key for this run: the bench starts every rank itself, so a key nobody else holds
 * authenticates its frames as well as the job's would. Only --unkeyed (loopback) runs without. */
static int load_keys(const key_files *kf, loom_sync_opts *o, uint8_t key[LOOM_SYNC_KEY_LEN],
                     uint8_t rkey[LOOM_SYNC_KEY_LEN], loom_err *e)
{
        const char *env = getenv("LOOM_SYNC_KEY");
        int rc = 0;
        if (kf->unkeyed) {
                fprintf(stderr, "loom sync: --unkeyed: frames between ranks are not "
                                "authenticated\n");
                return 0;
        }
        if (kf->key)
                rc = loom_sync_key_load(kf->key, "--key-file", key, e);
        else if (env && *env)
                rc = loom_sync_key_parse(env, "LOOM_SYNC_KEY", key, e);
        else
                rc = loom_sync_key_new(key, e);
        if (!rc)
                o->key = key;
        if (!rc && kf->rollout &&
            !(rc = loom_sync_key_load(kf->rollout, "--rollout-key-file", rkey, e)))
                o->rollout_key = rkey;
        return rc;
}

int loom_cmd_sync(int argc, char **argv)
{
        if (argc < 2) {
                usage(stderr);
                return 2;
        }
        const char *sub = argv[1];
        if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
                usage(stdout);
                return 0;
        }
        if (strcmp(sub, "layout") && strcmp(sub, "plan") && strcmp(sub, "bench") &&
            strcmp(sub, "codec")) {
                fprintf(stderr, "loom sync: unknown subcommand '%s'\n", sub);
                usage(stderr);
                return 2;
        }
        loom_sync_opts o;
        key_files kf = {0};
        int rc = parse(argc, argv, &o, &kf);
        if (rc == 3)
                return 0;
        if (rc)
                return rc;
        loom_err e = {0};
        int verified = 1;
        uint8_t key[LOOM_SYNC_KEY_LEN], rkey[LOOM_SYNC_KEY_LEN];
        if (!strcmp(sub, "bench") && load_keys(&kf, &o, key, rkey, &e))
                return fail(&e);
        if (!strcmp(sub, "layout"))
                rc = loom_sync_layout_print(&o, stdout, &e);
        else if (!strcmp(sub, "plan"))
                rc = loom_sync_plan_print(&o, stdout, &e);
        else if (!strcmp(sub, "codec"))
                rc = loom_sync_codec_print(&o, stdout, &e);
        else if (o.device)
                rc = loom_sync_device_bench_print(&o, o.device, stdout, &e);
        else
                rc = loom_sync_bench_print(&o, stdout, stderr, &verified, &e);
        return rc ? fail(&e) : !verified;
}
