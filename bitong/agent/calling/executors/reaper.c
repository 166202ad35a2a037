/* bitong-reaper: run one tool call in its own PID namespace, so that nothing
 * the tool starts outlives the call or the server.
 *
 *   _reaper PARENT_PID ERRFD [SANDBOX OPTION...] -- PROGRAM ARG...   run one call
 *   _reaper --probe                               can this kernel do it? (exit 0 and the mode, or 1 and why)
 *   _reaper --landlock-abi                        the kernel's Landlock ABI (0: none)
 *   _reaper --hold-netns                          an empty network namespace, kept until stdin closes
 *
 * The sandbox options (sandbox.c, built by sandbox.py) add namespaces in L,
 * the filesystem view in I and the process's locks in T.
 *
 * Three processes (see reaper.py for the why):
 *
 *   L  this program, the server's child (the pid the server watches). Sets
 *      PR_SET_PDEATHSIG(SIGKILL), so it dies with the server; unshare()s a
 *      new PID namespace (CLONE_NEWPID; as a non-root user CLONE_NEWUSER too,
 *      mapping the user's own uid and gid), then forks I. On SIGTERM (the
 *      server's "stop this call") it SIGKILLs I. It exits when I is gone,
 *      with the tool's own exit status (or SIGKILL when it was stopped).
 *   I  pid 1 of the namespace. PR_SET_PDEATHSIG(SIGKILL): it dies with L.
 *      Forks T and reaps every orphan until T exits, then exits itself: the
 *      kernel then SIGKILLs everything left in the namespace (setsid'd
 *      daemons, double forks, nohup, disown: all of it), and I's exit, so
 *      L's waitpid, completes only once every one of them is gone.
 *   T  pid 2: default signals, empty mask, execvp(PROGRAM). An exec failure
 *      is written (errno, 4 bytes) to ERRFD, so the server answers
 *      "program not found" as it would for a direct spawn.
 *
 * Only async-signal-safe calls between fork and exec; no allocation after
 * the first fork. Built by setup.py (never committed as a binary).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"

#define EXIT_SETUP 125 /* the namespace could not be made: nothing ran */

static volatile sig_atomic_t init_pid = 0;
static struct sandbox sb = {.net_fd = -1};
static volatile sig_atomic_t stopping = 0;

static void on_stop(int sig) {
    (void)sig;
    stopping = 1;
    if (init_pid > 0) kill((pid_t)init_pid, SIGKILL);
}

static void say(const char *what, int err) {
    /* stderr is the call's stderr: the reason reaches the caller verbatim */
    dprintf(2, "bitong-reaper: %s: %s\n", what, strerror(err));
}

/* A new PID namespace for the next child; "pid" or "user+pid", NULL (errno set) if refused. */
static const char *new_pid_namespace(int extra) {
    if (unshare(CLONE_NEWPID | extra) == 0) return "pid";
    if (errno != EPERM) return NULL;
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWPID | extra) != 0) return NULL;
    char map[64];
    if (sb_write_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT) return NULL;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    if (sb_write_file("/proc/self/uid_map", map) != 0) return NULL;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (sb_write_file("/proc/self/gid_map", map) != 0) return NULL;
    return "user+pid";
}

/* T: the tool itself. */
static void exec_tool(char **argv, int errfd, const sigset_t *empty) {
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, empty, NULL);
    if (errfd >= 0) fcntl(errfd, F_SETFD, FD_CLOEXEC);
    if (sandbox_lock(&sb) != 0) _exit(EXIT_SETUP);
    execvp(argv[0], argv);
    int err = errno;
    if (errfd >= 0) {
        ssize_t ignored = write(errfd, &err, sizeof err);
        (void)ignored;
    }
    _exit(err == ENOENT ? 127 : 126);
}

