#!/bin/sh
# Corpus mode under MPI (tools/cattr/mpi_driver.h): for N = 1, 2, 3 ranks, `mpirun -n N cattr explain-llm --prompts`
# writes the byte-identical file and exit code of one process, from scratch and when resuming a file with a torn last
# line; a rank killed with SIGKILL stops the job (mpirun names it, no hang) and a rerun finishes the file as one
# uninterrupted run writes it. Dataset mode (`cattr explain --batch-size` with an .npy or .safetensors output): the same
# file as one process's for N = 1, 2, 3, from scratch and resumed. One call split over the ranks (--split steps, features, samples):
# one process's file for the same chunks, for a model and for a language model. explain-context's corpus mode: one
# process's records. Skipped (77) when the command is built without MPI or mpirun is absent.
# usage: mpi_test.sh CATTR_BINARY WITH_MPI(0|1) (run from the repository root)
cattr=$1
if [ "${2:-0}" != 1 ]; then echo "skipped: cattr is built without MPI (apt-get install libopenmpi-dev openmpi-bin)"; exit 77; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "skipped: no mpirun (apt-get install openmpi-bin)"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0
ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }
tiny=tests/data/llm/tiny
export OMP_NUM_THREADS=1
# as root (containers, CI) OpenMPI needs --allow-run-as-root; more ranks than cores need --oversubscribe
mpi() { n=$1; shift; timeout 120 mpirun --allow-run-as-root --oversubscribe -n "$n" "$cattr" "$@"; }

# the requests of tests/cli_test.sh's corpus section (error lines included), a blank line and a repeated id (an error
# record saying which line had it first)
{
    echo '{"id": "a", "prompt": "The capital of France is", "target": " Paris"}'
    echo '{"id": "b", "prompt_ids": [1, 2, 3], "target_ids": [4, 5], "method": "feature-ablation"}'
    echo 'not json'
    echo '{"id": "c", "prompt": "Hello", "target": ""}'
    echo ''
    echo '{"id": 7, "template": "{} lives in {}", "slots": ["Anna", "Rome"], "target": " Italy", "method": "feature-ablation"}'
    echo '{"id": "d", "prompt": "x", "bogus": 1}'
    i=0
    while [ $i -lt 20 ]; do
        echo "{\"id\": \"p$i\", \"prompt\": \"The cat $i sat on the mat\", \"target\": \" sat\", \"steps\": $((8 + 4 * (i % 5)))}"
        i=$((i + 1))
    done
    echo '{"id": "a", "prompt": "a repeated id is an error", "target": " x"}'
    echo '{"id": "g", "prompt": "Once upon a time", "max_new_tokens": 3, "method": "shapley-value-sampling", "n_samples": 3}'
} >"$tmp/req.jsonl"

"$cattr" explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/ref.jsonl" 2>"$tmp/err"
rc_ref=$?
[ $rc_ref -eq 1 ] && ok || bad "single process: exit $rc_ref, expected 1"
[ "$(wc -l <"$tmp/ref.jsonl")" -eq 29 ] && ok || bad "single process: $(wc -l <"$tmp/ref.jsonl") lines, expected the header and 28 records"
grep -q '"error":"line 28: the id \\"a\\" is already line 1.s' "$tmp/ref.jsonl" && ok || bad "no error record for the repeated id"
grep '^cattr: request' "$tmp/err" >"$tmp/ref.err"
for n in 1 2 3; do
    mpi $n explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/n$n.jsonl" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq $rc_ref ] && ok || { bad "$n ranks: exit $rc, expected $rc_ref"; tail -5 "$tmp/err"; }
    cmp -s "$tmp/ref.jsonl" "$tmp/n$n.jsonl" && ok || bad "$n ranks: the output differs from one process's"
    # the failed requests are reported once, by rank 0, in input order
    [ "$(grep -c '^cattr: request' "$tmp/err")" -eq 4 ] && ok || bad "$n ranks: failed requests reported $(grep -c '^cattr: request' "$tmp/err") times, expected 4"
    grep '^cattr: request' "$tmp/err" | cmp -s - "$tmp/ref.err" && ok || bad "$n ranks: the messages differ from one process's"
    # resumed from the header, the first 9 records and a torn tenth
    head -n 10 "$tmp/ref.jsonl" >"$tmp/part$n.jsonl"
    sed -n 11p "$tmp/ref.jsonl" | head -c 40 >>"$tmp/part$n.jsonl"
    mpi $n explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/part$n.jsonl" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] && ok || bad "$n ranks, resumed: exit $rc, expected 1 (the repeated id is after the first 9)"
    cmp -s "$tmp/ref.jsonl" "$tmp/part$n.jsonl" && ok || bad "$n ranks: the resumed output differs from one process's"
    [ "$(grep -c 'dropped an incomplete last line' "$tmp/err")" -eq 1 ] && ok || bad "$n ranks: the torn line is not reported once"
