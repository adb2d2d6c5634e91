#!/bin/sh
# Parallel efficiency of dataset mode under MPI: `cattr explain --batch-size` on one rank against N ranks, one thread
# per rank (OMP_NUM_THREADS=1), the same rows; efficiency = t(1) / (N * t(N)). Also checks that the outputs are
# byte-identical. Times are whole runs (mpirun, MPI start, model load included) and the attribution part the command
# reports ("wrote ... (..., S s)"); medians of REPS alternating rounds (this machine's speed drifts).
#
#   sh bench/mpi_dataset.sh [MODEL.onnx] [ROWS] [STEPS] [BATCH] [RANKS] [REPS]
#
# Defaults: the bundled digits CNN, 2000 random 1x8x8 rows, IntegratedGradients with 64 steps, batches of 50, 2
# ranks, 3 rounds. Needs a build with MPI (libopenmpi-dev), mpirun and /usr/bin/python3 with numpy (to write the
# rows). OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every timed command.
set -eu
cd "$(dirname "$0")/.."
model=${1:-models/digits/digits.onnx}
rows=${2:-2000}
steps=${3:-64}
bs=${4:-50}
ranks=${5:-2}
reps=${6:-3}
cattr=${CATTR:-build/cattr}
command -v mpirun >/dev/null || { echo "mpi_dataset: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
. bench/mpi_lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=$("$cattr" info "$model" | awk '/^inputs:/ { getline; print; exit }' | grep -o '\[.*\]' | tr -d '[] ')
/usr/bin/python3 -c "
import numpy as np
dims = [int(d) for d in '$shape'.split(',')[1:]]
np.save('$tmp/rows.npy', np.random.default_rng(0).random([$rows] + dims, dtype=np.float32))"
run() { # ranks output -> "<end to end s> <run s>"
    rm -f "$2"
    t0=$(now)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 mpirun $root --oversubscribe -n "$1" \
        "$cattr" explain "$model" --input "$tmp/rows.npy" --steps "$steps" --batch-size "$bs" --output "$2" >"$tmp/out"
    t1=$(now)
    inner=$(grep -o ', [0-9.]* s)$' "$tmp/out" | tr -d ',()s ' | tail -1)
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') ${inner:-nan}"
}
: >"$tmp/t1"
: >"$tmp/tn"
r=0
while [ $r -lt "$reps" ]; do
    run 1 "$tmp/one.npy" >>"$tmp/t1"
    run "$ranks" "$tmp/many.npy" >>"$tmp/tn"
    cmp -s "$tmp/one.npy" "$tmp/many.npy" || { echo "mpi_dataset: $ranks ranks wrote another file than one" >&2; exit 1; }
    r=$((r + 1))
done
e1=$(cut -d' ' -f1 "$tmp/t1" | med); en=$(cut -d' ' -f1 "$tmp/tn" | med)
i1=$(cut -d' ' -f2 "$tmp/t1" | med); in_=$(cut -d' ' -f2 "$tmp/tn" | med)
echo "model $model, $rows rows in batches of $bs (IntegratedGradients, $steps steps), 1 thread per rank, medians of $reps"
printf 'end to end: 1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$e1" "$ranks" "$en" "$(eff "$e1" "$en")"
printf 'run:        1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$i1" "$ranks" "$in_" "$(eff "$i1" "$in_")"
echo "outputs byte-identical: yes"
