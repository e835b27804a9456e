#!/bin/sh
# The cuda backend on an NVIDIA GPU (scripts/gpu_check.py says what it checks). NOT yet run on
# hardware. Run from anywhere; it works in the repository root.
#
#   sh scripts/gpu_check.sh --probe     versions and one kernel launch: under 60 s in all
#   sh scripts/gpu_check.sh             every check: under 5 minutes in all
#   sh scripts/gpu_check.sh --dry-run   the same code without a GPU (numba-cuda's simulator,
#                                       tiny models; timings meaningless), as the tests run it
#
#   PYTHON   the interpreter (default python3). Name it by its real path, e.g.
#            PYTHON=/opt/torch/.venv/bin/python3: a symlink to a venv's interpreter loses the
#            venv (it then finds none of the venv's packages).
#   OUT      where gpu_check.json goes (default: a new temporary directory, printed at the end)
#
# Everything -- nvidia-smi included -- runs under ONE timeout (55 s with --probe, 295 s
# otherwise), so a hang costs at most that. Exit status: 0 every check ok, 1 a check failed,
# 2 bad arguments, 124 the timeout struck (gpu_check.json then holds every finished check).
# GPU_CHECK_TIMEOUT=S replaces the timeout (the tests use it to see a hang stopped).
set -u
if [ -z "${GPU_CHECK_INNER:-}" ]; then
    limit=295
    for a in "$@"; do
        case "$a" in
            --probe) limit=55 ;;
            --dry-run|-h|--help) ;;
            *) echo "gpu_check.sh: unknown argument '$a' (use --probe, --dry-run)" >&2; exit 2 ;;
        esac
    done
    limit="${GPU_CHECK_TIMEOUT:-$limit}"
    case "$limit" in
        ''|*[!0-9]*) echo "gpu_check.sh: GPU_CHECK_TIMEOUT must be whole seconds, got '$limit'" >&2
                     exit 2 ;;
    esac
    if ! command -v timeout >/dev/null 2>&1; then
        echo "gpu_check.sh: needs timeout(1) (coreutils) to bound the run" >&2
        exit 2
    fi
    PY="${PYTHON:-python3}"
    if ! command -v "$PY" >/dev/null 2>&1; then
        echo "gpu_check.sh: no Python interpreter '$PY' (set PYTHON to one)" >&2
        exit 2
    fi
    if [ -z "${OUT:-}" ]; then
        OUT="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")" || exit 2
    fi
    mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ] || {
        echo "gpu_check.sh: cannot write to OUT=$OUT" >&2; exit 2; }
    GPU_CHECK_INNER=1 PYTHON="$PY" OUT="$OUT" timeout -k 5 "$limit" sh "$0" "$@"
    rc=$?
    [ "$rc" -eq 124 ] && echo "gpu_check.sh: stopped by the ${limit} s timeout" >&2
    echo "gpu_check.sh: results in $OUT/gpu_check.json (exit $rc)"
    exit "$rc"
fi

cd "$(dirname "$0")/.." || exit 2
unset NUMBA_ENABLE_CUDASIM CUPY_TF32         # a GPU run; no TF32 in CuPy's cuBLAS calls
echo "interpreter: $PYTHON ($(command -v "$PYTHON"))"
"$PYTHON" -c 'import sys; print("python", sys.version.split()[0])'
case " $* " in
    *" --dry-run "*) echo "nvidia-smi: not run (--dry-run)" ;;
    *) nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
           || echo "nvidia-smi: failed (exit $?)" ;;
esac
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" scripts/gpu_check.py --out "$OUT" "$@"
