"""ozaki-shim: the BLAS shim and its `ozaki` launcher, installed with pip.

Importing this package changes nothing in the running process: the shim is preloaded only
into programs started with `ozaki run -- CMD` (or with the variables `ozaki env` prints,
for MPI launchers). The functions below tell where the installed files are.
"""

import pathlib

_HERE = pathlib.Path(__file__).resolve().parent


def binary_path():
    """Absolute path of the bundled `ozaki` executable."""
    return _HERE / "bin" / "ozaki"


def library_path():
    """Absolute path of the bundled libozaki_shim.so (what `ozaki run` preloads)."""
    return _HERE / "lib" / "libozaki_shim.so"
