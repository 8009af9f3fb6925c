/* fork(): the child must write its own trace file (its own header, only its own calls),
 * and the parent's trace must not lose or duplicate records around the fork.
 *
 * The parent makes 1 call (m = 1) before the fork and 2 after; the child makes 3 calls
 * (m = 2) and leaves with exit(). Prints both pids and result hashes.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static uint64_t call(int m) {
    int n = 3, k = 2;
    double a[2 * 2], b[2 * 3], c[2 * 3], alpha = 1.0, beta = 0.0;
    fill(a, 4);
    fill(b, 6);
    dgemm_("N", "N", &m, &n, &k, &alpha, a, &m, b, &k, &beta, c, &m, 1, 1);
    return hash_bits(c, (size_t)m * n);
}

int main(void) {
    uint64_t h = call(1);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 2;
    if (child == 0) {
        uint64_t hc = 0;
        for (int i = 0; i < 3; i++) hc = hc * 31 + call(2);
        printf("child %ld parent %ld hash %016llx\n", (long)getpid(), (long)getppid(), (unsigned long long)hc);
        exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    h = h * 31 + call(1);
    h = h * 31 + call(1);
    printf("parent %ld child-status %d hash %016llx\n", (long)getpid(), status, (unsigned long long)h);
    return 0;
}