/* I: pid 1 of the namespace. Never returns. */
static void run_init(char **argv, int errfd, int link, const sigset_t *empty) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* L may have died before the prctl: then its end of the link is closed. */
    struct pollfd p = {.fd = link, .events = POLLIN};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) _exit(EXIT_SETUP);
    signal(SIGTERM, SIG_DFL);
    if (sandbox_mounts(&sb) != 0) {
        int status = EXIT_SETUP << 8; /* as if the tool exited 125: nothing ran */
        ssize_t ignored = write(link, &status, sizeof status);
        (void)ignored;
        _exit(EXIT_SETUP);
    }
    pid_t tool = fork();
    if (tool < 0) {
        say("fork", errno);
        _exit(EXIT_SETUP);
    }
    if (tool == 0) {
        if (!argv) _exit(0); /* --probe */
        close(link);
        exec_tool(argv, errfd, empty);
    }
    if (errfd >= 0) close(errfd);
    int status = 0;
    for (;;) {
        pid_t pid = waitpid(-1, &status, 0);
        if (pid == tool) break;
        if (pid < 0 && errno != EINTR) {
            status = 0;
            break;
        }
    }
    ssize_t ignored = write(link, &status, sizeof status);
    (void)ignored;
    _exit(0); /* the kernel now kills the rest of the namespace */
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--landlock-abi") == 0) return sandbox_probe();
    if (argc == 2 && strcmp(argv[1], "--hold-netns") == 0) return sandbox_hold_netns();
    int probe = argc == 2 && strcmp(argv[1], "--probe") == 0;
    int dashes = 3;
    while (!probe && dashes < argc && strcmp(argv[dashes], "--") != 0) {
        if (sandbox_option(&sb, argc, argv, &dashes) != 1) {
            dprintf(2, "bitong-reaper: bad option %s\n", argv[dashes]);
            return 2;
        }
        dashes++;
    }
    if (!probe && (argc < 5 || dashes + 1 >= argc)) {
        dprintf(2, "usage: %s PARENT_PID ERRFD [SANDBOX OPTION...] -- PROGRAM [ARG...] | --probe\n", argv[0]);
        return 2;
    }
    pid_t parent = probe ? getppid() : (pid_t)atol(argv[1]);
    int errfd = probe ? -1 : atoi(argv[2]);
    char **tool_argv = probe ? NULL : argv + dashes + 1;

    /* Die with the server; if it is already gone, do nothing. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) return EXIT_SETUP;

    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigfillset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    if (sandbox_cgroup(&sb) != 0) return EXIT_SETUP;
    const char *mode = new_pid_namespace(sandbox_unshare_flags(&sb));
    if (!mode) {
        say("cannot create a PID namespace", errno);
        return EXIT_SETUP;
    }
    if (sandbox_join_net(&sb) != 0) {
        say("cannot enter the empty network namespace", errno);
        return EXIT_SETUP;
    }
    /* A credential change (the user namespace) clears the setting: set it again. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) return EXIT_SETUP;
    int link[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, link) != 0) {
        say("socketpair", errno);
        return EXIT_SETUP;
    }
    sigprocmask(SIG_SETMASK, &all, NULL); /* no stop request between fork and init_pid */
    pid_t init = fork();
    if (init < 0) {
        say("fork", errno);
        return EXIT_SETUP;
    }
    if (init == 0) {
        close(link[0]);
        sigprocmask(SIG_SETMASK, &empty, NULL);
        run_init(tool_argv, errfd, link[1], &empty);
    }
    close(link[1]);
    if (errfd >= 0) close(errfd);
    init_pid = init;
    sigprocmask(SIG_SETMASK, &empty, NULL);
    if (stopping) kill(init, SIGKILL);

    int status = 0;
    while (waitpid(init, &status, 0) < 0 && errno == EINTR) {
    }
    /* I is reaped: every process of the namespace is gone. */
    int tool_status = 0;
    ssize_t got;
    do {
        got = read(link[0], &tool_status, sizeof tool_status);
    } while (got < 0 && errno == EINTR);
    if (probe) {
        if (got == sizeof tool_status && WIFEXITED(tool_status) && WEXITSTATUS(tool_status) == 0) {
            printf("%s\n", mode);
            return 0;
        }
        dprintf(2, "bitong-reaper: the namespace's first process did not run\n");
        return 1;
    }
    if (got != sizeof tool_status || stopping) {
        signal(SIGKILL, SIG_DFL);
        kill(getpid(), SIGKILL); /* stopped: answer as a killed tool does */
    }
    if (WIFEXITED(tool_status)) return WEXITSTATUS(tool_status);
    if (WIFSIGNALED(tool_status)) { /* die of the tool's own signal, without a core file */
        int sig = WTERMSIG(tool_status);
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        signal(sig, SIG_DFL);
        sigprocmask(SIG_SETMASK, &empty, NULL);
        kill(getpid(), sig);
        return 128 + sig;
    }
    return EXIT_SETUP;
}
