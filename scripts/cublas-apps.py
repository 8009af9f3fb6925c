#!/usr/bin/env python3
"""GPU-resident programs with and without the shim's cuBLAS hook, side by side in one run.

Each case runs in its own process, up to four times:
- without the shim;
- with LD_PRELOAD=libozaki_shim.so (OZAKI_ROUTE from GPU_CHECK_CUBLAS_ROUTE, default auto; a
  trace per case), and LD_AUDIT=libozaki_audit.so when that library lies beside the shim
  (it sends the entry points a program finds with dlsym, JAX's, to the hook;
  GPU_CHECK_CUBLAS_AUDIT=0 leaves it out);
- for the plain products (CuPy a @ b and batched matmul, PyTorch matmul and bmm), "device":
  the same products, on the same shapes and data layout, through the shim's
  `ozaki_dgemm_device` called directly (ctypes), with the shim preloaded as in the run
  before: the kernels' own speed, so that "with vs device" shows what the hook adds;
- "ab": with the shim and OZAKI_AB=GPU_CHECK_CUBLAS_AB (default 1; 0 or empty skips this
  run), the operation run once, each emulated call computed by cuBLAS fp64 beside the
  emulation and compared in its trace record; OZAKI_AB_MAX_MB is GPU_CHECK_CUBLAS_AB_MAX_MB
  (default 32768: a 16384^2 product's copies of C, A and B take 10 GiB). A run of its own,
  so that the comparison's copies and waits never land in the timed runs.
A timed case times its operation (median of 3 after one warm-up, the device synchronised
around each), and measures the error of the result on sampled entries against an exact
reference (each sampled entry's dot product summed exactly, in Python integers, from the
fp64 inputs). The table shows the times and errors, the speed ratio (time without / time
with), the hook against the kernels (time device / time with), the emulation against cuBLAS
fp64 on the same calls (the "ab" run's largest differences), and the hook's trace records
(count, routes, entry points; of the emulated calls the moduli, the operations and the
median call time from the records; how often the device run's calls were emulated). A framework that is not
installed, or a case whose calls never reach the hook (JAX without the audit library: XLA
resolves cuBLAS with dlsym), says so.

Usage: cublas-apps.py --shim LIB --out DIR [--cases a,b,...]
       cublas-apps.py --case NAME --result FILE      (one measurement, used by the driver)
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from fractions import Fraction

SAMPLES = 16
SEED = 20240607


# Every fp64 value is an integer over 2^1074 at most, so every product of two is an integer
# over 2^2148: the dot products below are summed exactly in Python integers.
SCALE = 1 << 2148


def exact_dot(xs, ys):
    total = 0
    for x, y in zip(xs, ys):
        nx, dx = float(x).as_integer_ratio()
        ny, dy = float(y).as_integer_ratio()
        total += nx * ny * (SCALE // (dx * dy))
    return Fraction(total, SCALE)


def rel_error(got, xs, ys, extra=0.0):
    """|got - (x . y + extra)| / (|x| . |y| + |extra|), the reference exact."""
    want = exact_dot(xs, ys) + Fraction(extra)
    scale = sum(abs(float(x) * float(y)) for x, y in zip(xs, ys)) + abs(extra)
    return float(abs(Fraction(float(got)) - want)) / scale if scale else 0.0


def timed(run, sync):
    if os.environ.get("CUBLAS_APPS_ONCE"):
        # the "ab" run: one call of the operation, for its records' comparisons
        sync()
        t = time.perf_counter()
        out = run()
        sync()
        return time.perf_counter() - t, out
    run()
    sync()
    times = []
    for _ in range(3):
        sync()
        t = time.perf_counter()
        out = run()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def device_gemm():
    """The shim's ozaki_dgemm_device when this is a "device" run (else None), as a function
    of (n, a, b, c, stream) computing the row-major n x n product C = A B of device addresses
    the way CuPy and PyTorch hand it to cuBLAS: column-major C^T = B^T A^T, no transposes.
    Counts its return values (0 emulated, 1 cuBLAS) into DEVICE_RC."""
    shim = os.environ.get("CUBLAS_APPS_DEVICE")
    if not shim:
        return None
    f = ctypes.CDLL(shim).ozaki_dgemm_device
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    f.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, ctypes.c_double, ptr, i64,
                  ptr, i64, ctypes.c_double, ptr, i64, ptr]
    f.restype = ctypes.c_int

    def gemm(n, a, b, c, stream):
        rc = f(b"N", b"N", n, n, n, 1.0, b, n, a, n, 0.0, c, n, stream)
        DEVICE_RC[rc] = DEVICE_RC.get(rc, 0) + 1

    return gemm


DEVICE_RC = {}


def pairs(rows, cols, rng):
    return [(int(rng.integers(rows)), int(rng.integers(cols))) for _ in range(SAMPLES)]


def product_error(a, b, c, rng):
    """Max sampled error of C = A B (host copies)."""
    return max(rel_error(c[i, j], a[i, :], b[:, j]) for i, j in pairs(c.shape[0], c.shape[1], rng))


# ---------------------------------------------------------------------------- cases

def cupy_case(kind, n):
    import cupy as cp
    import numpy as np
    rng = np.random.default_rng(SEED)
    g = cp.random.default_rng(SEED)
    sync = cp.cuda.Device().synchronize
    dev = device_gemm() if kind in ("matmul", "batched") else None

    def through_device(a, b):
        # the same products through ozaki_dgemm_device, on CuPy's current stream
        c = cp.empty_like(a)
        s = cp.cuda.get_current_stream().ptr
        for x, y, z in ((a, b, c),) if a.ndim == 2 else zip(a, b, c):
            dev(n, x.data.ptr, y.data.ptr, z.data.ptr, s)
        return c

    if kind == "matmul":
        a, b = g.standard_normal((n, n)), g.standard_normal((n, n))
        t, c = timed((lambda: through_device(a, b)) if dev else (lambda: a @ b), sync)
        return t, product_error(cp.asnumpy(a), cp.asnumpy(b), cp.asnumpy(c), rng)
    if kind == "batched":
        a, b = g.standard_normal((16, n, n)), g.standard_normal((16, n, n))
        t, c = timed((lambda: through_device(a, b)) if dev else (lambda: cp.matmul(a, b)), sync)
        ah, bh, ch = cp.asnumpy(a), cp.asnumpy(b), cp.asnumpy(c)
        err = max(product_error(ah[m], bh[m], ch[m], rng) for m in (0, 7, 15))
        return t, err
    if kind == "cholesky":
        x = g.standard_normal((n, n))
        spd = x @ x.T / n + cp.eye(n)
        t, l = timed(lambda: cp.linalg.cholesky(spd), sync)
        lh, ah = cp.asnumpy(l), cp.asnumpy(spd)
        # entries of L L^T - A
        err = max(rel_error(ah[i, j], lh[i, :], lh[j, :]) for i, j in pairs(n, n, rng))
        return t, err
    if kind == "solve":
        a = g.standard_normal((n, n)) + n ** 0.5 * cp.eye(n)
        b = g.standard_normal((n, 1))
        t, x = timed(lambda: cp.linalg.solve(a, b), sync)
        ah, bh, xh = cp.asnumpy(a), cp.asnumpy(b), cp.asnumpy(x)
        err = max(rel_error(bh[i, 0], ah[i, :], xh[:, 0]) for i, _ in pairs(n, 1, rng))
        return t, err
    if kind == "qr":
        a = g.standard_normal((n, n))
        t, (q, r) = timed(lambda: cp.linalg.qr(a), sync)
        qh, rh, ah = cp.asnumpy(q), cp.asnumpy(r), cp.asnumpy(a)
        err = max(rel_error(ah[i, j], qh[i, :], rh[:, j]) for i, j in pairs(n, n, rng))
        return t, err
    if kind == "graph":
        # a product captured into a CUDA graph, replayed on new data: right only if the
        # captured call does not freeze a plan made from the capture-time operands
        a, b = g.standard_normal((n, n)), g.standard_normal((n, n))
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            c = a @ b  # warm-up outside the capture (plans, handles)
            s.synchronize()
            s.begin_capture()
            cp.matmul(a, b, out=c)
            graph = s.end_capture()
        a[...] = g.standard_normal((n, n)) * 1e3
        s.synchronize()
        t, _ = timed(lambda: graph.launch(s), s.synchronize)
        return t, product_error(cp.asnumpy(a), cp.asnumpy(b), cp.asnumpy(c), rng)
    raise ValueError(kind)


def torch_case(kind, n, lt=False):
    """torch.matmul / torch.bmm / F.linear (with a bias) in float64; with `lt`, PyTorch asked
    to prefer cuBLASLt for its products (torch.backends.cuda.preferred_blas_library)."""
    import numpy as np
    import torch
    if lt:
        torch.backends.cuda.preferred_blas_library("cublaslt")
    rng = np.random.default_rng(SEED)
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    sync = torch.cuda.synchronize
    shape = (16, n, n) if kind == "bmm" else (n, n)
    a = torch.randn(shape, dtype=torch.float64, device="cuda", generator=gen)
    b = torch.randn(shape, dtype=torch.float64, device="cuda", generator=gen)
    if kind == "linear":
        bias = torch.randn(n, dtype=torch.float64, device="cuda", generator=gen)
        t, c = timed(lambda: torch.nn.functional.linear(a, b, bias), sync)
        ah, bh, ch, biash = a.cpu().numpy(), b.cpu().numpy(), c.cpu().numpy(), bias.cpu().numpy()
        # out = a b^T + bias
        err = max(rel_error(ch[i, j], ah[i, :], bh[j, :], biash[j]) for i, j in pairs(n, n, rng))
        return t, err
    op = torch.bmm if kind == "bmm" else torch.matmul
    dev = device_gemm()
    if dev:
        def op(a, b):
            # the same products through ozaki_dgemm_device, on PyTorch's current stream
            c = torch.empty_like(a)
            s = torch.cuda.current_stream().cuda_stream
            for x, y, z in ((a, b, c),) if a.dim() == 2 else zip(a, b, c):
                dev(n, x.data_ptr(), y.data_ptr(), z.data_ptr(), s)
            return c
    t, c = timed(lambda: op(a, b), sync)
    ah, bh, ch = a.cpu().numpy(), b.cpu().numpy(), c.cpu().numpy()
    if kind == "matmul":
        return t, product_error(ah, bh, ch, rng)
    return t, max(product_error(ah[m], bh[m], ch[m], rng) for m in (0, 15))


def jax_case(n):
    import numpy as np
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    rng = np.random.default_rng(SEED)
    a = jnp.asarray(rng.standard_normal((n, n)))
    b = jnp.asarray(rng.standard_normal((n, n)))
    f = jax.jit(jnp.matmul)
    t, c = timed(lambda: f(a, b).block_until_ready(), lambda: None)
    return t, product_error(np.asarray(a), np.asarray(b), np.asarray(c), rng)


# The cases whose operation has a "device" run: plain products, one ozaki_dgemm_device call
# per product of the same shape (torch-linear's bias epilogue has no such call).
DEVICE_CASES = {"cupy-matmul-4095", "cupy-matmul-4096", "cupy-matmul-8192", "cupy-matmul-16384",
                "torch-matmul-4097",
                "cupy-batched-16x2048", "torch-matmul-8192", "torch-bmm-16x2048",
                "torch-lt-matmul-8192", "torch-lt-bmm-16x2048"}

CASES = {
    "cupy-matmul-4095": lambda: cupy_case("matmul", 4095),
    "cupy-matmul-4096": lambda: cupy_case("matmul", 4096),
    "cupy-matmul-8192": lambda: cupy_case("matmul", 8192),
    "cupy-matmul-16384": lambda: cupy_case("matmul", 16384),
    "cupy-batched-16x2048": lambda: cupy_case("batched", 2048),
    "torch-matmul-4097": lambda: torch_case("matmul", 4097),
    "torch-matmul-8192": lambda: torch_case("matmul", 8192),
    "torch-bmm-16x2048": lambda: torch_case("bmm", 2048),
    "torch-lt-matmul-8192": lambda: torch_case("matmul", 8192, lt=True),
    "torch-lt-bmm-16x2048": lambda: torch_case("bmm", 2048, lt=True),
    "torch-linear-8192": lambda: torch_case("linear", 8192),
    "jax-matmul-8192": lambda: jax_case(8192),
    "cupy-cholesky-8192": lambda: cupy_case("cholesky", 8192),
    "cupy-solve-8192": lambda: cupy_case("solve", 8192),
    "cupy-qr-8192": lambda: cupy_case("qr", 8192),
    "cupy-graph-4096": lambda: cupy_case("graph", 4096),
}


def measure(name, result):
    try:
        t, err = CASES[name]()
        out = {"time_s": t, "error": err}
        if DEVICE_RC:
            out["device_rc"] = {str(k): v for k, v in sorted(DEVICE_RC.items())}
    except ImportError as e:
        out = {"missing": str(e)}
    with open(result, "w") as f:
        json.dump(out, f)


# ---------------------------------------------------------------------------- driver

def hook_records(trace):
    """The trace's device-resident records summed up: count, routes and entry points (name:
    count), and of the emulated ones the moduli counts, the operations (transa transb) and
    the median call time (dur_ns, ms); ab: records compared, largest rel_scaled, largest
    max_rel_comp and the skip reasons under OZAKI_AB."""
    h = {"n": 0, "routes": {}, "syms": {}, "moduli": set(), "ops": set(), "ms": [],
         "ab": [0, 0.0, 0.0, []]}
    if os.path.exists(trace):
        with open(trace) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") != "call" or not r.get("device_resident"):
                    continue
                h["n"] += 1
                h["routes"][r["route"]] = h["routes"].get(r["route"], 0) + 1
                h["syms"][r["sym"]] = h["syms"].get(r["sym"], 0) + 1
                if r["route"] == "gpu-ozaki":
                    if r.get("moduli"):
                        h["moduli"].add(r["moduli"])
                    h["ops"].add(f"{r.get('transa', '?')}{r.get('transb', '?')}")
                    if r.get("dur_ns"):
                        h["ms"].append(r["dur_ns"] / 1e6)
                c, ab = r.get("ab"), h["ab"]
                if c and c.get("skipped"):
                    ab[3].append(c["skipped"])
                elif c:
                    ab[0] += 1
                    ab[1] = max(ab[1], float(c.get("rel_scaled") or 0))
                    ab[2] = max(ab[2], float(c["max_rel_comp"]))
    h["moduli"], h["ops"] = sorted(h["moduli"]), sorted(h["ops"])
    h["ms"] = statistics.median(h["ms"]) if h["ms"] else None
    return h


def ab_setting():
    v = os.environ.get("GPU_CHECK_CUBLAS_AB", "1")
    return None if v in ("", "0") else v


def sides(name):
    """The runs of a case: (side, env changes), see the module doc."""
    out = [("without", None), ("with", {})]
    if name in DEVICE_CASES:
        out.append(("device", {"device": True}))
    if ab_setting():
        out.append(("ab", {"OZAKI_AB": ab_setting(), "CUBLAS_APPS_ONCE": "1",
                           "OZAKI_AB_MAX_MB": os.environ.get("GPU_CHECK_CUBLAS_AB_MAX_MB",
                                                             "32768")}))
    return out


def audit_lib(shim):
    """libozaki_audit.so beside the shim, unless GPU_CHECK_CUBLAS_AUDIT=0 or it is absent."""
    lib = os.path.join(os.path.dirname(shim), "libozaki_audit.so")
    if os.environ.get("GPU_CHECK_CUBLAS_AUDIT", "1") == "0" or not os.path.exists(lib):
        return None
    return lib


def run_case(name, shim, out):
    res = {}
    audit = audit_lib(shim)
    for side, extra in sides(name):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.pop("LD_AUDIT", None)
        result = os.path.join(out, f"{name}.{side}.json")
        trace = os.path.join(out, f"{name}.{side}.trace.jsonl")
        if extra is not None:
            env["LD_PRELOAD"] = shim
            if audit:
                env["LD_AUDIT"] = audit
            env["OZAKI_ROUTE"] = os.environ.get("GPU_CHECK_CUBLAS_ROUTE", "auto")
            env["OZAKI_TRACE"] = trace
            for k, v in extra.items():
                if k == "device":
                    env["CUBLAS_APPS_DEVICE"] = shim
                else:
                    env[k] = v
            if os.path.exists(trace):
                os.remove(trace)
        try:
            p = subprocess.run([sys.executable, __file__, "--case", name, "--result", result],
                               env=env, capture_output=True, text=True,
                               timeout=int(os.environ.get("GPU_CHECK_CUBLAS_TIMEOUT", "300")))
            if p.returncode != 0:
                res[side] = {"failed": (p.stderr or p.stdout).strip().splitlines()[-1:]}
            else:
                with open(result) as f:
                    res[side] = json.load(f)
            if p.stderr.strip():
                with open(os.path.join(out, f"{name}.{side}.stderr"), "w") as f:
                    f.write(p.stderr)
        except subprocess.TimeoutExpired:
            res[side] = {"failed": ["timeout"]}
        if extra is not None:
            res[side]["hook"] = hook_records(trace)
    return res


def emulated(h):
    """What a run's emulated records say: moduli, operations, median call time."""
    parts = []
    if h["moduli"]:
        parts.append(f"moduli {'/'.join(map(str, h['moduli']))}")
    if h["ops"]:
        parts.append(f"ops {'/'.join(h['ops'])}")
    if h["ms"] is not None:
        parts.append(f"call {h['ms']:.2f} ms")
    return ", ".join(parts)


