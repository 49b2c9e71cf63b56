/*
 * options.c - loomd's configuration from its command line and files: one option at a time into
 * a loom_server_cfg, the cluster/policy file, the port file and the line loomd logs once it
 * serves. Every failure comes back through loom_err with the sentence loomd prints after
 * "loomd: ", so the program only parses argv and prints.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loom/spec.h"
#include "srv.h"

static int bad(loom_err *e, const char *name, const char *fmt, const char *v)
{
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", name);
        return loom_err_set(e, LOOM_EINVAL, opt, fmt, v);
}

static int seconds(const char *name, const char *v, double *out, loom_err *e)
{
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= 0))
                return bad(e, name, "'%s' is not a number of seconds", v);
        *out = x;
        return 0;
}

static int count(const char *name, const char *v, long max, int *out, loom_err *e)
{
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 0 || n > max)
                return bad(e, name, "'%s' is not a count", v);
        *out = (int)n;
        return 0;
}

/* "HOST:PORT" or "[IPv6]:PORT"; HOST an IPv4 or IPv6 address or a name (resolved when loomd
 * binds, srv_listen_open). An IPv6 address keeps no brackets in listen_host. */
int loom_server_cfg_listen(loom_server_cfg *c, const char *v, loom_err *e)
{
        const char *host = v, *colon = strrchr(v, ':');
        size_t n = colon ? (size_t)(colon - v) : 0;
        if (*v == '[') { /* [IPv6]:PORT */
                const char *close = strchr(v, ']');
                host = v + 1;
                n = close ? (size_t)(close - host) : 0;
                if (!close || close[1] != ':')
                        colon = NULL;
        } else if (colon && memchr(v, ':', n)) {
                return bad(e, "listen", "'%s': write an IPv6 address in brackets, [ADDR]:PORT", v);
        }
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || n == 0 || n >= sizeof c->listen_host || end == colon + 1 || *end ||
            port < 0 || port > 65535)
                return bad(e, "listen", "expected HOST:PORT or [IPv6]:PORT, got '%s'", v);
        snprintf(c->listen_host, sizeof c->listen_host, "%.*s", (int)n, host);
        c->port = (int)port;
        return 0;
}

