/* Forks while another thread makes the process's first BLAS call: each child must finish its
 * own BLAS call. Every trial is a fresh process (forked from here before any BLAS call) in
 * which a thread starts the first dgemm_ while the main thread forks after a delay that grows
 * from trial to trial, so the fork lands at every point of the shim's first-call set-up. The
 * child gets ALARM_S seconds for its call. Usage: fork_race TRIALS STEP_US.
 * Output: "trials N hung H" (H children that did not finish in time). */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

enum { ALARM_S = 5, N = 48 };

static double a[N * N], b[N * N];

static void one_call(double *c) {
    int n = N;
    double alpha = 1.0, beta = 0.0;
    dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
}

static void *first_call(void *arg) {
    one_call(arg);
    return NULL;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* One trial; its exit status is 0 when the child finished its call. */
static int trial(double delay_us) {
    static double c0[N * N], c1[N * N];
    pthread_t t;
    pthread_create(&t, NULL, first_call, c0);
    double until = now_us() + delay_us;
    while (now_us() < until) {
    }
    pid_t child = fork();
    if (child == 0) {
        alarm(ALARM_S);
        one_call(c1);
        exit(0);
    }
    pthread_join(t, NULL);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    int trials = argc > 1 ? atoi(argv[1]) : 36;
    double step = argc > 2 ? atof(argv[2]) : 100;
    fill(a, N * N);
    fill(b, N * N);
    int hung = 0;
    for (int i = 0; i < trials; i++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) _exit(trial(i * step));
        int status = 0;
        waitpid(p, &status, 0);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) hung++;
    }
    printf("trials %d hung %d\n", trials, hung);
    return 0;
}
