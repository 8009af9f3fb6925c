#!/bin/sh
# MPI driver: ScaLAPACK pdgemm/pdgetrf on several MPI ranks with and without the shim.
#
# Usage: tests/mpi/run.sh OZAKI BUILD_DIR [RANKS...]      (default ranks: 2 4)
#   OZAKI      the `ozaki` executable (libozaki_shim.so next to it)
#   BUILD_DIR  where `make -C tests/mpi BUILD=BUILD_DIR` put the programs
# Environment: MPIRUN (default "mpirun --oversubscribe --allow-run-as-root ...": CI runs as
#   root on 2 cores), N and NB (matrix order and block, default 256 and 32), STEP_TIMEOUT
#   (seconds per mpirun, default 300), KEEP=1 keeps the work directory.
#
# For every program and rank count it checks:
#   1. the program alone prints OK (its own exact / residual checks);
#   2. `mpirun -n R ozaki run --trace T-%r.jsonl -- PROG` prints the same fingerprints, bit for
#      bit, and leaves one trace per rank whose header names that rank and which holds dgemm
#      calls (the shim really ran in every rank);
#   3. the same for `ozaki run --trace T-%r.jsonl -- mpirun -n R PROG` (the preload has to
#      cross mpirun);
#   4. negative control: a preloaded dgemm_ that flips one bit changes the fingerprints, so
#      the comparison can fail and the preload reaches the ranks.
# Once, on 2 ranks: `ozaki run -- mpirun` with a user `-x VAR` and with
# OMPI_MCA_mca_base_env_list set (Open MPI refuses to mix the two methods); the arguments and
# env list `ozaki run` gives an Open MPI launcher (seen through a stand-in mpirun); a trace
# name without %r becoming one file per rank; and
# `ozaki summary` over a set of rank traces.
# Prints "ok: ..." / "FAIL: ..." lines; exits 1 if anything failed.
set -u