/* host:port, or [host]:port for an IPv6 address, into buf. */
static const char *host_port(const char *host, int port, char *buf, size_t len)
{
        bool v6 = strchr(host, ':') != NULL;
        snprintf(buf, len, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
        return buf;
}

static int resolve(const char *host, int port, struct addrinfo **out, loom_err *e)
{
        char svc[16], where[96];
        snprintf(svc, sizeof svc, "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        int rc = getaddrinfo(host, svc, &hints, out);
        if (rc)
                return loom_err_set(e, LOOM_EINVAL, "listen", "cannot resolve %s: %s",
                                    host_port(host, port, where, sizeof where),
                                    rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return 0;
}

static bool is_loopback(const struct sockaddr *a)
{
        if (a->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
        if (a->sa_family != AF_INET6)
                return false;
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

int srv_listen_loopback(const char *host, int port, bool *loopback, loom_err *e)
{
        struct addrinfo *ai = NULL;
        int rc = resolve(host, port, &ai, e);
        if (rc)
                return rc;
        *loopback = true; /* a name is loopback only if every address it resolves to is */
        for (struct addrinfo *p = ai; p; p = p->ai_next)
                *loopback = *loopback && is_loopback(p->ai_addr);
        freeaddrinfo(ai);
        return 0;
}

int srv_listen_open(const char *host, int port, int *fd, int *bound, loom_err *e)
{
        struct addrinfo *ai = NULL;
        int rc = resolve(host, port, &ai, e);
        if (rc)
                return rc;
        char where[96];
        int err = 0;
        *fd = -1;
        for (struct addrinfo *p = ai; p && *fd < 0; p = p->ai_next) { /* the first that binds */
                int s = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
                int one = 1;
                struct sockaddr_storage a;
                socklen_t alen = sizeof a;
                if (s >= 0 && !setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) &&
                    !bind(s, p->ai_addr, p->ai_addrlen) && !listen(s, 1024) &&
                    !getsockname(s, (struct sockaddr *)&a, &alen)) {
                        *fd = s;
                        *bound = ntohs(a.ss_family == AF_INET6
                                           ? ((struct sockaddr_in6 *)&a)->sin6_port
                                           : ((struct sockaddr_in *)&a)->sin_port);
                } else {
                        err = errno;
                        if (s >= 0)
                                close(s);
                }
        }
        freeaddrinfo(ai);
        if (*fd < 0)
                return loom_err_set(e, LOOM_EIO, "listen", "%s: %s",
                                    host_port(host, port, where, sizeof where), strerror(err));
        return 0;
}

static int set_auth(loom_server_cfg *c, loom_server_auth a, loom_err *e)
{
        if (c->auth != LOOM_AUTH_AUTO)
                return loom_err_set(e, LOOM_EINVAL, "",
                                    "--require-auth and --insecure-loopback exclude each other");
        c->auth = a;
        return 0;
}

int loom_server_cfg_option(loom_server_cfg *c, const char *name, const char *v, loom_err *e)
{
        loom_err_clear(e);
        if (!strcmp(name, "data-dir"))
                c->data_dir = v;
        else if (!strcmp(name, "listen"))
                return loom_server_cfg_listen(c, v, e);
        else if (!strcmp(name, "lease-timeout"))
                return seconds(name, v, &c->lease_timeout_s, e);
        else if (!strcmp(name, "idle-timeout"))
                return seconds(name, v, &c->idle_timeout_s, e);
        else if (!strcmp(name, "request-timeout"))
                return seconds(name, v, &c->request_timeout_s, e);
        else if (!strcmp(name, "max-conns")) {
                int n = 0, rc = count(name, v, 1000000, &n, e);
                if (!rc && n < 1)
                        return bad(e, name, "'%s': at least one connection", v);
                if (!rc)
                        c->max_conns = n;
                return rc;
        } else if (!strcmp(name, "max-conns-per-addr"))
                return count(name, v, 1000000, &c->max_conns_per_addr, e);
        else if (!strcmp(name, "max-wait"))
                return seconds(name, v, &c->max_wait_s, e);
        else if (!strcmp(name, "drift-window"))
                return count(name, v, 1000000, &c->drift_window, e);
        else if (!strcmp(name, "compact-min"))
                return count(name, v, INT32_MAX, &c->compact_min, e);
        else if (!strcmp(name, "drift-threshold")) {
                char *end;
                errno = 0;
                double x = strtod(v, &end);
                if (errno || end == v || *end)
                        return bad(e, name, "'%s' is not a number", v);
                c->drift_threshold = x;
        } else if (!strcmp(name, "sync-full"))
                c->sync_full = true;
        else if (!strcmp(name, "tls-cert"))
                c->tls_cert = v;
        else if (!strcmp(name, "tls-key"))
                c->tls_key = v;
        else if (!strcmp(name, "require-auth"))
                return set_auth(c, LOOM_AUTH_TOKENS, e);
        else if (!strcmp(name, "insecure-loopback"))
                return set_auth(c, LOOM_AUTH_NONE, e);
        else if (!strcmp(name, "public-metrics"))
                c->public_metrics = true;
        else
                return loom_err_set(e, LOOM_ENOENT, "", "unknown option --%s", name);
        return 0;
}

/* The decoder's error as "PATH[:LINE:COL]: [FIELD: ]MESSAGE" in e->msg (its sentences usually
 * name the field already). */
static int file_error(const char *path, int rc, loom_err *e)
{
        loom_err in = *e;
        bool named = !in.field[0] || strstr(in.msg, in.field);
        char where[64] = "";
        if (in.line > 0)
                snprintf(where, sizeof where, ":%d:%d", in.line, in.col);
        loom_err_set(e, rc, "", "%s%s: %s%s%s", path, where, named ? "" : in.field,
                     named ? "" : ": ", in.msg);
        e->line = in.line;
        e->col = in.col;
        return rc;
}

int loom_server_cfg_load(loom_server_cfg *c, const char *path, loom_err *e)
{
        loom_err_clear(e);
        char *text = NULL;
        size_t len = 0;
        int rc = loom_spec_read_file(path, &text, &len, e);
        if (rc)
                return rc;
        json_t *root = loom_json_parse(text, len, e);
        rc = root ? 0 : LOOM_EINVAL;
        if (root && !json_is_object(root))
                rc = loom_err_set(e, LOOM_EINVAL, "", "must be a JSON object");
        loom_cluster_cfg cluster = c->cluster; /* decoded over what c has, kept only if valid */
        loom_policy_cfg policy = c->policy;
        if (!rc) {
                json_t *cl = json_object_get(root, "cluster");
                json_t *pol = json_object_get(root, "policy");
                rc = loom_cluster_cfg_from_json(cl ? cl : root, cl ? "cluster" : "", text, len,
                                                &cluster, e);
                if (!rc && pol)
                        rc = loom_policy_cfg_from_json(pol, "policy", text, len, &cluster, &policy,
                                                       e);
                json_t *quotas = cl ? json_object_get(root, "quotas") : NULL;
                if (!rc && quotas) /* the last check: it writes c->quotas only when valid */
                        rc = loom_quota_cfg_from_json(quotas, "quotas", text, len, &c->quotas, e);
        }
        if (rc) {
                file_error(path, rc, e);
        } else {
                c->cluster = cluster;
                c->policy = policy;
                c->have_cluster = true;
        }
        json_decref(root);
        free(text);
        return rc;
}

int loom_server_write_port_file(const loom_server *s, const char *path, loom_err *e)
{
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", loom_server_port(s)) < 0 || fclose(f) || rename(tmp, path))
                return loom_err_set(e, LOOM_EIO, "", "%s: %s", path, strerror(errno));
        return 0;
}

void loom_server_serving_line(const loom_server_cfg *c, int port, char *buf, size_t len)
{
        char where[96];
        snprintf(buf, len, "serving %s on %s, data in %s, admission %s",
                 c->tls_cert ? "https" : "http", host_port(c->listen_host, port, where, sizeof where),
                 c->data_dir, loom_admission_name(c->policy.admission));
}
