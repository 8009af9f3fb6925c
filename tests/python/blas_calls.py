"""NumPy and SciPy calls that reach the BLAS, with shapes chosen so that each call can be
found in the trace by its dimensions alone.

Prints one line per operation: its name, the call the shim should record
(`class m n k`, where class is numpy-gemm, numpy-syrk, scipy-gemm or scipy-syrk) and a
SHA-256 of the result's bytes. shim/tests/python_clients.rs runs this with and without the
shim (Debian's python3-numpy/scipy and pip wheels in a venv) and compares the output.
"""
import hashlib
import sys

import numpy as np
import scipy.linalg.blas as fblas


def digest(x):
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:32]


def main():
    rng = np.random.default_rng(20261130)
    a = rng.standard_normal((37, 53))
    b = rng.standard_normal((53, 29))
    c = rng.standard_normal((41, 23))
    x = rng.standard_normal((19, 31))
    y = rng.standard_normal((31, 17))
    w = rng.standard_normal((13, 31))
    z = rng.standard_normal((13, 11))
    ops = [
        ("a@b", "numpy-gemm 37 29 53", lambda: a @ b),
        ("matmul", "numpy-gemm 41 41 23", lambda: np.matmul(c, c.T.copy())),
        ("a@a.T", "numpy-syrk 41 41 23", lambda: c @ c.T),
        ("blas.dgemm", "scipy-gemm 19 17 31", lambda: fblas.dgemm(1.5, x, y)),
        ("blas.dgemm-trans_b", "scipy-gemm 19 13 31", lambda: fblas.dgemm(-0.5, x, w, trans_b=True)),
        ("blas.dsyrk", "scipy-syrk 13 13 11", lambda: fblas.dsyrk(0.5, z)),
        ("blas.dsyrk-trans", "scipy-syrk 11 11 13", lambda: fblas.dsyrk(1.0, z, trans=1)),
    ]
    for name, call, op in ops:
        print(name, call, digest(op()))
    print("numpy", np.__version__, file=sys.stderr)


if __name__ == "__main__":
    main()
