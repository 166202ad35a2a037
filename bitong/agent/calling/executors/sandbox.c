/* bitong-sandbox: the OS side of a tool call's sandbox, run inside _reaper.
 *
 * The policy (which paths, which rules) is built by sandbox.py from the
 * tool's definition and handed over as options; this file only applies it,
 * and fails closed: anything it cannot set up stops the call before the
 * tool runs (exit 125, the reason on stderr).
 *
 *   L  unshare(CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWIPC [|CLONE_NEWNET]) or
 *      setns() into the server's one empty network namespace (0.45 ms
 *      cheaper than a new one per call; nothing in it is up, and a tool
 *      without capabilities cannot bring anything up).
 *   I  pid 1: the filesystem view (sandbox_mounts):
 *        every host mount read-only and nosuid (one mount_setattr), then
 *        masks over what must not be seen (an empty tmpfs over a folder,
 *        /dev/null over a file), a private tmpfs for /tmp and /dev/shm, a
 *        /dev of a few harmless nodes, the allowed host paths bound back
 *        (read-only, or writable for runtime/ and fs_write_paths), and a
 *        /proc of the call's own PID namespace. A bind mount pins the
 *        folder it was made from: a symlink swapped in later cannot lead
 *        out of it.
 *   T  the tool, just before exec (sandbox_lock): resource limits, a
 *      Landlock domain (read only beneath the allowed paths, execute only
 *      the template's program, no signals or abstract sockets outside the
 *      call), every capability dropped (bounding set included), and
 *      no_new_privs.
 */
#define _GNU_SOURCE
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

struct sb_ruleset_attr { /* landlock_ruleset_attr as of ABI 6 */
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

#define LL_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define LL_EXEC LANDLOCK_ACCESS_FS_EXECUTE
#define LL_WRITE                                                                                              \
    (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |        \
     LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |              \
     LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |           \
     LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_REFER | LANDLOCK_ACCESS_FS_TRUNCATE)
#define LL_FILE_RIGHTS                                                                                        \
    (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |             \
     LANDLOCK_ACCESS_FS_TRUNCATE)

static void fail(const char *what, const char *path, int err) {
    dprintf(2, "bitong-sandbox: %s%s%s: %s\n", what, path ? " " : "", path ? path : "", strerror(err));
}

static int landlock_abi(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int)abi;
}

/* ---------------------------------------------------------------- options */

static int add(const char **list, int *n, const char *value) {
    if (*n >= SB_MAX) return -1;
    list[(*n)++] = value;
    return 1;
}

int sandbox_option(struct sandbox *sb, int argc, char **argv, int *i) {
    const char *opt = argv[*i];
    if (strcmp(opt, "--sandbox") == 0) {
        sb->on = 1;
        return 1;
    }
    if (strcmp(opt, "--net-new") == 0) {
        sb->net_new = 1;
        return 1;
    }
    if (strcmp(opt, "--dev-nodes") == 0) {
        sb->dev_nodes = 1;
        return 1;
    }
    if (strcmp(opt, "--restrict-read") == 0) {
        sb->restrict_read = 1;
        return 1;
    }
    if (strcmp(opt, "--restrict-exec") == 0) {
        sb->restrict_exec = 1;
        return 1;
    }
    if (*i + 1 >= argc) return -1;
    const char *value = argv[*i + 1];
    int done = 0;
    if (strcmp(opt, "--net-fd") == 0) {
        sb->net_fd = atoi(value);
        done = 1;
    } else if (strcmp(opt, "--mask") == 0) {
        done = add(sb->mask, &sb->n_mask, value);
    } else if (strcmp(opt, "--bind") == 0) {
        done = add(sb->bind, &sb->n_bind, value);
    } else if (strcmp(opt, "--bind-rw") == 0) {
        done = add(sb->rw, &sb->n_rw, value);
    } else if (strcmp(opt, "--tmpfs") == 0) {
        done = add(sb->tmpfs, &sb->n_tmpfs, value);
    } else if (strcmp(opt, "--read") == 0) {
        done = add(sb->read, &sb->n_read, value);
    } else if (strcmp(opt, "--exec") == 0) {
        done = add(sb->exec, &sb->n_exec, value);
    } else if (strcmp(opt, "--pids-cgroup") == 0) {
        sb->pids_cgroup = value;
        done = 1;
    } else if (strcmp(opt, "--max-procs") == 0) {
        sb->max_procs = atol(value);
        done = 1;
    } else if (strcmp(opt, "--chdir") == 0) {
        sb->chdir_to = value;
        done = 1;
    } else if (strncmp(opt, "--rlimit-", 9) == 0) {
        int res = -1;
        if (strcmp(opt + 9, "as") == 0) res = RLIMIT_AS;
        else if (strcmp(opt + 9, "nproc") == 0) res = RLIMIT_NPROC;
        else if (strcmp(opt + 9, "cpu") == 0) res = RLIMIT_CPU;
        else if (strcmp(opt + 9, "core") == 0) res = RLIMIT_CORE;
        if (res < 0 || sb->n_rlimit >= 8) return -1;
        sb->rlimit[sb->n_rlimit].resource = res;
        sb->rlimit[sb->n_rlimit].value = strtoull(value, NULL, 10);
        sb->n_rlimit++;
        done = 1;
    } else {
        return 0;
    }
    if (done < 0) return -1;
    *i += 1;
    return 1;
}

