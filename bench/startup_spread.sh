#!/bin/sh
# startup_spread.sh - starts the small-model bench N times (default 20) as fresh processes and reports the spread of
# their warm medians. One slow process in a few is the mark of two thread pools spinning on the same cores (OpenMP's
# and a pthread OpenBLAS's): cattr links the single-threaded OpenBLAS so that there is one pool.
#
#   sh bench/startup_spread.sh [N] [CASE]      (from the repository root, after scripts/build.sh)
#
# CASE defaults to the golden CNN's IG (20 Gauss-Legendre steps). Each process runs the attribution 200 times
# (`cattr replay --runs 200`) and prints its warm median. The same N processes are then started with the pthread
# OpenBLAS put first on the library path (LD_LIBRARY_PATH overrides the binary's run path), for comparison, when it
# is installed. As for every bench here, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for what is timed.
# Done when: every warm median of the build as it is lies within 2x of the fastest.
set -eu
N=${1:-20}
GOLDEN=${CATTR_GOLDEN:-../shared/golden}
CASE=${2:-$GOLDEN/captum/custom_cnn__IntegratedGradients_gausslegendre}
CATTR=${CATTR:-build/cattr}
[ -x "$CATTR" ] || { echo "startup_spread: $CATTR not built (sh scripts/build.sh)" >&2; exit 2; }
[ -d "$CASE" ] || { echo "startup_spread: no case at $CASE (set CATTR_GOLDEN)" >&2; exit 2; }
PTHREAD_DIR=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/openblas-pthread

series() { # $1 label, $2 LD_LIBRARY_PATH ('' for none)
    out=$(mktemp)
    i=0
    while [ "$i" -lt "$N" ]; do
        if [ -n "$2" ]; then
            env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE LD_LIBRARY_PATH="$2" "$CATTR" replay "$CASE" --runs 200
        else
            env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$CATTR" replay "$CASE" --runs 200
        fi 2>&1 | sed -n 's/.*warm_median=\([0-9.eE+-]*\).*/\1/p' >>"$out"
        i=$((i + 1))
    done
    awk -v label="$1" -v n="$N" '
        { v[NR] = $1 }
        END {
            if (NR != n) { printf "%-28s %d of %d processes printed a time\n", label, NR, n; exit 1 }
            mn = v[1]; mx = v[1]
            for (i = 1; i <= NR; i++) { if (v[i] < mn) mn = v[i]; if (v[i] > mx) mx = v[i] }
            slow = 0
            for (i = 1; i <= NR; i++) if (v[i] > 2 * mn) slow++
            printf "%-28s fastest %8.3f ms  slowest %8.3f ms  ratio %6.2f  beyond 2x: %d of %d\n",
                   label, mn * 1e3, mx * 1e3, mx / mn, slow, NR
            if (label ~ /as built/ && slow > 0) exit 3
        }' "$out"
    rc=$?
    rm -f "$out"
    return $rc
}

echo "case: $(basename "$CASE"); $N processes each, warm median of 200 runs; $(nproc) cores"
status=0
series "single pool (as built)" "" || status=$?
if [ -e "$PTHREAD_DIR/libopenblas.so.0" ]; then
    series "pthread OpenBLAS beside" "$PTHREAD_DIR" || true
fi
exit $status
