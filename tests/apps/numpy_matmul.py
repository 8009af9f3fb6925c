"""NumPy `a @ b` on square matrices, one process, several sizes: what an unmodified Python
program's large products cost, with the result checked.

Usage: python3 numpy_matmul.py SIZE[xREPS] ...     e.g. 4096x2 8192x2 16384
One warm-up product at 1024 first (thread pools, and under the shim its start); then REPS
products (default 1) of fresh uniform [-0.5, 0.5) matrices at each size. Prints per size the
first and the best time, and the largest error of 16 sampled entries of C against a long
double dot product, relative to |a_i| . |b_j| (native fp64 gives about 1e-17; the limit is
1e-13). Exit status 1 when a check fails.
"""
import sys
import time

import numpy as np

LIMIT = 1e-13


def sampled_error(a, b, c, rng):
    """Largest |c_ij - a_i . b_j| / (|a_i| . |b_j|) over 16 random entries, in long double."""
    n = a.shape[0]
    worst = 0.0
    for i, j in rng.integers(0, n, size=(16, 2)):
        ai, bj = a[i].astype(np.longdouble), b[:, j].astype(np.longdouble)
        worst = max(worst, float(abs(c[i, j] - np.dot(ai, bj)) / np.dot(abs(ai), abs(bj))))
    return worst


def main():
    plan = []
    for arg in sys.argv[1:] or ["4096", "8192"]:
        size, _, reps = arg.partition("x")
        plan.append((int(size), int(reps or 1)))
    rng = np.random.default_rng(2026)
    w = rng.random((1024, 1024))
    w @ w
    total, ok = 0.0, True
    for n, reps in plan:
        times = []
        for _ in range(reps):
            a = rng.random((n, n)) - 0.5
            b = rng.random((n, n)) - 0.5
            t = time.perf_counter()
            c = a @ b
            times.append(time.perf_counter() - t)
        err = sampled_error(a, b, c, rng)
        ok &= err <= LIMIT
        total += sum(times)
        print(f"numpy {np.__version__} n = {n}: first {times[0] * 1e3:.1f} ms, best {min(times) * 1e3:.1f} ms "
              f"of {reps}, max sampled err/(|a||b|) = {err:.1e}")
    print(f"products {total:.3f} s; check (limit {LIMIT:.0e}): {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
