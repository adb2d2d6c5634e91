#!/bin/sh
# Parallel efficiency of one attribution split over MPI ranks (`cattr explain --split steps|features|samples`): 1 rank
# against N ranks, one thread per rank (OMP_NUM_THREADS=1), the same chunks of steps (--internal-batch-size), whole
# runs (mpirun, MPI start, model load included); efficiency = t(1) / (N * t(N)); medians of REPS alternating rounds.
# Also checks that the outputs are byte-identical.
#
#   sh bench/mpi_split.sh [MODEL.onnx] [STEPS] [CHUNK_ROWS] [RANKS] [REPS]
#   METHOD=shapley-value-sampling sh bench/mpi_split.sh MODEL.onnx N_SAMPLES PER_EVAL [RANKS] [REPS]
#   METHOD=feature-ablation sh bench/mpi_split.sh MODEL.onnx - PER_EVAL [RANKS] [REPS]
#
# With METHOD (a perturbation or surrogate method), the split is --split features or samples: STEPS is then
# --n-samples (the sampling methods; '-' for the others), CHUNK_ROWS --perturbations-per-eval, and EXTRA holds more
# options (e.g. EXTRA="--sliding-window 3,8,8 --strides 3,8,8" for occlusion, or a --feature-mask; with
# --noise-tunnel in EXTRA the tunnel's samples are split).
#
# Defaults: the bundled digits CNN, 4096 steps in chunks of 64 rows, one random example, 2 ranks, 3 rounds (use a
# larger model, e.g. bench/architectures.py's exports in /tmp/arch, for a realistic cost per step). Needs a build with
# MPI, mpirun and numpy. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every timed command.
set -eu
cd "$(dirname "$0")/.."
model=${1:-models/digits/digits.onnx}
steps=${2:-4096}
ibs=${3:-64}
ranks=${4:-2}
reps=${5:-3}
cattr=${CATTR:-build/cattr}
method=${METHOD:-integrated-gradients}
case $method in
integrated-gradients) kind=steps; opts="--steps $steps --internal-batch-size $ibs" ;;
feature-ablation | feature-permutation | occlusion) kind=features; opts="--perturbations-per-eval $ibs" ;;
*) kind=samples; opts="--n-samples $steps --perturbations-per-eval $ibs" ;;
esac
opts="--method $method $opts ${EXTRA:-}"
case " ${EXTRA:-} " in *" --noise-tunnel "*) kind=samples ;; esac # a tunnel splits its samples
command -v mpirun >/dev/null || { echo "mpi_split: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
. bench/mpi_lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=$("$cattr" info "$model" | awk '/^inputs:/ { getline; print; exit }' | grep -o '\[.*\]' | tr -d '[] ')
/usr/bin/python3 -c "
import numpy as np
dims = [int(d) for d in '$shape'.split(',')[1:]]
np.save('$tmp/x.npy', np.random.default_rng(0).random([1] + dims, dtype=np.float32))"
run() { # ranks output -> seconds
    rm -f "$2"
    t0=$(now)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 mpirun $root --oversubscribe -n "$1" \
        "$cattr" explain "$model" --input "$tmp/x.npy" $opts --split $kind --output "$2" -q 2>/dev/null
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
: >"$tmp/t1"
: >"$tmp/tn"
r=0
while [ $r -lt "$reps" ]; do
    run 1 "$tmp/one.npy" >>"$tmp/t1"
    run "$ranks" "$tmp/many.npy" >>"$tmp/tn"
    cmp -s "$tmp/one.npy" "$tmp/many.npy" || { echo "mpi_split: $ranks ranks wrote another file than one" >&2; exit 1; }
    r=$((r + 1))
done
e1=$(med <"$tmp/t1"); en=$(med <"$tmp/tn")
echo "model $model, one example, $opts --split $kind, 1 thread per rank, medians of $reps"
printf 'end to end: 1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$e1" "$ranks" "$en" "$(eff "$e1" "$en")"
echo "outputs byte-identical: yes"