done
# a finished file: nothing to do, exit 0 on every rank, nothing added
mpi 3 explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/n3.jsonl" -q >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "3 ranks, finished file: exit $rc"
cmp -s "$tmp/ref.jsonl" "$tmp/n3.jsonl" && ok || bad "3 ranks, finished file: changed"
# errors before the work: every rank stops with the same exit code and nothing hangs
mpi 2 explain-llm $tiny --prompts "$tmp/missing.jsonl" --output "$tmp/m.jsonl" -q >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && ok || bad "2 ranks, missing requests file: exit $rc, expected 2"
[ "$(grep -c "cannot open" "$tmp/err")" -eq 1 ] && ok || bad "2 ranks, missing requests file: message not once: $(cat "$tmp/err")"
mpi 2 explain-llm tests/data/llm/missing --prompts "$tmp/req.jsonl" --output "$tmp/m.jsonl" -q >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && ok || bad "2 ranks, missing checkpoint: exit $rc, expected 2"

# a rank killed while the job runs: mpirun stops the job and names it; a rerun finishes the same file
{
    i=0
    while [ $i -lt 12 ]; do
        echo "{\"id\": \"k$i\", \"prompt\": \"The cat $i sat on the mat\", \"target\": \" sat\", \"steps\": 300}"
        i=$((i + 1))
    done
} >"$tmp/kreq.jsonl"
"$cattr" explain-llm $tiny --prompts "$tmp/kreq.jsonl" --output "$tmp/kref.jsonl" -q 2>/dev/null
mpi 2 explain-llm $tiny --prompts "$tmp/kreq.jsonl" --output "$tmp/k.jsonl" -q >"$tmp/out" 2>"$tmp/err" &
mpid=$!
# rank 1: the process of this job whose environment says OMPI_COMM_WORLD_RANK=1
victim=""
t=0
while [ -z "$victim" ] && [ $t -lt 200 ]; do
    for p in $(pgrep -f -- "--output $tmp/k.jsonl" 2>/dev/null); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
    done
    [ -n "$victim" ] && [ "$(cat "$tmp/k.jsonl" 2>/dev/null | wc -l)" -ge 2 ] || { victim=""; sleep 0.05; }
    t=$((t + 1))
done
if [ -n "$victim" ]; then
    kill -9 "$victim"
    wait $mpid
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && ok || bad "a killed rank: mpirun exit $rc (124: it hung)"
    grep -q "signal 9" "$tmp/err" && ok || bad "a killed rank: mpirun does not name it: $(cat "$tmp/err")"
    [ "$(wc -l <"$tmp/k.jsonl")" -lt 12 ] && ok || bad "a killed rank: the job ran to the end"
    mpi 2 explain-llm $tiny --prompts "$tmp/kreq.jsonl" --output "$tmp/k.jsonl" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || bad "rerun after a killed rank: exit $rc"
    cmp -s "$tmp/kref.jsonl" "$tmp/k.jsonl" && ok || bad "rerun after a killed rank: the output differs from one uninterrupted run's"
