#!/bin/sh
# Parallel efficiency of one language-model LayerIG call split over MPI ranks (`cattr explain-llm --split steps`):
# 1 rank against N ranks, THREADS threads per rank, the same chunks of steps (--internal-batch-size), whole runs
# (mpirun, MPI start, the checkpoint loaded on every rank included) and the attribution part alone (the command's
# "--runs"-free timing is not available under --split, so "run" is the whole run minus a run with 1 step); medians of
# REPS alternating rounds; the JSON outputs are compared byte for byte.
#
#   sh bench/mpi_split_llm.sh [CHECKPOINT_DIR] [STEPS] [CHUNK_ROWS] [RANKS] [REPS] [THREADS]
#
# Defaults: the Qwen3-0.6B-shape random checkpoint of bench/llm_qwen3_shape.py (/tmp/cattr-qwen3-0.6b-random), 256
# steps in chunks of 16 rows, 42 prompt ids and one target id, 2 ranks, 3 rounds, 1 thread per rank. Needs a build
# with MPI and mpirun. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every timed command.
set -eu
cd "$(dirname "$0")/.."
ck=${1:-/tmp/cattr-qwen3-0.6b-random}
steps=${2:-256}
ibs=${3:-16}
ranks=${4:-2}
reps=${5:-3}
threads=${6:-1}
cattr=${CATTR:-build/cattr}
command -v mpirun >/dev/null || { echo "mpi_split_llm: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
[ -d "$ck" ] || { echo "mpi_split_llm: no checkpoint folder '$ck' (python3 bench/llm_qwen3_shape.py writes one)" >&2; exit 2; }
. bench/mpi_lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids=$(awk 'BEGIN { srand(1); for (k = 0; k < 42; k++) printf "%s%d", (k ? "," : ""), 3 + int(rand() * 997) }')
run() { # ranks steps output -> seconds
    rm -f "$3"
    t0=$(now)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" mpirun $root --oversubscribe --bind-to none \
        -n "$1" "$cattr" explain-llm "$ck" --prompt-ids "$ids" --target-ids 17 --steps "$2" --internal-batch-size "$ibs" \
        --split steps --output "$3" -q 2>/dev/null
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
: >"$tmp/t1"
: >"$tmp/tn"
: >"$tmp/t0"
r=0
while [ $r -lt "$reps" ]; do
    run 1 "$steps" "$tmp/one.json" >>"$tmp/t1"
    run "$ranks" "$steps" "$tmp/many.json" >>"$tmp/tn"
    run 1 1 "$tmp/fixed.json" >>"$tmp/t0"
    cmp -s "$tmp/one.json" "$tmp/many.json" || { echo "mpi_split_llm: $ranks ranks wrote another file than one" >&2; exit 1; }
    r=$((r + 1))
done
e1=$(med <"$tmp/t1"); en=$(med <"$tmp/tn"); e0=$(med <"$tmp/t0")
echo "checkpoint $ck, LayerIG $steps steps in chunks of $ibs rows, 42 prompt ids, one target, $threads thread(s) per rank, medians of $reps"
printf 'end to end: 1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$e1" "$ranks" "$en" "$(eff "$e1" "$en")"
r1=$(awk -v a="$e1" -v b="$e0" 'BEGIN { print a - b }'); rn=$(awk -v a="$en" -v b="$e0" 'BEGIN { print a - b }')
printf 'run (minus a 1-step run, %.2f s): 1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$e0" "$r1" "$ranks" "$rn" "$(eff "$r1" "$rn")"
echo "outputs byte-identical: yes"
