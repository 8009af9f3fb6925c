/* BLAS calls from signal handlers (shim/tests/boundary.rs).
 *
 * 1. A process-directed signal whose handler calls dgemm_, raised while the only thread of the
 *    program that takes it blocks it: the handler must run on that thread once it unblocks,
 *    never on a thread the BLAS started (which may hold the BLAS's own locks). The reference
 *    BLAS starts no thread, so the handler runs on the main thread.
 * 2. An interval timer (every argv[2] us, default 50) whose handler calls dgemm_ on its own small operands while the
 *    main thread makes CALLS (argv[1], default 3000) larger calls: every call of either kind must give the C the
 *    first one gave, and the program must end (no deadlock).
 * Prints lines that must be the same with and without the shim.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "common.h"

#define SN 4
static double sa[SN * SN], sb[SN * SN], sc[SN * SN];
static uint64_t small_want;
static volatile sig_atomic_t small_calls, small_bad;
static volatile long handler_tid;

static void small_call(void) {
    int n = SN;
    double alpha = 1.0, beta = 0.0;
    dgemm_("N", "T", &n, &n, &n, &alpha, sa, &n, sb, &n, &beta, sc, &n, 1, 1);
}

static void on_usr1(int sig) {
    (void)sig;
    handler_tid = syscall(SYS_gettid);
    small_call();
}

static void on_alarm(int sig) {
    (void)sig;
    small_call();
    small_calls++;
    if (hash_bits(sc, SN * SN) != small_want) small_bad++;
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 3000;
    int every_us = argc > 2 ? atoi(argv[2]) : 50;
    fill(sa, SN * SN);
    fill(sb, SN * SN);
    small_call();
    small_want = hash_bits(sc, SN * SN);

    /* 1. */
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    signal(SIGUSR1, on_usr1);
    pthread_sigmask(SIG_BLOCK, &usr1, &old);
    kill(getpid(), SIGUSR1);
    usleep(200000);
    long early = handler_tid;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    printf("usr1: ran while blocked here: %s; ran on the main thread: %s; c ok: %s\n", early ? "yes" : "no",
           handler_tid == syscall(SYS_gettid) ? "yes" : "no", hash_bits(sc, SN * SN) == small_want ? "yes" : "no");

    /* 2. */
    enum { N = 48 };
    static double a[N * N], b[N * N], c[N * N];
    fill(a, N * N);
    fill(b, N * N);
    int n = N;
    double alpha = 0.5, beta = 0.0;
    dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
    uint64_t want = hash_bits(c, N * N);
    signal(SIGALRM, on_alarm);
    struct itimerval every = {{0, every_us}, {0, every_us}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    int bad = 0;
    for (int i = 0; i < calls; i++) {
        memset(c, 0, sizeof c);
        dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
        if (hash_bits(c, N * N) != want) bad++;
    }
    setitimer(ITIMER_REAL, &off, NULL);
    printf("alarm: main calls wrong: %d; handler calls: %s; handler calls wrong: %d\n", bad,
           small_calls > 0 ? "some" : "none", (int)small_bad);
    return 0;
}
