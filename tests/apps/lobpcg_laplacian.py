"""SciPy LOBPCG on the 3-D Laplacian: traces #1 and #2 of the Ozaki 2.5 paper (section 6.1,
48^3 grid, n = 110,592, block widths 64 and 128).

The operator is the 7-point Dirichlet Laplacian assembled as a Kronecker sum (scipy.sparse,
so its products are sparse and make no BLAS calls). LOBPCG's dense work, the Rayleigh-Ritz
Gram matrices [X R P]^T [AX AR AP] and the block updates, goes through numpy matmul ->
cblas_dgemm / cblas_dsyrk, which is what the shim traces.

Usage: python3 lobpcg_laplacian.py BLOCK [GRID=48] [MAXITER=15]
The paper does not give its iteration count or tolerance; MAXITER = 15 gives about the
paper's 737 calls with SciPy 1.10 (about 44 calls per iteration plus 85). MAXITER bounds the run (the
FLOP-weighted call-size statistics do not depend on it, the call count does).
"""
import sys
import warnings
import time

import numpy as np
import scipy
import scipy.sparse as sp
from scipy.sparse.linalg import lobpcg


def laplacian_3d(g):
    """7-point Laplacian on a g x g x g interior grid (h = 1), as a CSR matrix."""
    one_d = sp.diags([-np.ones(g - 1), 2 * np.ones(g), -np.ones(g - 1)], [-1, 0, 1], format="csr")
    eye = sp.identity(g, format="csr")
    return (sp.kron(sp.kron(one_d, eye), eye) + sp.kron(sp.kron(eye, one_d), eye)
            + sp.kron(sp.kron(eye, eye), one_d)).tocsr()


def main():
    block = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    grid = int(sys.argv[2]) if len(sys.argv) > 2 else 48
    maxiter = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    # LOBPCG warns when maxiter stops it short of tol; the cap is deliberate here.
    warnings.filterwarnings("ignore", category=UserWarning)
    a = laplacian_3d(grid)
    x = np.random.default_rng(2026).standard_normal((a.shape[0], block))
    t0 = time.perf_counter()
    vals, _ = lobpcg(a, x, largest=False, tol=1e-8, maxiter=maxiter)
    dt = time.perf_counter() - t0
    exact = 3 * (2 - 2 * np.cos(np.pi / (grid + 1)))
    print(f"scipy {scipy.__version__}, n = {a.shape[0]}, block = {block}, maxiter = {maxiter}: "
          f"{dt:.3f} s, smallest eigenvalue {vals.min():.10f} (exact {exact:.10f})")
    # All of them at full precision, smallest first, for comparing runs.
    print("eigenvalues", " ".join(f"{v:.17e}" for v in np.sort(vals)))


if __name__ == "__main__":
    main()
