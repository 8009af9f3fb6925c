/* exit() called from a thread other than main, while main is blocked: every record made
 * before it must be in the trace. The worker makes `calls` dgemm_ calls (m = n = k = 4)
 * and then calls exit(0); main never returns normally.
 *
 * Usage: thread_exit [CALLS]   (default 500)
 */
#include <pthread.h>

#include "common.h"

static int calls = 500;

static void *worker(void *arg) {
    (void)arg;
    int m = 4;
    double a[16], b[16], c[16], alpha = 1.0, beta = 1.0;
    fill(a, 16);
    fill(b, 16);
    memset(c, 0, sizeof c);
    for (int i = 0; i < calls; i++) dgemm_("T", "N", &m, &m, &m, &alpha, a, &m, b, &m, &beta, c, &m, 1, 1);
    printf("worker done %d hash %016llx\n", calls, (unsigned long long)hash_bits(c, 16));
    fflush(stdout);
    exit(0);
}

int main(int argc, char **argv) {
    if (argc > 1) calls = atoi(argv[1]);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    printf("unreachable\n");
    return 1;
}
