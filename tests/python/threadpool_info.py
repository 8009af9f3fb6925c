"""Which BLAS libraries threadpoolctl finds once NumPy and SciPy's BLAS are loaded.

Prints one line per library (API, file name, version), sorted, so the run with the shim
preloaded can be compared with the run without it: the shim must not hide the real BLAS
from tools that look for it.
"""
import os

import numpy as np
import scipy.linalg.blas  # noqa: F401  (loads SciPy's BLAS)
from threadpoolctl import threadpool_info

np.ones((4, 4)) @ np.ones((4, 4))
rows = sorted(
    (i.get("internal_api", "?"), os.path.basename(i.get("filepath", "?")), str(i.get("version")))
    for i in threadpool_info()
)
for api, name, version in rows:
    print(api, name, version)
print("libraries", len(rows))
