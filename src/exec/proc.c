/*
 * proc.c - child processes for the executors: spawn a worker (or an srun client) in its own
 * session, so that it outlives a kill -9 of loomd and can be stopped as a group; reap ended ones;
 * run a Slurm tool and read its output, with a deadline (a tool can hang without a controller).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec_int.h"

int exec_spawn(const char *const *argv, const char *cmd, const char *const *env,
               const char *out_path, pid_t *pid, loom_err *e)
{
        pid_t p = fork();
        if (p < 0)
                return loom_err_set(e, LOOM_EIO, "", "fork: %s", strerror(errno));
        if (p == 0) {
                setsid();
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                int fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
                int nul = open("/dev/null", O_RDONLY);
                if (fd >= 0) {
                        dup2(fd, 1);
                        dup2(fd, 2);
                }
                if (nul >= 0)
                        dup2(nul, 0);
                for (int i = 0; env && env[i]; i++)
                        putenv((char *)env[i]);
                if (argv)
                        execvp(argv[0], (char *const *)argv);
                else
                        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
                _exit(127);
        }
        *pid = p;
        return 0;
}

int exec_reap(exec_child *kids, int *n_kids, loom_exec_worker *out, int max)
{
        int n = 0;
        for (int i = 0; i < *n_kids;) {
                int st;
                if (waitpid(kids[i].pid, &st, WNOHANG) != kids[i].pid) {
                        i++;
                        continue;
                }
                if (n < max) {
                        loom_exec_worker *w = &out[n++];
                        *w = kids[i].w;
                        w->ended = true;
                        if (WIFEXITED(st)) {
                                w->exit_code = WEXITSTATUS(st);
                                snprintf(w->why, sizeof w->why, "exited with status %d",
                                         w->exit_code);
                        } else {
                                w->exit_code = 128 + WTERMSIG(st);
                                snprintf(w->why, sizeof w->why, "killed by signal %d",
                                         WTERMSIG(st));
                        }
                }
                kids[i] = kids[--*n_kids];
        }
        return n;
}

static double mono(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int exec_capture(const char *const *argv, char *buf, size_t cap, double timeout_s)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC))
                return -1;
        pid_t p = fork();
        if (p < 0) {
                close(fds[0]);
                close(fds[1]);
                return -1;
        }
        if (p == 0) {
                dup2(fds[1], 1);
                int nul = open("/dev/null", O_RDWR);
                if (nul >= 0) {
                        dup2(nul, 0);
                        dup2(nul, 2);
                }
                execvp(argv[0], (char *const *)argv);
                _exit(127);
        }
        close(fds[1]);
        size_t len = 0;
        double end = mono() + timeout_s;
        for (;;) {
                int left = (int)((end - mono()) * 1000);
                struct pollfd pf = {.fd = fds[0], .events = POLLIN};
                if (left <= 0 || poll(&pf, 1, left) <= 0) {
                        kill(p, SIGKILL);
                        break;
                }
                char tmp[4096];
                ssize_t r = read(fds[0], tmp, sizeof tmp);
                if (r <= 0)
                        break;
                size_t k = (size_t)r < cap - 1 - len ? (size_t)r : cap - 1 - len;
                memcpy(buf + len, tmp, k);
                len += k;
        }
        buf[len] = 0;
        close(fds[0]);
        int st;
        if (waitpid(p, &st, 0) != p || !WIFEXITED(st))
                return -1;
        return WEXITSTATUS(st);
}
