/* A process killed without warning (SIGKILL after `calls` dgemm_ calls): the trace keeps
 * every record except those still in the shim's write buffer (README, "What a crash can
 * lose"), and what it keeps is whole lines that `ozaki summary` can read.
 *
 * Usage: crash [CALLS]   (default 1000)
 */
#include <signal.h>

#include "common.h"

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 1000, m = 3;
    double a[9], b[9], c[9], alpha = 1.0, beta = 0.0;
    fill(a, 9);
    fill(b, 9);
    for (int i = 0; i < calls; i++) dgemm_("N", "N", &m, &m, &m, &alpha, a, &m, b, &m, &beta, c, &m, 1, 1);
    printf("made %d calls\n", calls);
    fflush(stdout);
    raise(SIGKILL);
    return 0;
}