def hook_column(r):
    h = r["with"].get("hook")
    if not h or not h["n"]:
        return "not reached"
    text = (f"{h['n']} ({', '.join(f'{k} {v}' for k, v in sorted(h['routes'].items()))}; "
            f"{', '.join(f'{k} {v}' for k, v in sorted(h['syms'].items()))})")
    if emulated(h):
        text += f"; {emulated(h)}"
    dev = r.get("device", {})
    if dev.get("device_rc"):
        # ozaki_dgemm_device writes no trace record; its return values say what ran
        text += f"; device returned {dev['device_rc']} (0 emulated, 1 cuBLAS)"
    return text


def ab_column(r):
    a = r.get("ab")
    if a is None:
        return "not run"
    if "failed" in a:
        return f"failed: {' '.join(a['failed'])}"
    if "missing" in a:
        return "-"
    ab = a["hook"]["ab"]
    if not ab[0] and not ab[3]:
        return "nothing emulated"
    text = f"{ab[0]} compared: max rel_scaled {ab[1]:.2e}, componentwise {ab[2]:.2e}"
    if ab[3]:
        text += f"; {len(ab[3])} skipped {sorted(set(ab[3]))[:2]}"
    return text


def row(name, r):
    w, s = r["without"], r["with"]
    hook = hook_column(r)
    for side in (w, s):
        if "missing" in side:
            return f"| {name} | not installed: {side['missing']} | | | | | | | | |"
        if "failed" in side:
            return f"| {name} | failed: {' '.join(side['failed'])} | | | | | | | | {hook} |"
    ratio = w["time_s"] / s["time_s"]
    d = r.get("device")
    if d is None:
        dev = "- | -"
    elif "time_s" in d:
        dev = f"{d['time_s']:.4f} (error {d['error']:.1e}) | {d['time_s'] / s['time_s']:.2f}x"
    else:
        dev = f"failed: {' '.join(d.get('failed', ['?']))} | -"
    return (f"| {name} | {w['time_s']:.4f} | {s['time_s']:.4f} | {ratio:.2f}x | {dev} | "
            f"{w['error']:.2e} | {s['error']:.2e} | {ab_column(r)} | {hook} |")


