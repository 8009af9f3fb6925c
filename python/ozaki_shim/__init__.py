"""ozaki-shim: the BLAS shim and its `ozaki` launcher, installed with pip.

Importing this package changes nothing in the running process: the shim is preloaded only
into programs started with `ozaki run -- CMD` (or with the variables `ozaki env` prints,
for MPI launchers). The functions below tell where the installed files are.
"""

import pathlib

_HERE = pathlib.Path(__file__).resolve().parent

# The distributions of the `cu13` extra: pip's CUDA 13 cuBLAS (with cuBLASLt) and NVRTC.
CUDA_DISTRIBUTIONS = ("nvidia-cublas", "nvidia-cuda-nvrtc")

# File names of the libraries the GPU routes load from them.
_CUDA_LIBRARY_PREFIXES = ("libcublas", "libnvrtc")


def binary_path():
    """Absolute path of the bundled `ozaki` executable."""
    return _HERE / "bin" / "ozaki"


def library_path():
    """Absolute path of the bundled libozaki_shim.so (what `ozaki run` preloads)."""
    return _HERE / "lib" / "libozaki_shim.so"


def cuda_lib_dirs():
    """Directories holding the CUDA libraries of the installed `cu13` distributions, as their
    installed-files records (RECORD) name them, wherever pip put them (another site-packages,
    the user's, a --target directory on sys.path); empty when none is installed."""
    from importlib import metadata

    dirs = []
    for name in CUDA_DISTRIBUTIONS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.name.startswith(_CUDA_LIBRARY_PREFIXES) and ".so" in f.name:
                d = str(pathlib.Path(dist.locate_file(f)).resolve().parent)
                if d not in dirs:
                    dirs.append(d)
    return dirs