else
    wait $mpid
    bad "a killed rank: could not find rank 1 of the job while it ran"
fi

# dataset mode: batches over the ranks, the file rank 0 writes equals one process's (same OMP_NUM_THREADS)
model=models/digits/digits.onnx
/usr/bin/python3 -c "import numpy as np; np.save('$tmp/ds.npy', np.random.default_rng(3).random((37, 1, 8, 8), dtype=np.float32))" 2>/dev/null ||
    cp tests/data/cli/batch2.npy "$tmp/ds.npy"
"$cattr" explain $model --input "$tmp/ds.npy" --method integrated-gradients --steps 16 --batch-size 4 --output "$tmp/dref.safetensors" -q
for n in 1 2 3; do
    mpi $n explain $model --input "$tmp/ds.npy" --method integrated-gradients --steps 16 --batch-size 4 --output "$tmp/d$n.safetensors" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "dataset, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/dref.safetensors" "$tmp/d$n.safetensors" && ok || bad "dataset, $n ranks: the output differs from one process's"
    ! [ -e "$tmp/d$n.safetensors.part" ] && ! [ -e "$tmp/d$n.safetensors.part.json" ] && ok || bad "dataset, $n ranks: left its part files"
done
# a dataset run killed after some batches resumes under 2 ranks to the same file
"$cattr" explain $model --input "$tmp/ds.npy" --method integrated-gradients --steps 2000 --batch-size 1 --output "$tmp/dk.npy" -q &
pid=$!
t=0
while ! grep -qs '"rows_done":[1-9]' "$tmp/dk.npy.part.json" && [ $t -lt 400 ]; do sleep 0.05; t=$((t + 1)); done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
"$cattr" explain $model --input "$tmp/ds.npy" --method integrated-gradients --steps 2000 --batch-size 1 --output "$tmp/dkref.npy" -q
mpi 2 explain $model --input "$tmp/ds.npy" --method integrated-gradients --steps 2000 --batch-size 1 --output "$tmp/dk.npy" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "dataset resumed by 2 ranks: exit $rc"
cmp -s "$tmp/dkref.npy" "$tmp/dk.npy" && ok || bad "dataset resumed by 2 ranks: the output differs from one uninterrupted run's"
grep -q "resuming" "$tmp/err" && ok || bad "dataset resumed by 2 ranks: it did not resume: $(cat "$tmp/err")"

# one attribution split over the ranks (--split steps): the parts combined on rank 0 give the plain call's file,
# whatever the number of ranks (with --internal-batch-size: Captum's chunks of steps)
head_rows=tests/data/cli/batch2.npy
"$cattr" explain $model --input $head_rows --steps 64 --internal-batch-size 20 --output "$tmp/sref.npy" -q
for n in 1 2 3; do
    mpi $n explain $model --input $head_rows --steps 64 --internal-batch-size 20 --split steps --output "$tmp/s$n.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/sref.npy" "$tmp/s$n.npy" && ok || bad "split, $n ranks: the output differs from one process's"
done
# without --internal-batch-size (the cut comes from the call: 96 steps in units of 6), the plain call's bits
"$cattr" explain $model --input $head_rows --steps 96 --output "$tmp/pref.npy" -q
for n in 1 2 3; do
    mpi $n explain $model --input $head_rows --steps 96 --split steps --output "$tmp/p$n.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split without a batch size, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/pref.npy" "$tmp/p$n.npy" && ok || bad "split without a batch size, $n ranks: the output differs from the plain call's"
done
# and a language model's LayerIG (explain-llm --split steps)
"$cattr" explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --steps 32 --internal-batch-size 12 --output "$tmp/lref.json" -q 2>/dev/null
for n in 1 2 3; do
    mpi $n explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --steps 32 --internal-batch-size 12 --split steps --output "$tmp/l$n.json" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "explain-llm split, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/lref.json" "$tmp/l$n.json" && ok || bad "explain-llm split, $n ranks: the output differs from one process's"
