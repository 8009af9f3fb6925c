"""Floating-point exception flags a matrix product leaves for NumPy to report.

NumPy checks the FPU flags after `a @ b` and, under `np.errstate(...='raise')`, turns them
into a FloatingPointError. The shim must leave exactly the flags the vendor BLAS leaves:
shim/tests/python_clients.rs runs this without the shim and with OZAKI_ROUTE=cpu-ozaki and
compares the output line by line. The operands are finite and their products and sums are
representable (no overflow or underflow in any correct evaluation), but span a range that
the emulation's internal scaling has to cross: entries near 2^-1003 beside entries near 2^6.

Prints one line per product and condition: the product's name, the condition, and `ok` or
the error NumPy raised.
"""
import numpy as np


def unit(rng, shape):
    """Random signs, magnitudes in [1, 2): products of such entries never underflow."""
    return rng.choice([-1.0, 1.0], size=shape) * (1.0 + rng.random(shape))


def cases():
    rng = np.random.default_rng(20261201)
    # Every row of A spans 2^-1003 .. 2^6; B's entries are in [1, 2): every product is
    # normal (>= 2^-1003) or large but far from overflow, and a sum that comes out tiny
    # is exact, so a correct evaluation raises neither overflow nor underflow.
    a = unit(rng, (48, 40))
    a[:, 0::2] *= 2.0 ** -1003
    a[:, 1::2] *= 2.0 ** 6
    b = unit(rng, (40, 36))
    # Columns of B span the same range; A in [1, 2).
    c = unit(rng, (30, 40))
    d = unit(rng, (40, 33))
    d[0::3] *= 2.0 ** -1003
    d[1::3] *= 2.0 ** 6
    return [
        ("rows-span-2^-1003..2^6 @ b", lambda: a @ b),
        ("b.T @ rows-span.T", lambda: b.T @ a.T),
        ("c @ cols-span", lambda: c @ d),
        ("fortran-order", lambda: np.asfortranarray(a) @ np.asfortranarray(b)),
    ]


def main():
    for name, op in cases():
        for cond in ("over", "under", "invalid", "divide"):
            try:
                with np.errstate(**{cond: "raise"}):
                    op()
                print(name, cond, "ok")
            except FloatingPointError as e:
                print(name, cond, "raised:", e)


if __name__ == "__main__":
    main()
