# Shared by the scripts/capture-* commands (sourced, not run): builds the shim, runs one
# program under it with a trace, compresses the trace into traces/ and prints its statistics.
#
# Each capture is deterministic in its inputs (fixed seeds, fixed sizes); call counts can
# still move a little with library versions (iteration counts, blocking), which the
# FLOP-weighted statistics are robust to (traces/README.md).

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$ROOT/target/capture"
mkdir -p "$WORK" "$ROOT/traces"

# Debian packages a capture needs; installed only when missing (needs root, as in CI).
need_apt() {
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if ((${#missing[@]})); then
        echo "capture: installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# The shim and the ozaki CLI, release build.
build_shim() {
    (cd "$ROOT" && cargo build --release -q -p ozaki-shim -p ozaki-cli)
    SHIM="$ROOT/target/release/libozaki_shim.so"
    OZAKI="$ROOT/target/release/ozaki"
}

# Reference BLAS/LAPACK for this process only, whatever the system default is: reference
# LAPACK calls dgemm_ through the PLT, so its internal GEMMs are visible (OpenBLAS's are not).
REFERENCE_LIBS="/usr/lib/x86_64-linux-gnu/blas:/usr/lib/x86_64-linux-gnu/lapack"

# A committed trace names no folder of the capturing machine: paths under the repository
# become relative to it, paths under the home folder start with ~/ and paths under the
# temporary folder with $TMPDIR/ (system paths such as /usr/bin/python3 stay;
# shim/tests/app_traces.rs checks the committed traces).
portable_paths() {
    python3 - "$1" "$ROOT" "${HOME:-}" "${TMPDIR:-/tmp}" <<'PY'
import sys
path, root, home, tmp = sys.argv[1:5]
prefixes = [(root.rstrip("/") + "/", ""), (tmp.rstrip("/") + "/", "$TMPDIR/")]
if home.rstrip("/"):
    prefixes.append((home.rstrip("/") + "/", "~/"))
with open(path) as f:
    for line in f:
        for old, new in prefixes:
            line = line.replace('"' + old, '"' + new)
        sys.stdout.write(line)
PY
}

# capture NAME CMD...: runs CMD with the shim preloaded, writes traces/NAME.jsonl.gz and
# prints the statistics. LD_LIBRARY_PATH from the caller's environment is kept.
capture() {
    local name="$1"
    shift
    local raw="$WORK/$name.jsonl"
    rm -f "$raw"
    echo "capture $name: $*" >&2
    local t0=$SECONDS
    env LD_PRELOAD="$SHIM" OZAKI_TRACE="$raw" OZAKI_ROUTE=vendor "$@"
    echo "capture $name: $((SECONDS - t0)) s" >&2
    portable_paths "$raw" | gzip -9 -n -c >"$ROOT/traces/$name.jsonl.gz"
    rm -f "$raw"
    "$OZAKI" report "$ROOT/traces/$name.jsonl.gz" --out "$WORK/$name-report" --title "$name" --profile "$ROOT/profiles/h200.json"
}
