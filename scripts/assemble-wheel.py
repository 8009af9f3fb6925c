#!/usr/bin/env python3
"""Writes the `ozaki-shim` wheel from a built libozaki_shim.so and `ozaki` binary.

A wheel is a zip file with a fixed layout (PEP 427), so the standard library is enough:
no build backend has to be installed. Layout inside the wheel:

    ozaki_shim/__init__.py, __main__.py   (from python/ozaki_shim)
    ozaki_shim/bin/ozaki                  the launcher; it finds ../lib/libozaki_shim.so
    ozaki_shim/lib/libozaki_shim.so       the shim, preloaded only by `ozaki run`
    ozaki_shim/lib/libozaki_audit.so      the audit library (with --audit), which `ozaki run`
                                          loads with OZAKI_CUBLAS_AUDIT=1
    ozaki_shim-VERSION.dist-info/         METADATA (with the `cu13` extra), WHEEL,
                                          entry_points.txt (the `ozaki` command), RECORD

Prints the path of the wheel written.
"""

import argparse
import base64
import hashlib
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = "ozaki_shim"

# The CUDA 13 libraries the GPU routes load at run time (cuBLAS/cuBLASLt and NVRTC); both
# wheels put them in site-packages/nvidia/cu13/lib, where the shim looks for them.
CU13_REQUIRES = ["nvidia-cublas>=13,<14", "nvidia-cuda-nvrtc>=13,<14"]


def workspace_version():
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def metadata(version):
    description = (ROOT / "README.md").read_text()
    lines = [
        "Metadata-Version: 2.1",
        "Name: ozaki-shim",
        f"Version: {version}",
        "Summary: LD_PRELOAD BLAS shim: routes fp64 dgemm/dsyrk to the vendor BLAS, cuBLAS "
        "or Ozaki-II fp64 emulation on INT8 tensor cores",
        "License: MIT OR Apache-2.0",
        "Requires-Python: >=3.8",
        "Provides-Extra: cu13",
    ]
    lines += [f'Requires-Dist: {r}; extra == "cu13"' for r in CU13_REQUIRES]
    lines += ["Description-Content-Type: text/markdown", "", description]
    return "\n".join(lines)


def stripped_copy(src, dst):
    """Copies `src` without debug info when `strip` is there (the wheel's size drops by half
    or more); a plain copy otherwise."""
    shutil.copyfile(src, dst)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", str(dst)], check=True)
    dst.chmod(0o755)


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, type=pathlib.Path, help="libozaki_shim.so")
    ap.add_argument("--bin", required=True, type=pathlib.Path, help="the ozaki binary")
    ap.add_argument("--audit", type=pathlib.Path,
                    help="libozaki_audit.so (OZAKI_CUBLAS_AUDIT=1), when built")
    ap.add_argument("--plat", required=True, help="platform tag, e.g. manylinux_2_28_x86_64")
    ap.add_argument("--out", default="dist", type=pathlib.Path)
    args = ap.parse_args()
    for f in (args.lib, args.bin) + ((args.audit,) if args.audit else ()):
        if not f.is_file():
            sys.exit(f"assemble-wheel: {f} not found (build it first)")

    version = workspace_version()
    dist_info = f"{NAME}-{version}.dist-info"
    files = {}  # arcname -> (bytes, executable)
    for py in sorted((ROOT / "python" / NAME).glob("*.py")):
        files[f"{NAME}/{py.name}"] = (py.read_bytes(), False)
    with tempfile.TemporaryDirectory() as tmp:
        parts = [(args.bin, f"{NAME}/bin/ozaki"), (args.lib, f"{NAME}/lib/libozaki_shim.so")]
        if args.audit:
            parts.append((args.audit, f"{NAME}/lib/libozaki_audit.so"))
        for src, arc in parts:
            dst = pathlib.Path(tmp) / src.name
            stripped_copy(src, dst)
            files[arc] = (dst.read_bytes(), True)
    files[f"{dist_info}/METADATA"] = (metadata(version).encode(), False)
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: ozaki-shim assemble-wheel\nRoot-Is-Purelib: false\n"
        f"Tag: py3-none-{args.plat}\n".encode(),
        False,
    )
    files[f"{dist_info}/entry_points.txt"] = (
        f"[console_scripts]\nozaki = {NAME}.__main__:main\n".encode(),
        False,
    )
    files[f"{dist_info}/top_level.txt"] = (f"{NAME}\n".encode(), False)
    record = [record_line(a, d) for a, (d, _) in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = (("\n".join(record) + "\n").encode(), False)

    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{NAME}-{version}-py3-none-{args.plat}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, (data, executable) in files.items():
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            z.writestr(info, data)
    print(wheel)


if __name__ == "__main__":
    main()