done
# and without --internal-batch-size (the cut from the call: 32 steps in units of 2), the plain call's bits
"$cattr" explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --steps 32 --output "$tmp/lpref.json" -q 2>/dev/null
for n in 2 3; do
    mpi $n explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --steps 32 --split steps --output "$tmp/lp$n.json" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "explain-llm split without a batch size, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/lpref.json" "$tmp/lp$n.json" && ok || bad "explain-llm split without a batch size, $n ranks: the output differs from the plain call's"
done
# the perturbation and surrogate methods (--split features / samples): each state's outputs computed by one rank, the
# results combined on rank 0 as one process computes them
"$cattr" explain $model --input $head_rows --method feature-ablation --perturbations-per-eval 7 --output "$tmp/faref.npy" -q
"$cattr" explain $model --input $head_rows --method kernel-shap --n-samples 60 --perturbations-per-eval 9 --output "$tmp/ksref.npy" -q
for n in 1 2 3; do
    mpi $n explain $model --input $head_rows --method feature-ablation --perturbations-per-eval 7 --split features --output "$tmp/fa$n.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split features, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/faref.npy" "$tmp/fa$n.npy" && ok || bad "split features, $n ranks: the output differs from one process's"
    mpi $n explain $model --input $head_rows --method kernel-shap --n-samples 60 --perturbations-per-eval 9 --split samples --output "$tmp/ks$n.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split samples, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/ksref.npy" "$tmp/ks$n.npy" && ok || bad "split samples, $n ranks: the output differs from one process's"
done
# a layer method's steps (--split steps): LayerIntegratedGradients on conv2, with its delta in a .safetensors
"$cattr" explain $model --input $head_rows --method layer-integrated-gradients --layer conv2 --steps 40 --internal-batch-size 14 --output "$tmp/lgref.safetensors" -q
for n in 1 2 3; do
    mpi $n explain $model --input $head_rows --method layer-integrated-gradients --layer conv2 --steps 40 --internal-batch-size 14 --split steps --output "$tmp/lg$n.safetensors" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split layer-ig, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/lgref.safetensors" "$tmp/lg$n.safetensors" && ok || bad "split layer-ig, $n ranks: the output differs from one process's"
done
# the tunnels (--split samples): SmoothGrad around saliency and GradientShap, in chunks of a small memory budget
"$cattr" explain $model --input $head_rows --method saliency --noise-tunnel smoothgrad --nt-samples 9 --nt-samples-batch-size 4 --stdevs 0.2 --max-memory 64K --output "$tmp/ntref.npy" -q 2>/dev/null
"$cattr" explain $model --input $head_rows --method gradient-shap --baseline $head_rows --n-samples 13 --stdevs 0.1 --max-memory 64K --output "$tmp/gsref.npy" -q 2>/dev/null
for n in 1 2 3; do
    mpi $n explain $model --input $head_rows --method saliency --noise-tunnel smoothgrad --nt-samples 9 --nt-samples-batch-size 4 --stdevs 0.2 --max-memory 64K --split samples --output "$tmp/nt$n.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split noise tunnel, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/ntref.npy" "$tmp/nt$n.npy" && ok || bad "split noise tunnel, $n ranks: the output differs from one process's"
    mpi $n explain $model --input $head_rows --method gradient-shap --baseline $head_rows --n-samples 13 --stdevs 0.1 --max-memory 64K --split samples --output "$tmp/gs$n.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split gradient-shap, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/gsref.npy" "$tmp/gs$n.npy" && ok || bad "split gradient-shap, $n ranks: the output differs from one process's"
done
# a tunnel around a method that runs once per partition: SmoothGrad around IG (8 steps), 3 partitions of samples
"$cattr" explain $model --input $head_rows --noise-tunnel smoothgrad --nt-samples 5 --nt-samples-batch-size 2 --stdevs 0.2 --steps 8 --output "$tmp/ntigref.safetensors" -q 2>/dev/null
for n in 1 2 3; do
    mpi $n explain $model --input $head_rows --noise-tunnel smoothgrad --nt-samples 5 --nt-samples-batch-size 2 --stdevs 0.2 --steps 8 --split samples --output "$tmp/ntig$n.safetensors" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "split noise tunnel around IG, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/ntigref.safetensors" "$tmp/ntig$n.safetensors" && ok || bad "split noise tunnel around IG, $n ranks: the output differs from one process's"
