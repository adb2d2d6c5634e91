#!/bin/sh
# Parallel efficiency of corpus mode under MPI: `cattr explain-llm --prompts` on one rank against N ranks, one thread
# per rank (OMP_NUM_THREADS=1), the same requests; efficiency = t(1) / (N * t(N)). Also checks that the outputs are
# byte-identical. Times are whole runs (mpirun, MPI start, model load included: "end to end") and the attribution part
# the command reports in its summary line ("run"); medians of REPS alternating rounds (this machine's speed drifts).
#
#   sh bench/mpi_corpus.sh [CHECKPOINT_DIR] [REQUESTS] [STEPS] [RANKS] [REPS]
#
# Defaults: ../shared/golden/llm/qwen3-tiny, 80 requests of LayerIG with 64 steps over a 42-token prompt and a
# one-token target, 2 ranks, 3 rounds. The Qwen3-0.6B-shape checkpoint of bench/llm_qwen3_shape.py
# (/tmp/cattr-qwen3-0.6b-random) works the same way (use fewer requests: each takes seconds). Needs a build with MPI
# (libopenmpi-dev) and mpirun. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every timed command.
set -eu
cd "$(dirname "$0")/.."
ck=${1:-../shared/golden/llm/qwen3-tiny}
nreq=${2:-80}
steps=${3:-64}
ranks=${4:-2}
reps=${5:-3}
cattr=${CATTR:-build/cattr}
command -v mpirun >/dev/null || { echo "mpi_corpus: no mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
[ -d "$ck" ] || { echo "mpi_corpus: no checkpoint folder '$ck'" >&2; exit 2; }
. bench/mpi_lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
while [ $i -lt "$nreq" ]; do # 42 prompt ids in 3..1000 and a one-token target, different for each request
    ids=$(awk -v s="$i" 'BEGIN { srand(s + 1); for (k = 0; k < 42; k++) printf "%s%d", (k ? "," : ""), 3 + int(rand() * 997) }')
    echo "{\"id\": $i, \"prompt_ids\": [$ids], \"target_ids\": [$((i % 900 + 7))], \"steps\": $steps}"
    i=$((i + 1))
done >"$tmp/req.jsonl"
run() { # ranks output -> "<end to end s> <run s>"
    rm -f "$2"
    t0=$(now)
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 mpirun $root --oversubscribe -n "$1" \
        "$cattr" explain-llm "$ck" --prompts "$tmp/req.jsonl" --output "$2" >/dev/null 2>"$tmp/err"
    t1=$(now)
    inner=$(grep -o '([0-9.]* s)$' "$tmp/err" | tr -d '()s ' | tail -1)
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') ${inner:-nan}"
}
: >"$tmp/t1"
: >"$tmp/tn"
r=0
while [ $r -lt "$reps" ]; do
    run 1 "$tmp/one.jsonl" >>"$tmp/t1"
    run "$ranks" "$tmp/many.jsonl" >>"$tmp/tn"
    cmp -s "$tmp/one.jsonl" "$tmp/many.jsonl" || { echo "mpi_corpus: $ranks ranks wrote another file than one" >&2; exit 1; }
    r=$((r + 1))
done
e1=$(cut -d' ' -f1 "$tmp/t1" | med); en=$(cut -d' ' -f1 "$tmp/tn" | med)
i1=$(cut -d' ' -f2 "$tmp/t1" | med); in_=$(cut -d' ' -f2 "$tmp/tn" | med)
echo "checkpoint $ck, $nreq requests (LayerIG, $steps steps, 42 prompt tokens), 1 thread per rank, medians of $reps"
printf 'end to end: 1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$e1" "$ranks" "$en" "$(eff "$e1" "$en")"
printf 'run:        1 rank %.2f s, %d ranks %.2f s, efficiency %.0f%%\n' "$i1" "$ranks" "$in_" "$(eff "$i1" "$in_")"
echo "outputs byte-identical: yes"