def imports_report():
    """Which cuBLAS and cuBLASLt entry points the frameworks' GPU libraries import (undefined
    dynamic symbols): only those calls can reach a preloaded library; a library that imports
    none resolves cuBLAS with dlsym."""
    import importlib.util
    import glob
    found = []
    for pkg, pattern in (("torch", "lib/libtorch_cuda.so"),
                         ("jax_plugins", "*/xla_cuda_plugin.so"),
                         ("jaxlib", "**/xla_cuda_plugin.so")):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        roots = list(spec.submodule_search_locations or []) if spec else []
        for root in roots:
            found += glob.glob(os.path.join(root, pattern), recursive=True)
    # cuBLAS itself: a cublasLt* entry point it imports is one its own calls (the shim's
    # included) make through the dynamic linker, where the hook would see them
    p = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    found += [l.split()[-1] for l in p.stdout.splitlines() if "libcublas.so.13 " in l][:1]
    for lib in sorted(set(found)):
        p = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True)
        names = sorted({l.split()[-1].split("@")[0] for l in p.stdout.splitlines()
                        if l.split() and l.split()[-1].startswith("cublas")})
        fp64 = [x for x in names if x.startswith(("cublasD", "cublasGemm", "cublasLtMatmul"))
                and not x.startswith("cublasLtMatmulDesc")]
        print(f"imports of {lib}: {len(names)} cublas* symbols; "
              f"fp64-relevant: {', '.join(fp64) if fp64 else 'none'}")


