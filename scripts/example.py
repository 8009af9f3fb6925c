"""A small NumPy/SciPy workload for `scripts/example`: what a typical scientific Python
program asks of its BLAS. Mixed GEMM sizes, a symmetric product (dsyrk), and LAPACK
factorisations whose blocked algorithms call dgemm_/dsyrk_ internally (visible with
Debian's reference LAPACK)."""
import numpy as np
import scipy.linalg as la

rng = np.random.default_rng(2)
total = 0.0
for n in (16, 64, 256, 512):
    a = rng.standard_normal((n, n))
    b = rng.standard_normal((n, n // 2 + 1))
    total += float((a @ b).sum())          # dgemm
    total += float((a @ a.T).trace())      # dsyrk
spd = rng.standard_normal((400, 400))
spd = spd @ spd.T + 400 * np.eye(400)
total += float(la.cholesky(spd).trace())   # dpotrf -> dsyrk_/dgemm_
total += float(la.lu_factor(rng.standard_normal((300, 300)))[0].trace())  # dgetrf -> dgemm_
print(f"example checksum {total:.6e}")
