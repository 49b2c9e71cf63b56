/* exec_int.h - what the files of src/exec share (not API; see loom/exec.h). */
#ifndef LOOM_EXEC_INT_H
#define LOOM_EXEC_INT_H

#include <sys/types.h>

#include "loom/exec.h"

#define EXEC_MAX_LISTED 1024

/* A worker this executor launched (or adopted), by key. */
typedef struct exec_rec {
        uint32_t job, admission;
        int pool, rank;
        bool reported;                 /* its failure went to loomd */
        bool moving;                   /* stopped to run on another node: its end is no failure */
        char node[LOOM_EXEC_NAME_MAX]; /* the cluster's node it runs on ("" if not known) */
} exec_rec;

struct loom_exec {
        loom_exec_cfg cfg;
        const loom_exec_ops *ops;
        void *impl;
        exec_rec *recs;
        int n_recs;
        size_t cap_recs;
        loom_exec_worker *listed;
        int n_listed;
        /* node map slot -> loom node id + 1 bound to it (0: free); exec.c */
        int64_t bound[2][LOOM_EXEC_MAX_NODES];
        /* as of the last round, which is also the order free nodes are bound in (exec.c):
         * 0 up, 1 down or coming up, 2 asked to power down and not down yet */
        unsigned char power[2][LOOM_EXEC_MAX_NODES];
        bool broken[2][LOOM_EXEC_MAX_NODES];      /* unusable: not bound again while it stays so */
        double since[2][LOOM_EXEC_MAX_NODES];     /* bound and coming up since (monotonic s), 0 */
        double failed_at[2][LOOM_EXEC_MAX_NODES]; /* a worker's node failure there (mono s) */
        bool bound_loaded;
        uint32_t (*waiting)[2]; /* loom_exec_waiting: (job, admission), EXEC_MAX_LISTED */
        int n_waiting;
        uint32_t (*misplaced)[2]; /* loom_exec_misplaced, EXEC_MAX_LISTED */
        int n_misplaced;
        char notes[8][LOOM_EXEC_NOTE_MAX]; /* loom_exec_node_notes, this apply's */
        int n_notes;
};

/* A child process this executor started (local workers; srun clients of Slurm steps). */
typedef struct exec_child {
        pid_t pid;
        loom_exec_worker w;
} exec_child;

/* proc.c: start `argv` (or sh -c cmd when argv is NULL) in a new session with env added to the
 * environment and stdout/stderr to out_path; *pid set. 0 or LOOM_EIO with e filled. */
int exec_spawn(const char *const *argv, const char *cmd, const char *const *env,
               const char *out_path, pid_t *pid, loom_err *e);
/* Reap ended children of the table: moves each ended one's worker (ended, exit_code, why) to
 * out; returns how many. */
int exec_reap(exec_child *kids, int *n_kids, loom_exec_worker *out, int max);
/* Run argv, capturing up to cap - 1 bytes of stdout into buf (NUL-terminated); returns the
 * exit status (0..255), or -1 when it could not run or was killed. Waits at most timeout_s. */
int exec_capture(const char *const *argv, char *buf, size_t cap, double timeout_s);

/* slurm.c: the parsers of squeue's and sinfo's output, on a buffer (they cut it in place), so
 * that tests and the fuzz target reach them without a cluster. Lines not in the format asked
 * for are skipped. steps: "ID|NAME|NODE" lines whose NAME is a loom worker's, appended to out
 * from index n up to max; returns the new count. holders: "ID|loom-node-NODE|STATE" lines, at
 * most max; returns the count. nodes: "NODE|STATE" pairs, at most max; returns the count. */
typedef struct exec_slurm_holder {
        char node[LOOM_EXEC_NAME_MAX];
        char id[24];
        bool running;
} exec_slurm_holder;
int exec_slurm_parse_steps(char *buf, loom_exec_worker *out, int n, int max);
int exec_slurm_parse_holders(char *buf, exec_slurm_holder *out, int max);
int exec_slurm_parse_nodes(char *buf, char (*state)[2][LOOM_EXEC_NAME_MAX], int max);
/* The same from `squeue --json` (jobs[]: loom's holders, at most max) and `sinfo --json`
 * (nodes[]: each node's state as the word sinfo's %T prints, power suffix included, at most
 * max); -1 when buf is not that JSON (the caller then reads the text format). */
int exec_slurm_json_holders(const char *buf, exec_slurm_holder *out, int max);
int exec_slurm_json_nodes(const char *buf, char (*state)[2][LOOM_EXEC_NAME_MAX], int max);
/* slurm.c: the backend's ops, and loomd's address once it is known (its holders watch it). */
extern const loom_exec_ops exec_slurm_ops;
void exec_slurm_set_url(void *impl, const char *url);
/* The batch script of a node's holder allocation: it ends once none of the addresses in urls
 * (loomd's URL, or every replica's, comma-separated) has taken a connection for grace_s. */
void exec_slurm_holder_script(const char *urls, int grace_s, char *out, size_t n);

#endif