def drive(shim, out, cases):
    os.makedirs(out, exist_ok=True)
    print("| program | without s | with s | ratio | device s | with vs device | error without | "
          "error with | emulation vs cuBLAS (OZAKI_AB) | hook records |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for name in cases:
        results[name] = run_case(name, shim, out)
        print(row(name, results[name]), flush=True)
    with open(os.path.join(out, "cublas-apps.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("errors: max |computed - exact| / (|a| . |b|) over "
          f"{SAMPLES} sampled entries (cholesky/qr: of the factors' product against A; "
          "solve: of the residual rows); device: the same products through ozaki_dgemm_device, "
          "with vs device = device time / with time (1.00x: the hook at the kernels' speed); "
          "emulation vs cuBLAS: the OZAKI_AB run's largest differences from cuBLAS fp64 on the "
          "same calls (rel_scaled: ||C - C_cublas||_F / (|alpha| ||A||_F ||B||_F + |beta| "
          "||C||_F)); hook records: device-resident trace records, routes, entry points; of "
          "the emulated ones moduli, operations (transa transb) and median call time; the "
          "device run's return values")
    imports_report()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shim")
    ap.add_argument("--out", default="/tmp/cublas-apps")
    ap.add_argument("--cases", default=os.environ.get("GPU_CHECK_CUBLAS_CASES", ",".join(CASES)))
    ap.add_argument("--case")
    ap.add_argument("--result")
    a = ap.parse_args()
    if a.case:
        measure(a.case, a.result)
    else:
        drive(os.path.abspath(a.shim), a.out, [c for c in a.cases.split(",") if c])


if __name__ == "__main__":
    main()