/* ---------------------------------------------------------------- namespaces (L) */

int sandbox_unshare_flags(const struct sandbox *sb) {
    if (!sb->on) return 0;
    return CLONE_NEWNS | CLONE_NEWIPC | (sb->net_new ? CLONE_NEWNET : 0);
}

int sb_write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    int err = errno;
    close(fd);
    errno = err;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int write_text(const char *dir, const char *name, long value) {
    char path[4096], text[32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(text, sizeof text, "%ld\n", value);
    return sb_write_file(path, text);
}

int sandbox_cgroup(const struct sandbox *sb) {
    if (!sb->on || sb->max_procs <= 0) return 0;
    if (!sb->pids_cgroup) {
        dprintf(2, "bitong-sandbox: max_procs cannot be enforced: the server found no pids cgroup it may use\n");
        return -1;
    }
    if (mkdir(sb->pids_cgroup, 0755) != 0 && errno != EEXIST) {
        fail("cannot make the call's pids cgroup", sb->pids_cgroup, errno);
        return -1;
    }
    /* this launcher counts too: the tool gets max_procs of its own */
    if (write_text(sb->pids_cgroup, "pids.max", sb->max_procs + 2) != 0 ||
        write_text(sb->pids_cgroup, "cgroup.procs", (long)getpid()) != 0) {
        fail("cannot limit the call's processes in", sb->pids_cgroup, errno);
        return -1;
    }
    return 0;
}

int sandbox_join_net(const struct sandbox *sb) {
    if (!sb->on || sb->net_fd < 0) return 0;
    int rc = setns(sb->net_fd, CLONE_NEWNET);
    int err = errno;
    close(sb->net_fd);
    errno = err;
    return rc;
}

/* ---------------------------------------------------------------- the filesystem (I) */

/* mkdir -p of path's parents; the last component as a folder or an empty file. Only ever lands on a
 * writable tmpfs: the host's mounts are read-only by then. */
static int make_point(const char *path, int dir) {
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof buf) return -1;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (dir) return mkdir(buf, 0755) == 0 || errno == EEXIST ? 0 : -1;
    int fd = open(buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return errno == EEXIST ? 0 : -1;
    close(fd);
    return 0;
}

static int set_attr(int dfd, const char *path, unsigned flags, uint64_t set, uint64_t clr) {
    struct mount_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.attr_set = set;
    attr.attr_clr = clr;
    return (int)syscall(SYS_mount_setattr, dfd, path, flags, &attr, sizeof attr);
}

/* A /dev of a few harmless nodes, one mount (cheaper than a mask and a bind mount per node). */
static int make_dev(void) {
    static const struct {
        const char *name;
        unsigned major, minor;
    } nodes[] = {{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};
    if (mount("bitong-dev", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") != 0) {
        fail("cannot mount", "/dev", errno);
        return -1;
    }
    char path[64];
    for (unsigned k = 0; k < sizeof nodes / sizeof nodes[0]; k++) {
        snprintf(path, sizeof path, "/dev/%s", nodes[k].name);
        if (mknod(path, S_IFCHR | 0666, makedev(nodes[k].major, nodes[k].minor)) != 0 || chmod(path, 0666) != 0) {
            fail("cannot make", path, errno);
            return -1;
        }
    }
    if (mkdir("/dev/shm", 01777) != 0 || chmod("/dev/shm", 01777) != 0 || symlink("/proc/self/fd", "/dev/fd") != 0 ||
        symlink("/proc/self/fd/0", "/dev/stdin") != 0 || symlink("/proc/self/fd/1", "/dev/stdout") != 0 ||
        symlink("/proc/self/fd/2", "/dev/stderr") != 0) {
        fail("cannot populate", "/dev", errno);
        return -1;
    }
    return 0;
}

/* One host path shown again: its clone, taken before the masks hid it. */
struct shown {
    const char *path;
    int tree;
    int dir;
    int writable;
};

static char devnull[64] = "/dev/null"; /* the host's, through an fd taken before /dev is masked */

/* Hide the masks that are folders (dirs=1: an empty tmpfs) or files (dirs=0: /dev/null on top). */
/* path lies strictly beneath folder (folder "/" holds everything) */
static int beneath(const char *path, const char *folder) {
    size_t n = strlen(folder);
    if (n == 1 && folder[0] == '/') return path[1] != '\0';
    return strlen(path) > n && strncmp(path, folder, n) == 0 && path[n] == '/';
}

static int hide(const struct sandbox *sb, int dirs) {
    for (int k = 0; k < sb->n_mask; k++) {
        struct stat st;
        if (lstat(sb->mask[k], &st) != 0) {
            if (errno == ENOENT) continue;
            fail("cannot stat", sb->mask[k], errno);
            return -1;
        }
        if (S_ISLNK(st.st_mode) || (S_ISDIR(st.st_mode) != 0) != dirs) continue;
        int rc = dirs ? mount("bitong-mask", sb->mask[k], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k")
                      : mount(devnull, sb->mask[k], NULL, MS_BIND, NULL);
        if (rc != 0) {
            fail("cannot hide", sb->mask[k], errno);
            return -1;
        }
    }
    return 0;
}

int sandbox_mounts(const struct sandbox *sb) {
    if (!sb->on) return 0;
    static struct shown shown[2 * SB_MAX];
    int n = 0;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        fail("cannot make the mounts private", NULL, errno);
        return -1;
    }
    int null_fd = open("/dev/null", O_PATH | O_CLOEXEC);
    if (null_fd < 0) {
        fail("cannot open", "/dev/null", errno);
        return -1;
    }
    snprintf(devnull, sizeof devnull, "/proc/self/fd/%d", null_fd);
    /* 1. clones of the paths to show (binds first, then writable ones, in the order given: parents first) */
    for (int pass = 0; pass < 2; pass++) {
        const char *const *list = pass ? sb->rw : sb->bind;
        int count = pass ? sb->n_rw : sb->n_bind;
        for (int k = 0; k < count; k++) {
            int tree = (int)syscall(SYS_open_tree, AT_FDCWD, list[k], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
            if (tree < 0) {
                if (errno == ENOENT) continue; /* not there: nothing to show */
                fail("cannot take", list[k], errno);
                return -1;
            }
            struct stat st;
            if (fstat(tree, &st) != 0) {
                fail("cannot stat", list[k], errno);
                return -1;
            }
            unsigned long long set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (pass ? 0 : MOUNT_ATTR_RDONLY);
            unsigned long long clr = pass ? MOUNT_ATTR_RDONLY : 0;
            if (strncmp(list[k], "/dev/", 5) == 0) set &= ~(unsigned long long)MOUNT_ATTR_NODEV; /* the few nodes of /dev */
            if (set_attr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, set, clr) != 0) {
                fail("cannot set the mount flags of", list[k], errno);
                return -1;
            }
            shown[n++] = (struct shown){list[k], tree, S_ISDIR(st.st_mode), pass};
        }
    }
    /* 2. the host: read-only, no setuid, everywhere */
    if (set_attr(AT_FDCWD, "/", AT_RECURSIVE, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0) != 0) {
        fail("cannot make the filesystem read-only", NULL, errno);
        return -1;
    }
    /* 3. folder masks (what is shown again goes on top of them), then private tmpfs */
    if (hide(sb, 1) != 0) return -1;
    if (sb->dev_nodes && make_dev() != 0) return -1;
    for (int k = 0; k < sb->n_tmpfs; k++) {
        if (make_point(sb->tmpfs[k], 1) != 0 ||
            mount("bitong-tmp", sb->tmpfs[k], "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m") != 0) {
            fail("cannot mount a private tmpfs on", sb->tmpfs[k], errno);
            return -1;
        }
    }
    /* 4. the shown paths, at their own place; parents first, read-only and writable alike, so that a writable
     * parent never covers a read-only folder inside it */
    for (int k = 1; k < n; k++) {
        struct shown item = shown[k];
        int j = k - 1;
        while (j >= 0 && strlen(shown[j].path) > strlen(item.path)) {
            shown[j + 1] = shown[j];
            j--;
        }
        shown[j + 1] = item;
    }
    for (int k = 0; k < n; k++) {
        struct stat st;
        if (stat(shown[k].path, &st) != 0 && make_point(shown[k].path, shown[k].dir) != 0) {
            fail("cannot make a mount point for", shown[k].path, errno);
            return -1;
        }
        if (syscall(SYS_move_mount, shown[k].tree, "", AT_FDCWD, shown[k].path, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
            fail("cannot show", shown[k].path, errno);
            return -1;
        }
        close(shown[k].tree);
    }
    /* 5. a folder mask inside a folder shown again (the server's admin socket folder under a shown
       /tmp) is hidden again: the clone was taken from the host, before the masks */
    for (int k = 0; k < sb->n_mask; k++) {
        struct stat st;
        if (lstat(sb->mask[k], &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        for (int j = 0; j < n; j++) {
            if (!beneath(sb->mask[k], shown[j].path)) continue;
            if (mount("bitong-mask", sb->mask[k], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0) {
                fail("cannot hide", sb->mask[k], errno);
                return -1;
            }
            break;
        }
    }
    /* file masks last: a secret stays hidden even inside a folder shown again */
    if (hide(sb, 0) != 0) return -1;
    /* masks stay empty: read-only (their own mount only, not what was shown beneath) */
    for (int k = 0; k < sb->n_mask; k++) {
        struct stat st;
        if (lstat(sb->mask[k], &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (set_attr(AT_FDCWD, sb->mask[k], AT_SYMLINK_NOFOLLOW, MOUNT_ATTR_RDONLY, 0) != 0) {
            fail("cannot make read-only", sb->mask[k], errno);
            return -1;
        }
    }
    close(null_fd);
    /* 6. a /proc of this PID namespace only */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL) != 0) {
        fail("cannot mount /proc", NULL, errno);
        return -1;
    }
    if (sb->chdir_to && chdir(sb->chdir_to) != 0) {
        fail("cannot enter", sb->chdir_to, errno);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the process (T) */

static int rule(int ruleset, const char *path, uint64_t access, uint64_t handled) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    access &= handled;
    if (!S_ISDIR(st.st_mode)) access &= LL_FILE_RIGHTS;
    int rc = 0;
    if (access) {
        struct landlock_path_beneath_attr beneath = {.allowed_access = access, .parent_fd = fd};
        rc = (int)syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0);
    }
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

static int drop_capabilities(void) {
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return -1;
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return (int)syscall(SYS_capset, &header, data);
}

int sandbox_lock(const struct sandbox *sb) {
    if (!sb->on) return 0;
    for (int k = 0; k < sb->n_rlimit; k++) {
        struct rlimit lim = {sb->rlimit[k].value, sb->rlimit[k].value};
        if (sb->rlimit[k].resource == RLIMIT_CPU) lim.rlim_max += 1; /* SIGXCPU first, SIGKILL a second later */
        if (setrlimit(sb->rlimit[k].resource, &lim) != 0) {
            fail("cannot set a resource limit", NULL, errno);
            return -1;
        }
    }
    int abi = landlock_abi();
    int ruleset = -1;
    uint64_t handled = 0;
    if (abi >= 1) {
        handled = LL_WRITE | (sb->restrict_read ? LL_READ : 0) | (sb->restrict_exec ? LL_EXEC : 0);
        if (abi < 2) handled &= ~(uint64_t)LANDLOCK_ACCESS_FS_REFER;
        if (abi < 3) handled &= ~(uint64_t)LANDLOCK_ACCESS_FS_TRUNCATE;
        struct sb_ruleset_attr attr = {.handled_access_fs = handled, .handled_access_net = 0, .scoped = 0};
        size_t size = sizeof attr.handled_access_fs;
        if (abi >= 6) {
            attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
            size = sizeof attr;
        }
        ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
        if (ruleset < 0) {
            fail("cannot create a Landlock ruleset", NULL, errno);
            return -1;
        }
        /* writable: the writable binds and private tmpfs (the mounts already say so; Landlock says it again) */
        for (int k = 0; k < sb->n_rw; k++)
            if (rule(ruleset, sb->rw[k], LL_READ | LL_WRITE | LL_EXEC, handled) != 0) goto bad_rule;
        for (int k = 0; k < sb->n_tmpfs; k++)
            if (rule(ruleset, sb->tmpfs[k], LL_READ | LL_WRITE | LL_EXEC, handled) != 0) goto bad_rule;
        for (int k = 0; k < sb->n_read; k++)
            if (rule(ruleset, sb->read[k], LL_READ | (sb->restrict_exec ? 0 : LL_EXEC), handled) != 0) goto bad_rule;
        for (int k = 0; k < sb->n_exec; k++)
            if (rule(ruleset, sb->exec[k], LL_EXEC | LANDLOCK_ACCESS_FS_READ_FILE, handled) != 0) goto bad_rule;
        /* the harmless character devices may be written (2>/dev/null) */
        static const char *const devs[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"};
        for (unsigned k = 0; k < sizeof devs / sizeof devs[0]; k++)
            if (rule(ruleset, devs[k], LL_READ | LANDLOCK_ACCESS_FS_WRITE_FILE, handled) != 0) goto bad_rule;
    } else if (sb->restrict_read || sb->restrict_exec) {
        dprintf(2, "bitong-sandbox: this kernel has no Landlock: the read or execute rule cannot be enforced\n");
        return -1;
    }
    if (drop_capabilities() != 0) {
        fail("cannot drop capabilities", NULL, errno);
        return -1;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        fail("cannot set no_new_privs", NULL, errno);
        return -1;
    }
    if (ruleset >= 0) {
        if (syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
            fail("cannot enter the Landlock domain", NULL, errno);
            return -1;
        }
        close(ruleset);
    }
    return 0;
bad_rule:
    fail("cannot add a Landlock rule", NULL, errno);
    return -1;
}

int sandbox_probe(void) {
    printf("landlock=%d\n", landlock_abi());
    return 0;
}

int sandbox_hold_netns(void) {
    if (unshare(CLONE_NEWNET) != 0) {
        fail("cannot create a network namespace", NULL, errno);
        return 1;
    }
    if (write(1, "ready\n", 6) != 6) return 1;
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
