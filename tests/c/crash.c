/* A process killed without warning (SIGKILL after `calls` dgemm_ calls): the trace keeps
 * every record except those still in the shim's write buffer (README, "What a crash can
 * lose"), and what it keeps is whole lines that `ozaki summary` can read.
 *
 * With IDLE_MS, the process first sits idle that long, as an interactive program does before
 * the user presses Ctrl-C, and SIG (kill, term or int) picks the signal: the shim's timed
 * flush must have written every record by then.
 *
 * Usage: crash [CALLS [IDLE_MS [SIG]]]   (default 1000 0 kill)
 */
#include <signal.h>
#include <string.h>
#include <time.h>

#include "common.h"

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 1000, m = 3;
    double a[9], b[9], c[9], alpha = 1.0, beta = 0.0;
    fill(a, 9);
    fill(b, 9);
    for (int i = 0; i < calls; i++) dgemm_("N", "N", &m, &m, &m, &alpha, a, &m, b, &m, &beta, c, &m, 1, 1);
    printf("made %d calls\n", calls);
    fflush(stdout);
    long idle_ms = argc > 2 ? atol(argv[2]) : 0;
    const char *sig = argc > 3 ? argv[3] : "kill";
    struct timespec idle = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
    nanosleep(&idle, NULL);
    int s = strcmp(sig, "term") == 0 ? SIGTERM : strcmp(sig, "int") == 0 ? SIGINT : SIGKILL;
    /* the default action, even where a background shell started us with SIGINT ignored */
    if (s != SIGKILL) signal(s, SIG_DFL);
    raise(s);
    return 0;
}
