/*
 * install_client.c - a program outside the tree, built by tests/integration/install.sh against an
 * installed loom with `pkg-config --cflags --libs loom-client`: submits a one-iteration job to
 * the loomd at argv[1], runs its rollout and train phases, and prints the job's final JSON.
 * Exit status: 0 when every call succeeded, 1 otherwise (the failing call is printed).
 */
#include <stdio.h>

#include <loom/client.h>

static int fail(loom_client *c, const char *what, int rc)
{
        fprintf(stderr, "install_client: %s: %s (%d)\n", what, loom_client_error(c), rc);
        loom_client_free(c);
        return 1;
}

int main(int argc, char **argv)
{
        if (argc != 2) {
                fprintf(stderr, "usage: install_client URL\n");
                return 2;
        }
        loom_client *c = loom_client_new(argv[1], NULL);
        if (!c) {
                fprintf(stderr, "install_client: loom_client_new failed\n");
                return 1;
        }
        const char *spec = "{\"name\":\"installed-c\",\"rollout_gpus\":8,\"train_gpus\":8,"
                           "\"t_roll_s\":2,\"t_train_s\":1,\"slo\":1.5,\"iterations\":1}";
        uint32_t job;
        int rc = loom_client_submit(c, spec, NULL, &job, NULL);
        if (rc)
                return fail(c, "submit", rc);
        const char *phases[] = {"rollout", "train"};
        for (int i = 0; i < 2; i++) {
                loom_client_lease l;
                if ((rc = loom_client_acquire(c, job, phases[i], 30, &l)))
                        return fail(c, phases[i], rc);
                if ((rc = loom_client_progress(c, &l, 1, 1, NULL)) < 0)
                        return fail(c, "progress", rc);
                if ((rc = loom_client_release(c, &l, true, NULL)))
                        return fail(c, "release", rc);
        }
        char path[64], *reply = NULL;
        snprintf(path, sizeof path, "/v1/jobs/%u", job);
        if ((rc = loom_client_get(c, path, &reply)))
                return fail(c, "get", rc);
        printf("%s\n", reply);
        loom_client_free_string(reply);
        loom_client_free(c);
        return 0;
}
