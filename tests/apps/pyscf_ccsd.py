"""PySCF RHF + CCSD: trace #4 of the Ozaki 2.5 paper (benzene / cc-pVDZ, CCSD capped at six
iterations), and a small water / cc-pVDZ variant that is quick enough for tests.

PySCF's CCSD contractions run in its C libraries (libcc, libao2mo and the others in pyscf/lib), which call
plain dgemm_ from the OpenBLAS bundled with the wheel; numpy.dot/einsum in Python go through
numpy's own BLAS. The shim traces both.

Usage: python3 pyscf_ccsd.py water|benzene [BASIS=cc-pvdz] [MAX_CYCLE=6]
"""
import sys
import time

import pyscf
from pyscf import cc, gto, lib, scf

MOLECULES = {
    # Experimental geometry (Angstrom).
    "water": "O 0.0000 0.0000 0.1173; H 0.0000 0.7572 -0.4692; H 0.0000 -0.7572 -0.4692",
    # D6h benzene, C-C 1.39 A, C-H 1.09 A.
    "benzene": "; ".join(
        [f"C {1.39 * c:.6f} {1.39 * s:.6f} 0.0" for c, s in
         [(1, 0), (0.5, 0.866025404), (-0.5, 0.866025404), (-1, 0), (-0.5, -0.866025404), (0.5, -0.866025404)]]
        + [f"H {2.48 * c:.6f} {2.48 * s:.6f} 0.0" for c, s in
           [(1, 0), (0.5, 0.866025404), (-0.5, 0.866025404), (-1, 0), (-0.5, -0.866025404), (0.5, -0.866025404)]]),
}


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "water"
    basis = sys.argv[2] if len(sys.argv) > 2 else "cc-pvdz"
    max_cycle = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    mol = gto.M(atom=MOLECULES[name], basis=basis, verbose=0)
    t0 = time.perf_counter()
    mf = scf.RHF(mol)
    # Converged well past the 1e-10 Eh to which runs are compared, so that where the
    # convergence test happens to stop does not show in the energies.
    mf.conv_tol = 1e-12
    mf.run()
    mycc = cc.CCSD(mf)
    mycc.max_cycle = max_cycle
    # CCSD cuts its contractions into blocks that fit max_memory less what the process
    # already holds, so the block shapes (and the BLAS calls) depend on the resident size.
    print(f"resident before CCSD: {lib.current_memory()[0]:.0f} MB of max_memory {mycc.max_memory:.0f} MB",
          flush=True)
    mycc.run()
    dt = time.perf_counter() - t0
    # 12 decimals: runs are compared to 1e-10 Eh.
    print(f"pyscf {pyscf.__version__}, {name}/{basis}, nao = {mol.nao}: E(RHF) = {mf.e_tot:.12f}, "
          f"E(CCSD) = {mycc.e_tot:.12f} after <= {max_cycle} iterations (converged: {mycc.converged}), {dt:.3f} s")


if __name__ == "__main__":
    main()