done
# a language model's FeatureAblation (--split features) and ShapleyValueSampling (--split samples)
"$cattr" explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --method feature-ablation --perturbations-per-eval 2 --output "$tmp/lfref.json" -q 2>/dev/null
"$cattr" explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --method shapley-value-sampling --n-samples 3 --perturbations-per-eval 4 --output "$tmp/lsref.json" -q 2>/dev/null
for n in 2 3; do
    mpi $n explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --method feature-ablation --perturbations-per-eval 2 --split features --output "$tmp/lf$n.json" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "explain-llm split features, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/lfref.json" "$tmp/lf$n.json" && ok || bad "explain-llm split features, $n ranks: the output differs from one process's"
    mpi $n explain-llm $tiny --prompt "The capital of France is" --target " Paris is" --method shapley-value-sampling --n-samples 3 --perturbations-per-eval 4 --split samples --output "$tmp/ls$n.json" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 0 ] && ok || { bad "explain-llm split samples, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    cmp -s "$tmp/lsref.json" "$tmp/ls$n.json" && ok || bad "explain-llm split samples, $n ranks: the output differs from one process's"
done
mpi 2 explain $model --input $head_rows --method saliency --split steps --output "$tmp/sx.npy" -q >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && ! [ -e "$tmp/sx.npy" ] && ok || bad "split saliency: exit $rc, expected 2 and no output"

# ranks that do not run the same command (another option on one rank): refused before any work, with one message
# naming the rank; nothing written
for kind in dataset corpus split; do
    case $kind in
        dataset) set -- explain $model --input "$tmp/ds.npy" --steps 8 --batch-size 4 --output "$tmp/mix.npy" -q; extra="--steps 16" ;;
        corpus) set -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/mix.jsonl" -q; extra="--method feature-ablation" ;;
        split) set -- explain $model --input $head_rows --steps 16 --split steps --output "$tmp/mix.npy" -q; extra="--internal-batch-size 4" ;;
    esac
    # shellcheck disable=SC2086
    timeout 120 mpirun --allow-run-as-root --oversubscribe -n 1 "$cattr" "$@" : -n 1 "$cattr" "$@" $extra >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && ok || bad "mixed commands ($kind): exit $rc, expected 2"
    [ "$(grep -c 'rank 1 does not run the same command as rank 0' "$tmp/err")" -eq 1 ] && ok || bad "mixed commands ($kind): not said once: $(cat "$tmp/err")"
    ! [ -e "$tmp/mix.npy" ] && ! [ -e "$tmp/mix.npy.part" ] && ! [ -e "$tmp/mix.jsonl" ] && ok || bad "mixed commands ($kind): wrote an output"
done
# the same command line, but the input's content differs on rank 1 (a stale copy on one machine): refused
/usr/bin/python3 -c "import numpy as np; np.save('$tmp/ds_b.npy', np.load('$tmp/ds.npy') * 0.5)"
mkdir -p "$tmp/r0" "$tmp/r1"
cp "$tmp/ds.npy" "$tmp/r0/in.npy"
cp "$tmp/ds_b.npy" "$tmp/r1/in.npy"
abs=$(cd "$(dirname "$cattr")" && pwd)/$(basename "$cattr")
timeout 120 mpirun --allow-run-as-root --oversubscribe -n 1 --wdir "$tmp/r0" "$abs" explain "$PWD/$model" --input in.npy --steps 8 --batch-size 4 --output "$tmp/mix2.npy" -q : \
    -n 1 --wdir "$tmp/r1" "$abs" explain "$PWD/$model" --input in.npy --steps 8 --batch-size 4 --output "$tmp/mix2.npy" -q >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q 'rank 1 does not run the same command' "$tmp/err" && ! [ -e "$tmp/mix2.npy" ] && ok || bad "another input on rank 1: exit $rc: $(cat "$tmp/err")"
