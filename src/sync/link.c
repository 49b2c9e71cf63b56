/*
 * link.c - the shaped slow link between the two clusters.
 *
 * Two network namespaces stand for the training and the rollout cluster; a veth pair joins
 * them, and a token-bucket filter on the training side's end limits what flows towards the
 * rollout cluster to the requested rate. Inside each namespace ranks talk over that namespace's
 * own loopback, which stands for the fast intra-cluster fabric.
 *
 * Everything is created with iproute2 (`ip`, `tc`), needs root, and is removed by
 * loom__link_down, which every exit path of the runner calls; deleting a namespace also removes
 * its end of the veth pair. Names carry the creating process id so that runs do not collide and
 * leftovers of a killed run can be recognised and removed by the next one.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

static const char *find_tool(const char *name, char *buf, size_t len)
{
        static const char *dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
                snprintf(buf, len, "%s/%s", dirs[i], name);
                if (!access(buf, X_OK))
                        return buf;
        }
        return NULL;
}

/* Run a command (argv[0] is looked up in the usual sbin/bin folders), quietly. */
static int run(char *const argv[])
{
        char path[64];
        if (!find_tool(argv[0], path, sizeof path))
                return -1;
        pid_t pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                int dn = open("/dev/null", O_WRONLY);
                if (dn >= 0) {
                        dup2(dn, 1);
                        dup2(dn, 2);
                }
                execv(path, argv);
                _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -1;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

#define RUN(...)                                                                                   \
        do {                                                                                       \
                char *const argv_[] = {__VA_ARGS__, NULL};                                         \
                if (run(argv_)) {                                                                  \
                        snprintf(step, sizeof step, "%s", #__VA_ARGS__);                           \
                        goto fail;                                                                 \
                }                                                                                  \
        } while (0)

int loom_sync_netns_available(char *why, size_t len)
{
        char path[64];
        if (geteuid() != 0) {
                snprintf(why, len, "not root: network namespaces need CAP_SYS_ADMIN");
                return 0;
        }
        if (!find_tool("ip", path, sizeof path) || !find_tool("tc", path, sizeof path)) {
                snprintf(why, len, "iproute2 (ip, tc) not found");
                return 0;
        }
        snprintf(why, len, "ok");
        return 1;
}

/* Remove namespaces left by runs whose process no longer exists. */
static void sweep_stale(void)
{
        DIR *d = opendir("/run/netns");
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                long pid;
                char side;
                if (sscanf(de->d_name, "lsync-%ld-%c", &pid, &side) != 2 || pid <= 0)
                        continue;
                if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
                        continue;
                char *const argv[] = {"ip", "netns", "del", de->d_name, NULL};
                run(argv);
        }
        closedir(d);
}

int loom__link_enter(int fd, loom_err *e)
{
        if (fd < 0)
                return 0;
        if (setns(fd, CLONE_NEWNET))
                return loom_err_set(e, LOOM_EIO, "netns", "setns: %s", strerror(errno));
        return 0;
}

static int open_ns(const char *name)
{
        char p[96];
        snprintf(p, sizeof p, "/run/netns/%s", name);
        return open(p, O_RDONLY | O_CLOEXEC);
}

int loom__link_up(loom__link *l, double gbps, loom_err *e)
{
        char step[200] = "", rate[32], burst[32];
        memset(l, 0, sizeof *l);
        l->fd_train = l->fd_roll = l->fd_orig = -1;
        char why[128];
        if (!loom_sync_netns_available(why, sizeof why))
                return loom_err_set(e, LOOM_ESTATE, "netns", "%s", why);
        sweep_stale();
        long pid = (long)getpid();
        snprintf(l->ns_train, sizeof l->ns_train, "lsync-%ld-t", pid);
        snprintf(l->ns_roll, sizeof l->ns_roll, "lsync-%ld-r", pid);
        snprintf(l->dev_train, sizeof l->dev_train, "lsy%ldt", pid % 10000000);
        snprintf(l->dev_roll, sizeof l->dev_roll, "lsy%ldr", pid % 10000000);
        l->netns = 1;
        RUN("ip", "netns", "add", l->ns_train);
        RUN("ip", "netns", "add", l->ns_roll);
        RUN("ip", "link", "add", l->dev_train, "type", "veth", "peer", "name", l->dev_roll);
        RUN("ip", "link", "set", l->dev_train, "netns", l->ns_train);
        RUN("ip", "link", "set", l->dev_roll, "netns", l->ns_roll);
        RUN("ip", "-n", l->ns_train, "addr", "add", LOOM__TRAIN_IP "/30", "dev", l->dev_train);
        RUN("ip", "-n", l->ns_roll, "addr", "add", LOOM__ROLL_IP "/30", "dev", l->dev_roll);
        RUN("ip", "-n", l->ns_train, "link", "set", "lo", "up");
        RUN("ip", "-n", l->ns_roll, "link", "set", "lo", "up");
        RUN("ip", "-n", l->ns_train, "link", "set", l->dev_train, "up");
        RUN("ip", "-n", l->ns_roll, "link", "set", l->dev_roll, "up");
        if (gbps > 0) {
                /* Token bucket towards the rollout cluster. The bucket holds ~4 ms of traffic
                 * (at least 256 KiB) so timer granularity does not cap the rate, and the
                 * queue ~20 ms so parallel streams keep it busy without deep bufferbloat. */
                double bps = gbps * 1e9;
                uint64_t b = (uint64_t)(bps / 8 * 0.004);
                if (b < 256 * 1024)
                        b = 256 * 1024;
                snprintf(rate, sizeof rate, "%.0fkbit", bps / 1000);
                snprintf(burst, sizeof burst, "%llu", (unsigned long long)b);
                RUN("tc", "-n", l->ns_train, "qdisc", "add", "dev", l->dev_train, "root", "tbf",
                    "rate", rate, "burst", burst, "latency", "20ms");
                snprintf(l->note, sizeof l->note,
                         "veth between namespaces %s and %s, tc tbf %.3g Gbit/s", l->ns_train,
                         l->ns_roll, gbps);
        } else {
                snprintf(l->note, sizeof l->note, "veth between namespaces %s and %s, unshaped",
                         l->ns_train, l->ns_roll);
        }
        l->fd_train = open_ns(l->ns_train);
        l->fd_roll = open_ns(l->ns_roll);
        l->fd_orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (l->fd_train < 0 || l->fd_roll < 0 || l->fd_orig < 0) {
                snprintf(step, sizeof step, "open namespace handles");
                goto fail;
        }
        return 0;
fail:
        loom__link_down(l);
        return loom_err_set(e, LOOM_EIO, "netns", "building the shaped link failed at: %s", step);
}

void loom__link_down(loom__link *l)
{
        if (l->fd_train >= 0)
                close(l->fd_train);
        if (l->fd_roll >= 0)
                close(l->fd_roll);
        if (l->fd_orig >= 0)
                close(l->fd_orig);
        l->fd_train = l->fd_roll = l->fd_orig = -1;
        if (!l->netns)
                return;
        char *const a[] = {"ip", "netns", "del", l->ns_train, NULL};
        char *const b[] = {"ip", "netns", "del", l->ns_roll, NULL};
        /* only present if setup stopped before moving the pair into the namespaces */
        char *const c[] = {"ip", "link", "del", l->dev_train, NULL};
        run(a);
        run(b);
        run(c);
        l->netns = 0;
}
