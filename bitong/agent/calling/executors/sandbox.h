/* The OS sandbox of one tool call, applied by _reaper (see sandbox.py for the policy and the why). */
#ifndef BITONG_SANDBOX_H
#define BITONG_SANDBOX_H

#define SB_MAX 128

struct sb_rlimit {
    int resource;
    unsigned long long value;
};

struct sandbox {
    int on;                 /* --sandbox given: a mount namespace and everything below */
    int net_fd;             /* --net-fd N: join this (empty) network namespace; -1 none */
    int net_new;            /* --net-new: a fresh network namespace */
    const char *mask[SB_MAX];   /* hidden: an empty tmpfs over a folder, /dev/null over a file */
    int n_mask;
    const char *bind[SB_MAX];   /* host paths shown again read-only at the same place (under a mask) */
    int n_bind;
    const char *rw[SB_MAX];     /* host paths shown writable (everything else is read-only) */
    int n_rw;
    const char *tmpfs[SB_MAX];  /* private writable tmpfs (/tmp, /dev/shm) */
    int n_tmpfs;
    const char *read[SB_MAX];   /* Landlock: readable beneath these (when restrict_read) */
    int n_read;
    const char *exec[SB_MAX];   /* Landlock: executable (when restrict_exec) */
    int n_exec;
    int dev_nodes;              /* --dev-nodes: /dev is a tmpfs with a few nodes made here (root only) */
    int restrict_read;
    int restrict_exec;
    struct sb_rlimit rlimit[8];
    int n_rlimit;
    const char *chdir_to;
    const char *pids_cgroup;    /* a new cgroup (pids controller) for the call, holding at most max_procs */
    long max_procs;
};

/* Parse one option at argv[*i]; 1 if it was a sandbox option (and *i moved past its value), 0 if not, -1 bad. */
int sandbox_option(struct sandbox *sb, int argc, char **argv, int *i);

/* In L, before the PID namespace's first fork: the namespaces to unshare besides CLONE_NEWPID. */
int sandbox_unshare_flags(const struct sandbox *sb);

/* In L, first: enter the call's own pids cgroup (max_procs). 0 ok, -1 (message on stderr). */
int sandbox_cgroup(const struct sandbox *sb);

/* In L, after unshare: join the held network namespace. 0 ok, -1 (errno) refused. */
int sandbox_join_net(const struct sandbox *sb);

/* In I (pid 1, in the new mount namespace): build the filesystem view. 0 ok, -1 (message on stderr). */
int sandbox_mounts(const struct sandbox *sb);

/* In T just before exec: limits, Landlock, no capabilities, no_new_privs. 0 ok, -1 (message on stderr). */
int sandbox_lock(const struct sandbox *sb);

/* --probe-sandbox: can this kernel build the sandbox? prints what it has. */
int sandbox_probe(void);

/* --hold-netns: make an empty network namespace and keep it until stdin closes. */
int sandbox_hold_netns(void);

/* write text to a file (a /proc or cgroup control): 0, or -1 with errno */
int sb_write_file(const char *path, const char *text);

#endif