# a fatal error in a batch (a NaN row) is reported with its message, by rank 0, once
/usr/bin/python3 -c "import numpy as np; x = np.load('$tmp/ds.npy'); x[9, 0, 0, 0] = np.nan; np.save('$tmp/dsnan.npy', x)"
mpi 2 explain $model --input "$tmp/dsnan.npy" --steps 8 --batch-size 4 --output "$tmp/nan.npy" -q >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c 'rows 8 to 12: input 0 has a non-finite value' "$tmp/err")" -eq 1 ] && ok || bad "a NaN row under 2 ranks: exit $rc: $(cat "$tmp/err")"

# the sweep under 2 ranks, dataset mode: every method with an out-of-range target stops with its message, said once
# by rank 0, never a signal, no output
for m in saliency input-x-gradient integrated-gradients deeplift deeplift-shap guided-backprop deconvolution \
    guided-gradcam lrp gradient-shap feature-ablation occlusion shapley-value-sampling shapley-values lime kernel-shap \
    layer-gradient-x-activation layer-gradcam internal-influence layer-conductance layer-integrated-gradients \
    layer-deeplift layer-deeplift-shap layer-gradient-shap layer-feature-ablation layer-feature-permutation layer-lrp \
    neuron-conductance; do
    mpi 2 explain $model --method $m --layer conv2 --neuron 0,1,1 --sliding-window 1,3,3 --n-samples 4 --steps 4 \
        --baseline models/digits/samples/digit_0.npy --input "$tmp/ds.npy" --batch-size 8 --target 10 \
        --output "$tmp/sweep.npy" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 1 ] && [ "$(grep -c 'target index 10 is out of range' "$tmp/err")" -eq 1 ] && ! [ -e "$tmp/sweep.npy" ] &&
        ! [ -e "$tmp/sweep.npy.part" ] && ok || bad "$m under 2 ranks with target 10: exit $rc: $(head -c 300 "$tmp/err")"
done

# explain-context's corpus mode: the records of 2 and 3 ranks are one process's (timings aside), failed lines included
{
    i=0
    while [ $i -lt 7 ]; do
        echo "{\"id\": \"q$i\", \"question\": \"sky $i?\", \"contexts\": [\"Sky is green. Sun is up.\", \"Sea is blue $i.\"], \"answer\": \" green\"}"
        i=$((i + 1))
    done
    echo '{"id": "bad", "question": "x"}'
} >"$tmp/creq.jsonl"
ctpl="C: {context} Q: {question} A:"
"$cattr" explain-context $tiny --template "$ctpl" --sources sentences --requests "$tmp/creq.jsonl" --output "$tmp/cref.jsonl" -q 2>/dev/null
rc_ref=$?
[ $rc_ref -eq 1 ] && [ "$(wc -l <"$tmp/cref.jsonl")" -eq 9 ] && ok || bad "explain-context corpus, one process: exit $rc_ref, $(wc -l <"$tmp/cref.jsonl") lines"
for n in 2 3; do
    mpi $n explain-context $tiny --template "$ctpl" --sources sentences --requests "$tmp/creq.jsonl" \
        --output "$tmp/c$n.jsonl" -q >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq $rc_ref ] && ok || { bad "explain-context corpus, $n ranks: exit $rc"; tail -3 "$tmp/err"; }
    sed 's/"timings_s":{[^}]*}//' "$tmp/cref.jsonl" >"$tmp/cref.x"
    sed 's/"timings_s":{[^}]*}//' "$tmp/c$n.jsonl" >"$tmp/c$n.x"
    cmp -s "$tmp/cref.x" "$tmp/c$n.x" && ok || bad "explain-context corpus, $n ranks: the records differ from one process's"
done

echo "mpi: $checks checks, $fails failed"
[ $fails -eq 0 ]