if [ $# -lt 2 ]; then
    sed -n '2,10p' "$0" >&2
    exit 2
fi
OZAKI=$1
BUILD=$2
shift 2
RANKS=${*:-2 4}
# vader's CMA single-copy needs ptrace rights that containers often deny; copy-in/out works.
MPIRUN=${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none}
# A hung job (a rank that died without MPI noticing) fails its step instead of the whole CI.
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
N=${N:-256}
NB=${NB:-32}
# The runs must not inherit a trace, route, preload or env list from the caller's shell.
for v in $(env | grep -o '^OZAKI_[A-Za-z0-9_]*='); do unset "${v%=}"; done
unset LD_PRELOAD OMPI_MCA_mca_base_env_list
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ozaki-mpi.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# run NAME CMD...: runs CMD with stdout/stderr in $WORK/NAME.{out,err}; on a non-zero exit
# prints both and returns 1.
run() {
    name=$1
    shift
    timeout "$STEP_TIMEOUT" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    status=$?
    if [ "$status" != 0 ]; then
        fail "$name: exit status $status from: $*"
        sed 's/^/  | /' "$WORK/$name.out" "$WORK/$name.err" | tail -n 30
        return 1
    fi
}

# same_fingerprints BASE NAME: the fingerprint lines of NAME equal those of BASE.
same_fingerprints() {
    grep '^fingerprint' "$WORK/$1.out" >"$WORK/$1.fp"
    grep '^fingerprint' "$WORK/$2.out" >"$WORK/$2.fp"
    if [ ! -s "$WORK/$1.fp" ]; then
        fail "$1: no fingerprint printed"
    elif cmp -s "$WORK/$1.fp" "$WORK/$2.fp"; then
        echo "ok: $2: results bit-identical to $1"
    else
        fail "$2: results differ from $1:"
        diff "$WORK/$1.fp" "$WORK/$2.fp" | sed 's/^/  | /'
    fi
}

# rank_traces PREFIX R: files PREFIX-0.jsonl .. PREFIX-(R-1).jsonl exist, each header names
# its rank, and each holds at least one dgemm call record.
rank_traces() {
    r=0
    bad=0
    while [ "$r" -lt "$2" ]; do
        f="$1-$r.jsonl"
        if [ ! -s "$f" ]; then
            fail "$(basename "$1"): no trace for rank $r ($f); present: $(ls "$(dirname "$1")" | grep jsonl | tr '\n' ' ')"
            bad=1
        elif ! grep -m1 '"type":"header"' "$f" | grep -q "\"rank\":$r[,}]"; then
            fail "$f: header does not name rank $r: $(grep -m1 '"type":"header"' "$f")"
            bad=1
        elif ! grep -q '"routine":"dgemm"' "$f"; then
            fail "$f: no dgemm call recorded"
            bad=1
        fi
        r=$((r + 1))
    done
    [ "$bad" = 1 ] || echo "ok: $(basename "$1"): one trace per rank (0..$(($2 - 1))), each naming its rank"
}

for prog in pdgemm_test pdgetrf_test; do
    for r in $RANKS; do
        base="$prog-$r-plain"
        run "$base" $MPIRUN -n "$r" "$BUILD/$prog" "$N" "$NB" || continue
        grep '^fingerprint' "$WORK/$base.out" >"$WORK/$base.fp"
        if grep -qx OK "$WORK/$base.out"; then echo "ok: $base: $(grep '^check' "$WORK/$base.out" | tr '\n' ' ')"; else fail "$base: no OK"; fi

        inner="$prog-$r-mpirun-ozaki"
        if run "$inner" $MPIRUN -n "$r" "$OZAKI" run --trace "$WORK/$inner-%r.jsonl" -- "$BUILD/$prog" "$N" "$NB"; then
            same_fingerprints "$base" "$inner"
            rank_traces "$WORK/$inner" "$r"
        fi

        outer="$prog-$r-ozaki-mpirun"
        if run "$outer" "$OZAKI" run --trace "$WORK/$outer-%r.jsonl" -- $MPIRUN -n "$r" "$BUILD/$prog" "$N" "$NB"; then
            same_fingerprints "$base" "$outer"
            rank_traces "$WORK/$outer" "$r"
        fi

        control="$prog-$r-perturbed"
        LD_PRELOAD="$BUILD/libperturb.so" timeout "$STEP_TIMEOUT" $MPIRUN -n "$r" "$BUILD/$prog" "$N" "$NB" >"$WORK/$control.out" 2>"$WORK/$control.err"
        grep '^fingerprint' "$WORK/$control.out" >"$WORK/$control.fp"
        if [ -s "$WORK/$control.fp" ] && ! cmp -s "$WORK/$base.fp" "$WORK/$control.fp"; then
            echo "ok: $control: a one-bit change in dgemm_ changes the fingerprints"
        else
            fail "$control: a preloaded one-bit change went unnoticed (preload lost, or comparison blind)"
        fi
    done
done

# Launcher options that must survive `ozaki run -- mpirun` (2 ranks, pdgemm).
prog=pdgemm_test
name="$prog-2-user-x"
if run "$name" "$OZAKI" run --trace "$WORK/$name-%r.jsonl" -- $MPIRUN -x OZAKI_MPI_TEST=1 -n 2 "$BUILD/$prog" "$N" "$NB"; then
    same_fingerprints "$prog-2-plain" "$name"
    rank_traces "$WORK/$name" 2
fi
name="$prog-2-env-list"
if run "$name" env OMPI_MCA_mca_base_env_list=OZAKI_MPI_TEST=1 \
    "$OZAKI" run --trace "$WORK/$name-%r.jsonl" -- $MPIRUN -n 2 "$BUILD/$prog" "$N" "$NB"; then
    same_fingerprints "$prog-2-plain" "$name"
    rank_traces "$WORK/$name" 2
fi

# A trace name without %r or %p: `ozaki run` makes it one file per rank (NAME-%r.jsonl)
# rather than letting the ranks overwrite one file, in both orders.
name="$prog-2-no-r-outer"
if run "$name" "$OZAKI" run --trace "$WORK/$name.jsonl" -- $MPIRUN -n 2 "$BUILD/$prog" "$N" "$NB"; then
    same_fingerprints "$prog-2-plain" "$name"
    rank_traces "$WORK/$name" 2
fi
name="$prog-2-no-r-inner"
if run "$name" $MPIRUN -n 2 "$OZAKI" run --trace "$WORK/$name.jsonl" -- "$BUILD/$prog" "$N" "$NB"; then
    same_fingerprints "$prog-2-plain" "$name"
    rank_traces "$WORK/$name" 2
fi

# What `ozaki run` hands an Open MPI launcher: a stand-in `mpirun` that answers --version like
# Open MPI and prints its arguments and env list, so the forwarding that only matters for
# ranks on other hosts is visible on one host.
mkdir -p "$WORK/fake"
cat >"$WORK/fake/mpirun" <<'FAKE'
#!/bin/sh
[ "$1" = --version ] && { echo "mpirun (Open MPI) 4.1.4"; exit 0; }
echo "argv: $*"
echo "env_list: ${OMPI_MCA_mca_base_env_list-unset}"
FAKE
chmod +x "$WORK/fake/mpirun"
# launcher_check NAME WHAT ARGV ENV_LIST CMD...: CMD ran the stand-in mpirun, which saw the
# arguments ARGV and the env list ENV_LIST.
launcher_check() {
    name=$1 what=$2 argv=$3 list=$4
    shift 4
    if run "$name" "$@" && grep -qx "argv: $argv" "$WORK/$name.out" &&
        grep -qx "env_list: $list" "$WORK/$name.out"; then
        echo "ok: $what"
    else
        fail "$what: expected 'argv: $argv' and 'env_list: $list':"
        sed 's/^/  | /' "$WORK/$name.out"
    fi
}
# `ozaki run` also sets the vendor's spin (OPENBLAS_THREAD_TIMEOUT, OZAKI_VENDOR_SPIN) and
# forwards it; with OZAKI_VENDOR_SPIN=keep it sets none, and forwards the setting itself (as
# every OZAKI_* variable).
launcher_check fake-x "ozaki run -- mpirun: -x for ranks on other hosts" \
    "-x LD_PRELOAD -x OPENBLAS_THREAD_TIMEOUT -x OZAKI_TRACE -n 2 ./prog" unset \
    env -u OPENBLAS_THREAD_TIMEOUT "$OZAKI" run --no-summary -- "$WORK/fake/mpirun" -n 2 ./prog
launcher_check fake-keep "ozaki run -- mpirun with OZAKI_VENDOR_SPIN=keep: no timeout set or forwarded" \
    "-x LD_PRELOAD -x OZAKI_TRACE -x OZAKI_VENDOR_SPIN -n 2 ./prog" unset \
    env -u OPENBLAS_THREAD_TIMEOUT OZAKI_VENDOR_SPIN=keep "$OZAKI" run --no-summary -- "$WORK/fake/mpirun" -n 2 ./prog
launcher_check fake-list "ozaki run -- mpirun with mca_base_env_list set: the list extended, no -x" \
    "-n 2 ./prog" "FOO;LD_PRELOAD;OPENBLAS_THREAD_TIMEOUT;OZAKI_TRACE" \
    env -u OPENBLAS_THREAD_TIMEOUT OMPI_MCA_mca_base_env_list=FOO "$OZAKI" run --no-summary -- "$WORK/fake/mpirun" -n 2 ./prog

# `ozaki summary` merges rank traces: totals over all ranks, and one row per rank.
set -- "$WORK/$prog-2-ozaki-mpirun-"*.jsonl
if [ -s "$1" ]; then
    if run summary "$OZAKI" summary "$@"; then
        want=$(cat "$@" | grep -c '"type":"call"')
        rows=$(sed -n '/^Per MPI rank:/,/^$/p' "$WORK/summary.out" | grep -cE '^ +[0-9]+ ')
        if grep -q "^Total: $want calls" "$WORK/summary.out" && [ "$rows" = "$#" ]; then
            echo "ok: ozaki summary of $# rank traces: all $want calls, one row per rank"
        else
            fail "ozaki summary of $# rank traces: want 'Total: $want calls' and $# per-rank rows, got $rows rows:"
            sed 's/^/  | /' "$WORK/summary.out" | head -n 40
        fi
    fi
fi

[ "$FAILED" = 0 ] && echo "all MPI checks passed" || echo "some MPI checks FAILED (work dir: $WORK)"
exit "$FAILED"
