#!/bin/sh
# End-to-end checks of the cattr command: the demo forms work, bad input fails with a message naming the offending
# thing, a non-zero exit and no output file. usage: cli_test.sh CATTR_BINARY (run from the repository root)
cattr=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0
model=models/digits/digits.onnx
x=models/digits/samples/digit_3.npy

ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }

# expect_fail NAME EXPECTED_SUBSTRING OUTPUT_FILE -- ARGS...
expect_fail() {
    name=$1; want=$2; outf=$3; shift 4
    "$cattr" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    if [ $rc -eq 0 ]; then bad "$name: exit 0"; return; fi
    if ! grep -qF -- "$want" "$tmp/stderr"; then bad "$name: stderr lacks '$want':"; cat "$tmp/stderr"; return; fi
    if [ -n "$outf" ] && [ -e "$outf" ]; then bad "$name: wrote $outf"; return; fi
    if ls "$tmp" | grep -q '\.tmp\.'; then bad "$name: left a temporary file"; return; fi
    ok
}

# expect_exit NAME CODE EXPECTED_SUBSTRING OUTPUT_FILE -- ARGS...: as expect_fail, with that exit code
expect_exit() {
    code=$2; n0=$fails
    name=$1; shift 2
    expect_fail "$name" "$@"
    [ "$fails" -eq "$n0" ] && [ "$rc" -ne "$code" ] && { checks=$((checks - 1)); bad "$name: exit $rc, expected $code"; }
}

expect_ok() {
    name=$1; shift
    if "$cattr" "$@" >"$tmp/stdout" 2>"$tmp/stderr"; then ok; else bad "$name: exit $?"; cat "$tmp/stderr"; fi
}

# --- the forms the docs promise ---------------------------------------------------------------------------------
expect_ok "explain npy" explain $model --method integrated-gradients --input $x --target 3 --steps 50 \
    --dtype float32 --output "$tmp/a.npy" --runs 3
[ -s "$tmp/a.npy" ] && ok || bad "a.npy not written"
grep -q '^time: first=[0-9.]* warm_median=[0-9.]*$' "$tmp/stdout" && ok || bad "no time line"
grep -q 'convergence delta' "$tmp/stdout" && ok || bad "no delta printed"
expect_ok "explain json" explain $model --input $x --output "$tmp/a.json"
grep -q '"attributions"' "$tmp/a.json" && ok || bad "json lacks attributions"
expect_ok "explain safetensors" explain $model --method saliency --input tests/data/cli/batch2.npy \
    --targets 3,7 --output "$tmp/a.safetensors"
expect_ok "explain png" explain $model --method input-x-gradient --input $x --output "$tmp/b.npy" --png "$tmp/h.png" --heatmap
[ -s "$tmp/h.png" ] && ok || bad "png not written"
expect_ok "explain float64 riemann" explain $model --input $x --dtype float64 --quadrature riemann_trapezoid \
    --steps 20 --baseline 0.1 --internal-batch-size 4 --output "$tmp/c.npy"
expect_ok "explain eager" explain $model --input $x --executor eager --output "$tmp/d.npy"
cmp -s "$tmp/a.npy" "$tmp/d.npy" && ok || bad "eager and planned outputs differ"
expect_ok "info" info $model
grep -q 'conv1' "$tmp/stdout" && ok || bad "info lacks layer conv1"
# --- devices, compare, profile --------------------------------------------------------------------------------------
expect_ok "info --devices" info --devices
grep -q 'cpu-check' "$tmp/stdout" && ok || bad "info --devices lacks cpu-check"
expect_ok "explain on cpu-check" explain $model --input $x --target 3 --device cpu-check --output "$tmp/k.npy" \
    --profile "$tmp/kt.json"
grep -q '"cpu-check"' "$tmp/kt.json" && ok || bad "explain --device cpu-check did not run on cpu-check"
# --- precision ------------------------------------------------------------------------------------------------------
expect_exit "precision high in float64" 2 "needs dtype float32" "$tmp/h2.npy" -- explain $model --input $x \
    --precision high --dtype float64 --output "$tmp/h2.npy"
expect_exit "precision high on cpu-check" 1 "lacks" "$tmp/h2.npy" -- explain $model --input $x --precision high \
    --device cpu-check --output "$tmp/h2.npy"
expect_exit "unknown precision" 2 "--precision must be" "$tmp/h2.npy" -- explain $model --input $x --precision low \
    --output "$tmp/h2.npy"
if grep -q avx512_bf16 /proc/cpuinfo 2>/dev/null; then
    expect_ok "precision high" explain $model --input $x --target 3 --precision high --precision-error --output "$tmp/h.npy"
    grep -q 'precision high vs highest: max |attribution error|' "$tmp/stderr" && ok || bad "no precision error line"
else
    echo "SKIP precision high: this CPU has no AVX-512 BF16"
fi
expect_exit "unknown device" 2 "unknown device 'gpu'" "$tmp/k2.npy" -- explain $model --input $x --device gpu --output "$tmp/k2.npy"
case $("$cattr" info --devices) in
*"cuda: available"*) # a GPU (or the emulation build): the same attribution as on the CPU
    expect_ok "explain on cuda" explain $model --input $x --target 3 --device cuda:0 --output "$tmp/k2.npy"
    expect_exit "a bad CUDA device name" 2 "cuda:N" "$tmp/k3.npy" -- explain $model --input $x --device cuda:x --output "$tmp/k3.npy" ;;
*"cuda: unavailable"*)
    expect_exit "no CUDA device" 2 "no CUDA device" "$tmp/k2.npy" -- explain $model --input $x --device cuda:0 --output "$tmp/k2.npy"
    expect_exit "CUDA device number beyond the range" 2 "must be 0.." "$tmp/k2.npy" -- explain $model --input $x --device cuda:99 --output "$tmp/k2.npy"
    expect_exit "a bad CUDA device name" 2 "cuda:N" "$tmp/k3.npy" -- explain $model --input $x --device cuda:x --output "$tmp/k3.npy" ;;
*) expect_exit "no CUDA in this build" 2 "no CUDA backend" "$tmp/k2.npy" -- explain $model --input $x --device cuda:0 --output "$tmp/k2.npy" ;;
esac
expect_ok "compare a model" compare $model --input $x --target 3 --layer conv2 --max-rel 1e-12 --json "$tmp/cmp.json"
grep -q '^PASS .* integrated-gradients max_abs=' "$tmp/stdout" && ok || bad "compare lacks the IG row"
grep -q '"methods"' "$tmp/cmp.json" && ok || bad "compare JSON lacks the method table"
expect_exit "compare a model without input" 2 "needs --input" "" -- compare $model
expect_ok "profile" explain $model --input $x --target 3 --output "$tmp/p.npy" --profile "$tmp/trace.json"
grep -q '"traceEvents"' "$tmp/trace.json" && ok || bad "profile trace lacks traceEvents"
grep -q '^copy ' "$tmp/stderr" && ok || bad "profile summary lacks the copy table"
expect_exit "profile unwritable" 2 "--profile" "" -- explain $model --input $x --target 3 --output "$tmp/p2.npy" \
    --profile "$tmp/no/such/dir/t.json"
expect_ok "help" --help
expect_ok "explain help" explain --help
expect_ok "replay help" replay --help
expect_ok "info help" info --help

# --- bad input ------------------------------------------------------------------------------------------------
expect_fail "missing model" "no-such.onnx" "$tmp/o.npy" -- explain "$tmp/no-such.onnx" --input $x --output "$tmp/o.npy"
head -c 300 $model >"$tmp/trunc.onnx"
expect_fail "truncated model" "trunc.onnx" "$tmp/o.npy" -- explain "$tmp/trunc.onnx" --input $x --output "$tmp/o.npy"
printf 'garbage\001\002\003' >"$tmp/garbage.onnx"
expect_fail "garbage model" "garbage.onnx" "$tmp/o.npy" -- info "$tmp/garbage.onnx"
expect_fail "unknown op" "op" "" -- info tests/data/onnx/err_unknown_op.onnx
expect_fail "missing input" "nope.npy" "$tmp/o.npy" -- explain $model --input "$tmp/nope.npy" --output "$tmp/o.npy"
expect_fail "bad npy" "bad_magic.npy" "$tmp/o.npy" -- explain $model --input tests/data/cli/bad_magic.npy --output "$tmp/o.npy"
expect_fail "wrong shape" "shape" "$tmp/o.npy" -- explain $model --input tests/data/cli/wrong_shape.npy --output "$tmp/o.npy"
expect_fail "int input" "int64" "$tmp/o.npy" -- explain $model --input tests/data/cli/int_input.npy --output "$tmp/o.npy"
expect_fail "nan input" "non-finite" "$tmp/o.npy" -- explain $model --input tests/data/cli/nan_input.npy --output "$tmp/o.npy"
expect_fail "target range" "out of range" "$tmp/o.npy" -- explain $model --input $x --target 12 --output "$tmp/o.npy"
expect_fail "target tuple" "target" "$tmp/o.npy" -- explain $model --input $x --target 1,2 --output "$tmp/o.npy"
expect_fail "targets count" "batch" "$tmp/o.npy" -- explain $model --input $x --targets 1,2 --output "$tmp/o.npy"
expect_fail "bad method" "unknown method" "$tmp/o.npy" -- explain $model --method nope --input $x --output "$tmp/o.npy"
expect_fail "bad steps" "--steps" "$tmp/o.npy" -- explain $model --input $x --steps 0 --output "$tmp/o.npy"
# --steps auto: the steps reached are reported (text and JSON), equal to the plain call at that count
expect_ok "steps auto" explain $model --input $x --target 3 --steps auto --delta-tol 0.02 --output "$tmp/auto.json"
grep -q 'steps (auto), gausslegendre' "$tmp/stdout" && ok || bad "steps auto: no '(auto)' in the summary"
au=$(sed -n 's/.*"n_steps":[ ]*\([0-9]*\).*/\1/p' "$tmp/auto.json" | head -1)
grep -q '"n_steps_auto"' "$tmp/auto.json" && [ -n "$au" ] && ok || bad "steps auto: JSON lacks n_steps / n_steps_auto"
expect_ok "steps auto, plain" explain $model --input $x --target 3 --steps "${au:-8}" --output "$tmp/plain.json"
sed -n 's/.*"attributions":\(.*\)/\1/p' "$tmp/auto.json" >"$tmp/auto.a"
sed -n 's/.*"attributions":\(.*\)/\1/p' "$tmp/plain.json" >"$tmp/plain.a"
[ -s "$tmp/auto.a" ] && cmp -s "$tmp/auto.a" "$tmp/plain.a" && ok || bad "steps auto: not the plain call at $au steps"
expect_fail "delta-tol without auto" "go with --steps auto" "$tmp/o.npy" -- explain $model --input $x --steps 16 --delta-tol 0.01 --output "$tmp/o.npy"
expect_fail "delta-tol range" "--delta-tol" "$tmp/o.npy" -- explain $model --input $x --steps auto --delta-tol 1.5 --output "$tmp/o.npy"
expect_fail "steps auto, other method" "n_steps auto" "$tmp/o.npy" -- explain $model --input $x --method layer-conductance --layer conv2 --steps auto --output "$tmp/o.npy"
expect_fail "steps auto, split" "not auto" "$tmp/o.npy" -- explain $model --input $x --steps auto --split steps --output "$tmp/o.npy"
expect_ok "explain-llm steps auto" explain-llm tests/data/llm/tiny --prompt "a b" --target " c" --steps auto --delta-tol 0.5 --output "$tmp/lauto.json"
grep -q '^steps: [0-9]* (auto' "$tmp/stdout" && grep -q '"n_steps_auto"' "$tmp/lauto.json" && ok || bad "explain-llm steps auto: steps not reported"
# --segments: one column per segment, the JSON keeps the token map; a user's strings; refused forms
expect_ok "explain-llm segments sentences" explain-llm tests/data/llm/tiny --prompt "a b. c d. e" --target " c" --segments sentences --method feature-ablation --output "$tmp/seg.json"
tr -d ' \t\n' <"$tmp/seg.json" >"$tmp/seg1.json"
grep -q '"segments":\[{"text":"ab.","start":0,"end":4}' "$tmp/seg1.json" && grep -q '"token_segment":\[0,0,0,0,1,' "$tmp/seg1.json" && grep -q '"seq_attr":\[[^],]*,[^],]*,[^],]*\]' "$tmp/seg1.json" && ok || { bad "segments: JSON lacks segments / token_segment / 3 columns"; head -c 600 "$tmp/seg.json"; }
printf '["a b.", " c d.", " e"]' >"$tmp/segs.json"
expect_ok "explain-llm segments file" explain-llm tests/data/llm/tiny --prompt "a b. c d. e" --target " c" --segments "$tmp/segs.json" --output "$tmp/segf.json"
grep -q '"text":[[:space:]]*" c d."' "$tmp/segf.json" && ok || bad "segments file: the segments' texts"
printf '["a b.", " c"]' >"$tmp/segbad.json"
expect_fail "segments file not spelling the prompt" "spell" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b. c d. e" --target " c" --segments "$tmp/segbad.json" --output "$tmp/o.json"
printf '[[4, 77777777777777777777777777777777777711], [15, 21]]' >"$tmp/seghuge.json"  # fuzz_segments' finding: a cast out of range
expect_fail "segments span beyond int64" "not within the prompt" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b. c d. e" --target " c" --segments "$tmp/seghuge.json" --output "$tmp/o.json"
expect_fail "segments unknown" "give tokens, words, sentences, lines" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b" --target " c" --segments paragraphs --output "$tmp/o.json"
expect_fail "segments with a template" "--template" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --template "a {}" --slot b --target " c" --method feature-ablation --segments words --output "$tmp/o.json"
# corpus mode: "segments" and "steps": "auto" per request
printf '%s\n' '{"id":"s","prompt":"a b. c d. e","target":" c","segments":"sentences","method":"feature-ablation"}' '{"id":"t","prompt":"a b","target":" c","steps":"auto","delta_tol":0.5}' '{"id":"u","prompt":"a b","target":" c","delta_tol":0.1}' >"$tmp/rq.jsonl"
"$cattr" explain-llm tests/data/llm/tiny --prompts "$tmp/rq.jsonl" --output "$tmp/rs.jsonl" >"$tmp/stdout" 2>"$tmp/stderr"
[ "$(grep -c '"token_segment"' "$tmp/rs.jsonl")" = 1 ] && [ "$(grep -c '"n_steps_auto"' "$tmp/rs.jsonl")" = 1 ] && grep -q "'delta_tol' goes with" "$tmp/rs.jsonl" && ok || { bad "corpus segments / steps auto"; cat "$tmp/rs.jsonl"; }
expect_fail "explain-llm steps auto, feature-ablation" "layer-ig" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b" --target " c" --method feature-ablation --steps auto --output "$tmp/o.json"
expect_fail "bad quadrature" "quadrature" "$tmp/o.npy" -- explain $model --input $x --quadrature simpson --output "$tmp/o.npy"
expect_fail "riemann n=1" "n_steps" "$tmp/o.npy" -- explain $model --input $x --quadrature riemann_left --steps 1 --output "$tmp/o.npy"
expect_fail "bad baseline" "baseline" "$tmp/o.npy" -- explain $model --input $x --baseline tests/data/cli/wrong_shape.npy --output "$tmp/o.npy"
expect_fail "no output" "--output" "" -- explain $model --input $x
expect_fail "bad extension" "--output" "" -- explain $model --input $x --output "$tmp/o.txt"
expect_fail "unwritable output" "cannot write" "" -- explain $model --input $x --output "$tmp/no/such/dir/o.npy"
expect_fail "unknown option" "unknown option" "" -- explain $model --input $x --output "$tmp/o.npy" --frobnicate
expect_fail "unknown command" "unknown command" "" -- frobnicate
expect_fail "replay missing" "no such file" "" -- replay "$tmp/none"

# --- the other primary methods: each runs from the CLI, and their bad input is refused -----------------------------
b2=tests/data/cli/batch2.npy
for m in deeplift guided-backprop deconvolution lrp feature-ablation shapley-value-sampling lime kernel-shap; do
    expect_ok "method $m" explain $model --method $m --input $b2 --output "$tmp/m.npy"
done
expect_ok "occlusion" explain $model --method occlusion --sliding-window 1,3,3 --strides 1,2,2 --input $x --output "$tmp/m.npy"
expect_ok "feature mask" explain $model --method feature-ablation --feature-mask tests/data/cli/mask_quadrants.npy --input $b2 --output "$tmp/m.npy"
expect_ok "deeplift-shap" explain $model --method deeplift-shap --baseline tests/data/cli/baseline_dist.npy --input $b2 --output "$tmp/m.npy"
expect_ok "gradient-shap" explain $model --method gradient-shap --baseline tests/data/cli/baseline_dist.npy --seed 7 --input $b2 --output "$tmp/gs1.npy"
expect_ok "gradient-shap again" explain $model --method gradient-shap --baseline tests/data/cli/baseline_dist.npy --seed 7 --input $b2 --output "$tmp/gs2.npy"
cmp -s "$tmp/gs1.npy" "$tmp/gs2.npy" && ok || bad "the same seed gave different GradientShap results"
expect_ok "noise tunnel" explain $model --method saliency --noise-tunnel smoothgrad --nt-samples 3 --input $x --output "$tmp/m.npy"
expect_ok "dataset in batches" explain $model --method feature-ablation --batch-size 1 --input $b2 --output "$tmp/m.npy"
expect_fail "batched permutation" "batch" "" -- explain $model --method feature-permutation --batch-size 1 --input $b2 --output "$tmp/m.npy"
# --split (one attribution over MPI ranks): one process is one part; what it does not split is refused
expect_ok "split steps, one process" explain $model --input $b2 --steps 16 --internal-batch-size 8 --split steps --output "$tmp/sp.npy" -q
expect_ok "no split, same chunks" explain $model --input $b2 --steps 16 --internal-batch-size 8 --output "$tmp/nsp.npy" -q
cmp -s "$tmp/sp.npy" "$tmp/nsp.npy" && ok || bad "--split steps in one process differs from the unsplit call"
expect_fail "split samples of IG" "split with --split steps" "$tmp/o.npy" -- explain $model --input $b2 --split samples --output "$tmp/o.npy"
expect_fail "split bogus" "give steps, features or samples" "$tmp/o.npy" -- explain $model --input $b2 --split rows --output "$tmp/o.npy"
expect_fail "split features of lime" "split with --split samples" "$tmp/o.npy" -- explain $model --input $b2 --method lime --split features --output "$tmp/o.npy"
expect_ok "split features, one process" explain $model --input $b2 --method occlusion --sliding-window 1,3,3 --perturbations-per-eval 5 --split features --output "$tmp/spf.npy" -q
expect_ok "occlusion, no split" explain $model --input $b2 --method occlusion --sliding-window 1,3,3 --perturbations-per-eval 5 --output "$tmp/nspf.npy" -q
cmp -s "$tmp/spf.npy" "$tmp/nspf.npy" && ok || bad "--split features in one process differs from the unsplit call"
expect_fail "split of a noise tunnel around LRP" "noise-tunnel" "$tmp/o.npy" -- explain $model --input $b2 --method lrp --noise-tunnel smoothgrad --split samples --output "$tmp/o.npy"
expect_fail "split steps of a noise tunnel around IG" "split with --split samples" "$tmp/o.npy" -- explain $model --input $b2 --noise-tunnel smoothgrad --split steps --output "$tmp/o.npy"
expect_fail "split saliency" "integrated-gradients" "$tmp/o.npy" -- explain $model --input $b2 --method saliency --split steps --output "$tmp/o.npy"
expect_fail "explain-llm split steps of feature-ablation" "split with --split features" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b" --target " c" --method feature-ablation --split steps --output "$tmp/o.json"
expect_fail "explain-llm split samples of layer-ig" "split with --split steps" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b" --target " c" --split samples --output "$tmp/o.json"
expect_fail "explain-llm split features without --perturbations-per-eval" "perturbations-per-eval" "$tmp/o.json" -- explain-llm tests/data/llm/tiny --prompt "a b" --target " c" --method feature-ablation --split features --output "$tmp/o.json"
expect_ok "explain-llm split samples, one process" explain-llm tests/data/llm/tiny --prompt "The capital of France is" --target " Paris" --method kernel-shap --n-samples 20 --perturbations-per-eval 6 --split samples --output "$tmp/lks.json" -q
expect_ok "explain-llm kernel-shap, no split" explain-llm tests/data/llm/tiny --prompt "The capital of France is" --target " Paris" --method kernel-shap --n-samples 20 --perturbations-per-eval 6 --output "$tmp/lks0.json" -q
# a prompt too long for a column per token: the terminal view summarises it (a bar and the largest tokens), every
# line within 100 columns when stdout is not a terminal
long_prompt=$(for i in 1 2 3; do printf 'The capital of France is Paris, and its river is the Seine. '; done)
if out=$($cattr explain-llm tests/data/llm/tiny --prompt "$long_prompt" --target " Paris" \
        --method layer-gradient-x-activation 2>/dev/null) &&
    printf '%s\n' "$out" | grep -q 'tokens of the largest |attribution|' &&
    [ "$(printf '%s\n' "$out" | awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }')" -le 100 ]; then ok
else bad "explain-llm long prompt: no summary within 100 columns"; printf '%s\n' "$out" | head -5; fi
cmp -s "$tmp/lks.json" "$tmp/lks0.json" && ok || bad "explain-llm --split samples in one process differs from the unsplit call"
# dataset mode (--batch-size with an .npy or .safetensors output): rows read and written batch by batch, the same
# bytes as the in-memory batching (--runs 1 keeps that path), no part files left; resumed after a kill -9
ds="$tmp/ds.npy"
/usr/bin/python3 -c "import numpy as np; np.save('$ds', np.random.default_rng(5).random((29, 1, 8, 8), dtype=np.float32))"
for out in d.npy d.safetensors; do
    expect_ok "dataset mode $out" explain $model --input $ds --steps 8 --batch-size 4 --output "$tmp/s_$out" -q
    expect_ok "in-memory batches $out" explain $model --input $ds --steps 8 --batch-size 4 --output "$tmp/m_$out" -q --runs 1
    cmp -s "$tmp/s_$out" "$tmp/m_$out" && ok || bad "dataset mode $out: differs from the in-memory batches"
    ! [ -e "$tmp/s_$out.part" ] && ! [ -e "$tmp/s_$out.part.json" ] && ok || bad "dataset mode $out: part files left"
done
expect_ok "dataset mode, targets per row" explain $model --input $ds --method saliency --batch-size 5 \
    --targets 1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9 --output "$tmp/st.npy" -q
expect_ok "in memory, targets per row" explain $model --input $ds --method saliency --batch-size 5 --runs 1 \
    --targets 1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9 --output "$tmp/mt.npy" -q
cmp -s "$tmp/st.npy" "$tmp/mt.npy" && ok || bad "dataset mode saliency with per-row targets differs from the in-memory batches"
expect_fail "dataset without rows" "no rows" "$tmp/o.npy" -- explain $model --input tests/data/cli/empty_batch.npy --batch-size 4 --output "$tmp/o.npy"
expect_fail "dataset rows differ" "rows" "$tmp/o.safetensors" -- explain $model --input $ds --input $b2 --batch-size 4 --output "$tmp/o.safetensors"
expect_fail "dataset: the wrong number of targets" "targets" "$tmp/o.npy" -- explain $model --input $ds --batch-size 4 --targets 1,2 --output "$tmp/o.npy"
! [ -e "$tmp/o.npy.part" ] && ok || bad "a refused dataset run left a part file"
"$cattr" explain $model --input $ds --steps 3000 --batch-size 1 --output "$tmp/kd.npy" -q &
kpid=$!
t=0
while ! grep -qs '"rows_done":[1-9]' "$tmp/kd.npy.part.json" && [ $t -lt 400 ]; do sleep 0.05; t=$((t + 1)); done
kill -9 $kpid 2>/dev/null
wait $kpid 2>/dev/null
[ -e "$tmp/kd.npy.part" ] && ! [ -e "$tmp/kd.npy" ] && ok || bad "a killed dataset run: no part file, or a finished file (waited $t): $(ls "$tmp")"
"$cattr" explain $model --input $ds --steps 3000 --batch-size 1 --output "$tmp/kd.npy" >"$tmp/stdout" 2>"$tmp/stderr" && ok || bad "dataset rerun failed"
grep -q "resuming" "$tmp/stderr" && ok || bad "the dataset rerun did not resume: $(cat "$tmp/stderr")"
expect_ok "dataset uninterrupted" explain $model --input $ds --steps 3000 --batch-size 1 --output "$tmp/kd_ref.npy" -q
# a run killed while it rewrote its progress file leaves OUT.part.json.tmp.<pid>: the next run on OUT removes it
# (its process is gone), and keeps a temporary of a live process
: >"$tmp/stale.npy.part.json.tmp.2147483646"
: >"$tmp/stale.npy.part.json.tmp.$$"
"$cattr" explain $model --input $ds --method saliency --batch-size 5 --output "$tmp/stale.npy" -q >/dev/null 2>&1 && ok ||
    bad "dataset run beside stale temporaries failed"
! [ -e "$tmp/stale.npy.part.json.tmp.2147483646" ] && [ -e "$tmp/stale.npy.part.json.tmp.$$" ] && ok ||
    bad "a dead process's temporary not removed, or a live one's removed: $(ls "$tmp" | grep tmp)"
rm -f "$tmp/stale.npy.part.json.tmp.$$"
cmp -s "$tmp/kd.npy" "$tmp/kd_ref.npy" && ok || bad "the resumed dataset output differs from an uninterrupted run's"
expect_ok "layer-gradcam overlay" explain $model --method layer-gradcam --layer conv2 --input $x --output "$tmp/lg.npy" --png "$tmp/lg.png" --overlay --sign all
[ -s "$tmp/lg.png" ] && ok || bad "overlay PNG not written"
expect_ok "neuron-ig" explain $model --method neuron-integrated-gradients --layer conv2 --neuron 3,1,1 --input $x --output "$tmp/m.npy"
expect_fail "neuron without selector" "selector" "$tmp/o.npy" -- explain $model --method neuron-gradient --layer conv2 --input $x --output "$tmp/o.npy"
expect_ok "guided-gradcam" explain $model --method guided-gradcam --layer conv2 --input $x --output "$tmp/m.npy"
expect_fail "bad feature mask" "mask" "$tmp/o.npy" -- explain $model --method feature-ablation --feature-mask tests/data/cli/mask_bad.npy --input $x --output "$tmp/o.npy"
expect_fail "one-row distribution" "baseline" "$tmp/o.npy" -- explain $model --method deeplift-shap --input $x --output "$tmp/o.npy"
expect_fail "n_samples 0" "--n-samples" "$tmp/o.npy" -- explain $model --method lime --n-samples 0 --input $x --output "$tmp/o.npy"
expect_fail "window too large" "window" "$tmp/o.npy" -- explain $model --method occlusion --sliding-window 1,9,9 --input $x --output "$tmp/o.npy"
expect_fail "no window" "window" "$tmp/o.npy" -- explain $model --method occlusion --input $x --output "$tmp/o.npy"
expect_fail "unknown layer" "closest" "$tmp/o.npy" -- explain $model --method guided-gradcam --layer conv9 --input $x --output "$tmp/o.npy"

# --- refused input, messages and exit codes ------------------------------------------------------------------------
d=tests/data/cli
expect_exit "overlapping safetensors" 2 "overlap" "$tmp/o.npy" -- explain $model --input $d/overlap.safetensors --output "$tmp/o.npy"
expect_exit "unindexed safetensors bytes" 2 "belong to no tensor" "$tmp/o.npy" -- explain $model --input $d/unindexed.safetensors --output "$tmp/o.npy"
expect_exit "npy trailing bytes" 2 "8 bytes after the data" "$tmp/o.npy" -- explain $model --input $d/trailing.npy --output "$tmp/o.npy"
expect_exit "empty batch" 1 "0 rows" "$tmp/o.npy" -- explain $model --input $d/empty_batch.npy --output "$tmp/o.npy"
expect_exit "non-UTF-8 name escaped" 1 "tensor 'x\\xff\\x01'" "$tmp/o.npy" -- explain $model --input $d/bad_name.safetensors --output "$tmp/o.npy"
expect_exit "steps range" 2 "--steps needs an integer from 1 to 1000000, not '1000001'" "$tmp/o.npy" -- explain $model --input $x --steps 1000001 --output "$tmp/o.npy"
expect_ok "target -1" explain $model --input $x --target -1 --output "$tmp/t1.npy"
grep -q "explaining class 9 (-1 counts from the end" "$tmp/stdout" && ok || bad "--target -1 does not say it explains class 9"
expect_ok "target 9" explain $model --input $x --target 9 --output "$tmp/t9.npy"
cmp -s "$tmp/t1.npy" "$tmp/t9.npy" && ok || bad "--target -1 and --target 9 differ"

# --- language models: the small checkpoints of tests/data/llm (no golden data needed) --------------------------------
tiny=tests/data/llm/tiny
for t in 1 2 3; do # the per-thread scratch of the attention kernels at every team size (a 1-thread abort once)
    OMP_NUM_THREADS=$t expect_ok "tiny explain-llm, $t threads" explain-llm $tiny --prompt "The capital of France is" \
        --target " Paris" --output "$tmp/tiny$t.json" -q
done
cmp -s "$tmp/tiny1.json" "$tmp/tiny2.json" && cmp -s "$tmp/tiny1.json" "$tmp/tiny3.json" && ok ||
    bad "explain-llm results differ across thread counts"
for kv in "rms_norm_eps 0" "rms_norm_eps -1e-6" "rms_norm_eps 1e999" "rope_theta 0" "rope_theta -10000"; do
    set -- $kv
    rm -rf "$tmp/cfg" && mkdir -p "$tmp/cfg" && ln -s "$PWD/$tiny/model.safetensors" "$tmp/cfg/model.safetensors"
    sed "s/\"$1\": [^,]*,/\"$1\": $2,/" $tiny/config.json >"$tmp/cfg/config.json"
    grep -q "\"$1\": $2," "$tmp/cfg/config.json" || bad "could not set $1 in the test config"
    expect_exit "config $1 $2" 2 "'$1' is" "$tmp/l.json" -- explain-llm "$tmp/cfg" --prompt-ids 1,2 --target-ids 3 --output "$tmp/l.json"
done
expect_exit "NaN in the attribution" 1 "first appears at node 'model.layers.0.mlp.up_proj' (op MatMul)" "$tmp/l.json" -- \
    explain-llm tests/data/llm/overflow --prompt-ids 1,2,3 --target-ids 4 --output "$tmp/l.json"
expect_exit "NaN in the ablation" 1 "first appears at node 'model.layers.0.mlp.up_proj'" "$tmp/l.json" -- \
    explain-llm tests/data/llm/overflow --prompt-ids 1,2,3 --target-ids 4 --method feature-ablation --output "$tmp/l.json"
expect_exit "invalid UTF-8 prompt" 2 "not valid UTF-8" "$tmp/l.json" -- explain-llm $tiny --prompt "$(printf 'ab\377c')" --target " x" --output "$tmp/l.json"
grep -q "cx_" "$tmp/stderr" && bad "a message names an internal function: $(cat "$tmp/stderr")" || ok

# --- corpus mode: one request per line, error records, resume after an interruption ----------------------------------
{
    echo '{"id": "a", "prompt": "The capital of France is", "target": " Paris"}'
    echo '{"id": "b", "prompt_ids": [1, 2, 3], "target_ids": [4, 5], "method": "feature-ablation"}'
    echo 'not json'
    echo '{"id": "c", "prompt": "Hello", "target": ""}'
    echo '{"id": 7, "template": "{} lives in {}", "slots": ["Anna", "Rome"], "target": " Italy", "method": "feature-ablation"}'
    echo '{"id": "d", "prompt": "x", "bogus": 1}'
    i=0
    while [ $i -lt 12 ]; do echo "{\"id\": \"p$i\", \"prompt\": \"The cat $i\", \"target\": \" sat\", \"steps\": 16}"; i=$((i + 1)); done
} >"$tmp/req.jsonl"
"$cattr" explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/all.jsonl" >"$tmp/stdout" 2>"$tmp/stderr"
[ $? -eq 1 ] && ok || bad "corpus with failed requests: exit $?"
[ "$(wc -l <"$tmp/all.jsonl")" -eq 19 ] && ok || bad "corpus: $(wc -l <"$tmp/all.jsonl") lines, expected the header and 18 records"
head -n 1 "$tmp/all.jsonl" | grep -q '^{"cattr_results":1,"command":"explain-llm","checkpoint":".*","checkpoint_fingerprint":"[0-9a-f]\{16\}","options":{}}$' && ok || bad "no header line: $(head -n 1 "$tmp/all.jsonl")"
grep -q '"error":"line 3 is not valid JSON","status":"bad request","id":3,"request_hash":"[0-9a-f]\{16\}"}' "$tmp/all.jsonl" && ok || bad "no error record for line 3"
grep -q "unknown field 'bogus'" "$tmp/all.jsonl" && ok || bad "no error record for the unknown field"
grep -q 'request "c": the target' "$tmp/stderr" && ok || bad "the failed request is not reported: $(cat "$tmp/stderr")"
grep -q '^{"input_tokens":.*"id":"a","request_hash":"[0-9a-f]\{16\}"}$' "$tmp/all.jsonl" && ok || bad "record a"
"$cattr" explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/all.jsonl" -q && ok || bad "rerun of a finished corpus: exit $?"
[ "$(wc -l <"$tmp/all.jsonl")" -eq 19 ] && ok || bad "a rerun added records"
# a run cut short: the header, the first 9 records and a torn tenth; the rerun drops the torn line and writes the rest
head -n 10 "$tmp/all.jsonl" >"$tmp/part.jsonl"
sed -n 11p "$tmp/all.jsonl" | head -c 40 >>"$tmp/part.jsonl"
"$cattr" explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/part.jsonl" -q 2>"$tmp/stderr"
cmp -s "$tmp/all.jsonl" "$tmp/part.jsonl" && ok || bad "resumed corpus differs from the uninterrupted one"
grep -q "dropped an incomplete last line" "$tmp/stderr" && ok || bad "the torn line is not reported"
# killed (SIGKILL) while it runs, then resumed: the same file
rm -f "$tmp/k.jsonl"
"$cattr" explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/k.jsonl" -q 2>/dev/null &
kpid=$!
sleep 0.2
kill -9 $kpid 2>/dev/null
wait $kpid 2>/dev/null
"$cattr" explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/k.jsonl" -q 2>/dev/null
cmp -s "$tmp/all.jsonl" "$tmp/k.jsonl" && ok || bad "corpus resumed after kill -9 differs"
expect_exit "corpus without jsonl output" 2 "--prompts needs --output RESULTS.jsonl" "" -- explain-llm $tiny --prompts "$tmp/req.jsonl"
expect_exit "corpus with --prompt" 2 "--prompts takes the prompts" "" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --prompt x --output "$tmp/z.jsonl"
printf 'garbage\n' >"$tmp/notres.jsonl"
expect_exit "corpus into a foreign file" 2 "is not a results file" "" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/notres.jsonl"
[ "$(cat "$tmp/notres.jsonl")" = garbage ] && ok || bad "a foreign file was changed"

# --- language models (the golden checkpoints) ---------------------------------------------------------------------
golden=${CATTR_GOLDEN:-../shared/golden}
qwen=$golden/llm/qwen3-tiny
if [ -d "$qwen" ]; then # the checkpoint's chat template (ChatML with Qwen3's thinking switched off)
    printf 'Sky is green. Sun is up.' > "$tmp/q1.txt"; printf 'Sea is blue.' > "$tmp/q2.txt"
    expect_ok "explain-context chat template" explain-context "$qwen" --question "sky?" --context "$tmp/q1.txt" \
        --context "$tmp/q2.txt" --answer " green" --sources sentences
    grep -q '^leave-one-out over 3 sentences: 3 ablations' "$tmp/stdout" && ok || bad "explain-context: qwen3-tiny"
    expect_exit "explain-context proxy of another tokenizer" 1 "a proxy must share the model's tokenizer" "$tmp/pq.json" -- \
        explain-context "$qwen" --question "sky?" --context "$tmp/q1.txt" --answer " green" --method proxy \
        --proxy tests/data/llm/tiny --json "$tmp/pq.json"
fi
if [ -d "$qwen" ]; then
    expect_ok "explain-llm" explain-llm "$qwen" --prompt "The capital of France is" --target " Paris" --steps 8 \
        --output "$tmp/llm.json" --html "$tmp/llm.html"
    grep -q '"token_attr"' "$tmp/llm.json" && grep -q '"seq_attr"' "$tmp/llm.json" && ok || bad "explain-llm JSON keys"
    grep -q 'Paris' "$tmp/llm.html" && grep -q 'France' "$tmp/llm.html" && ok || bad "explain-llm HTML lacks tokens"
    expect_ok "explain-llm generate" explain-llm "$qwen" --prompt-ids 785,6722 --method feature-ablation --max-new-tokens 2 -q
    expect_ok "explain-llm kernel-shap" explain-llm "$qwen" --prompt "The capital of France is" --target " Paris" \
        --method kernel-shap --n-samples 20 --output "$tmp/ks.json"
    grep -q '"token_attr":	null' "$tmp/ks.json" && ok || bad "kernel-shap JSON must have token_attr null"
    expect_ok "explain-llm template" explain-llm "$qwen" --template "{} is the capital of {}" --slot Paris --slot France \
        --method feature-ablation --target "." -q
    expect_fail "llm empty target" "nothing" "$tmp/l.json" -- explain-llm "$qwen" --prompt "Hi" --target "" --output "$tmp/l.json"
    expect_fail "llm bad id" "vocabulary" "$tmp/l.json" -- explain-llm "$qwen" --prompt-ids 1,999999 --target-ids 5 --output "$tmp/l.json"
    expect_fail "llm no tokenizer" "tokenizer" "" -- explain-llm "$golden/llm/llama-tiny" --prompt "Hi"
    expect_fail "llm missing folder" "config.json" "" -- explain-llm "$tmp/none" --prompt "Hi"
    mkdir -p "$tmp/broken"
    cp "$qwen/config.json" "$tmp/broken/"
    head -c 5000 "$qwen/model.safetensors" >"$tmp/broken/model.safetensors"
    expect_fail "llm truncated weights" "model.safetensors" "$tmp/l.json" -- explain-llm "$tmp/broken" --prompt-ids 1,2 --target-ids 3 --output "$tmp/l.json"
    printf '\377\377\377\377\377\377\377\177{}' >"$tmp/broken/model.safetensors"
    expect_fail "llm malicious header" "header" "$tmp/l.json" -- explain-llm "$tmp/broken" --prompt-ids 1,2 --target-ids 3 --output "$tmp/l.json"
    expect_fail "llm high float64" "float32" "$tmp/l.json" -- explain-llm "$qwen" --prompt-ids 5,6,7 --target-ids 8 --precision high --dtype float64 --output "$tmp/l.json"
    expect_fail "llm bad precision" "highest or high" "" -- explain-llm "$qwen" --prompt-ids 5,6,7 --target-ids 8 --precision medium
    expect_fail "llm ppe 0" "from 1 to" "" -- explain-llm "$qwen" --prompt-ids 5,6,7 --target-ids 8 --perturbations-per-eval 0
    expect_ok "explain-llm ppe 2" explain-llm "$qwen" --prompt-ids 5,6,7,9 --target-ids 8 --method feature-ablation \
        --perturbations-per-eval 2 --no-prefix-cache -q
    grep -q "peak memory: .* MiB resident" "$tmp/stderr" && ok || bad "explain-llm reports no peak memory"
else
    echo "SKIP: language-model CLI checks ($qwen not found)"
fi

# --- Captum's argument forms: a single input's Occlusion window as a flat tuple (2,) and as a tuple of tuples ((2,),)
occ=$golden/captum/custom_mlp__Occlusion
if [ -d "$occ" ] && command -v python3 >/dev/null; then
    cp -r "$occ" "$tmp/occ_tuples"
    python3 -c 'import json, sys
p = sys.argv[1]; c = json.load(open(p))
c["attribute_args"]["sliding_window_shapes"] = [c["attribute_args"]["sliding_window_shapes"]]
json.dump(c, open(p, "w"))' "$tmp/occ_tuples/case.json" && ok || bad "could not rewrite the window"
    expect_ok "replay occlusion, flat window" replay "$occ"
    expect_ok "replay occlusion, tuple-of-tuples window" replay "$tmp/occ_tuples"
    # --digest: the same call (the case and its copy with the other window form) gives the same hash of its bits
    expect_ok "replay --digest" replay --digest "$occ" "$tmp/occ_tuples"
    d1=$(sed -n 's/^digest custom_mlp__Occlusion \([0-9a-f]*\)$/\1/p' "$tmp/stdout" | head -1)
    d2=$(sed -n 's/^digest custom_mlp__Occlusion \([0-9a-f]*\)$/\1/p' "$tmp/stdout" | sed -n 2p)
    [ ${#d1} -eq 16 ] && [ "$d1" = "$d2" ] && ok || bad "replay --digest: '$d1' vs '$d2'"
    expect_ok "replay --digest float32" replay --digest --dtype float32 "$occ"
    d3=$(sed -n 's/^digest custom_mlp__Occlusion \([0-9a-f]*\)$/\1/p' "$tmp/stdout")
    [ ${#d3} -eq 16 ] && [ "$d3" != "$d1" ] && ok || bad "replay --digest: float32 '$d3' equals float64 '$d1'"
else
    echo "SKIP: Captum argument forms ($occ or python3 not found)"
fi

# --- --additional NAME=FILE: any input attributed, the others given by name ----------------------------------------
mi=$golden/captum/basic_multi_input__IntegratedGradients
if [ -d "$mi" ] && [ -x /usr/bin/python3 ]; then
    t=$mi/tensors.safetensors
    expect_ok "saliency of all inputs" explain "$mi/model.onnx" --method saliency --input "$t:input.0" \
        --input "$t:input.1" --additional "$t:additional.0" --target 0 --dtype float64 --output "$tmp/all.safetensors" --quiet
    expect_ok "saliency of input1, the others by name" explain "$mi/model.onnx" --method saliency --input "$t:input.1" \
        --additional "input2=$t:additional.0" --additional "input0=$t:input.0" --target 0 --dtype float64 \
        --output "$tmp/named.npy" --quiet
    /usr/bin/python3 -c 'import json, struct, sys, numpy as np
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])["attr.1"]
s, e = h["data_offsets"]; want = np.frombuffer(b[8 + n + s:8 + n + e], np.float64).reshape(h["shape"])
got = np.load(sys.argv[2]); assert got.shape == want.shape and np.array_equal(got, want), (got, want)' \
        "$tmp/all.safetensors" "$tmp/named.npy" && ok || bad "--additional NAME=FILE: input1's saliency differs"
    expect_exit "additional unknown name" 2 "has no input called 'inputX' (its inputs: 'input0', 'input1', 'input2')" \
        "$tmp/n2.npy" -- explain "$mi/model.onnx" --method saliency --input "$t:input.1" --additional "inputX=$t:input.0" \
        --additional "input2=$t:additional.0" --target 0 --output "$tmp/n2.npy"
    expect_exit "additional named and not" 2 "give every --additional as NAME=FILE, or none" "$tmp/n2.npy" -- \
        explain "$mi/model.onnx" --method saliency --input "$t:input.1" --additional "input0=$t:input.0" \
        --additional "$t:additional.0" --target 0 --output "$tmp/n2.npy"
    expect_exit "additional named twice" 2 "input 'input0' is given twice" "$tmp/n2.npy" -- \
        explain "$mi/model.onnx" --method saliency --input "$t:input.1" --additional "input0=$t:input.0" \
        --additional "input0=$t:additional.0" --target 0 --output "$tmp/n2.npy"
    expect_exit "additional named, wrong input count" 2 "with 1 given by name, 2 are attributed; got 1 --input" \
        "$tmp/n2.npy" -- explain "$mi/model.onnx" --method saliency --input "$t:input.1" \
        --additional "input0=$t:input.0" --target 0 --output "$tmp/n2.npy"
else
    echo "SKIP: --additional NAME=FILE ($mi or /usr/bin/python3 not found)"
fi

# --- explain --metrics: Captum's infidelity and sensitivity_max in the JSON, the same numbers for the same seed ------
expect_ok "metrics json" explain $model --method saliency --input tests/data/cli/batch2.npy --target 3 \
    --output "$tmp/met.json" --metrics infidelity,sensitivity --metric-samples 6 --seed 9
expect_ok "metrics json again" explain $model --method saliency --input tests/data/cli/batch2.npy --target 3 \
    --output "$tmp/met2.json" --metrics infidelity,sensitivity --metric-samples 6 --seed 9
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import json, math, sys
a, b = (json.load(open(f))["metrics"] for f in sys.argv[1:3])
assert set(a) == {"infidelity", "sensitivity_max"}, a
for k in a:
    v = a[k]["values"]
    assert len(v) == 2 and all(math.isfinite(x) and x >= 0 for x in v), a
    assert v == b[k]["values"], (a, b)
    assert a[k]["n_perturb_samples"] == 6
' "$tmp/met.json" "$tmp/met2.json"; then ok; else bad "metrics json: values"; fi
fi
expect_ok "metrics npy" explain $model --method integrated-gradients --steps 8 --input $x --output "$tmp/met.npy" \
    --metrics sensitivity --metric-samples 3
if grep -q "sensitivity_max over 1 example" "$tmp/stdout"; then ok; else bad "metrics npy: no sensitivity line"; cat "$tmp/stdout"; fi
expect_exit "metrics unknown" 2 "--metrics: unknown metric 'fidelity'" "$tmp/met3.json" -- \
    explain $model --input $x --output "$tmp/met3.json" --metrics fidelity
expect_exit "metrics samples" 2 "--metric-samples" "$tmp/met3.json" -- \
    explain $model --input $x --output "$tmp/met3.json" --metrics infidelity --metric-samples 0
expect_exit "metrics noise" 2 "--metric-noise must be a positive number" "$tmp/met3.json" -- \
    explain $model --input $x --output "$tmp/met3.json" --metrics infidelity --metric-noise -1
expect_exit "metrics layer infidelity" 1 "infidelity failed: attributions[0] has shape [1, 8, 8, 8]; input 0 has [1, 1, 8, 8]" "$tmp/met3.json" -- \
    explain $model --method layer-activation --layer relu1 --input $x --output "$tmp/met3.json" \
    --metrics infidelity
expect_exit "metrics streamed" 2 "--metrics: not with --batch-size" "$tmp/met3.npy" -- \
    explain $model --method saliency --input tests/data/cli/batch2.npy --target 3 --batch-size 1 \
    --output "$tmp/met3.npy" --metrics infidelity

# --- explain --metrics deletion,insertion: the curves and their areas in the JSON, the plot --------------------------
expect_ok "curves json" explain $model --method integrated-gradients --steps 8 --input tests/data/cli/batch2.npy \
    --target 3 --output "$tmp/cur.json" --metrics deletion,insertion --curve-steps 5 --curve-softmax \
    --curve-png "$tmp/cur.png"
if grep -q "deletion over 2 examples (area under the curve)" "$tmp/stdout" && [ -s "$tmp/cur.png" ]; then ok; else
    bad "curves: no deletion line or no plot"; cat "$tmp/stdout"; fi
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import json, math, sys
m = json.load(open(sys.argv[1]))["metrics"]
assert set(m) == {"deletion", "insertion"}, m
for k, v in m.items():
    assert v["n_steps"] == 5 and v["score"] == "softmax at the target" and len(v["curves"]) == 2, v
    for c, area in zip(v["curves"], v["values"]):
        assert len(c) == 6 and all(0 <= y <= 1 for y in c), c
        assert abs(area - sum((a + b) / 2 for a, b in zip(c, c[1:])) / 5) < 1e-6, (area, c)
d, i = m["deletion"]["curves"][0], m["insertion"]["curves"][0]
assert abs(d[0] - i[-1]) < 1e-6 and d[0] > 0.5  # the model at the input: example 0 is a confident 3
assert m["deletion"]["values"][0] < m["insertion"]["values"][0]
' "$tmp/cur.json"; then ok; else bad "curves json: values"; fi
fi
expect_exit "curves png name" 2 "--curve-png must name a .png file" "$tmp/cur2.json" -- \
    explain $model --input $x --output "$tmp/cur2.json" --metrics deletion --curve-png "$tmp/cur2.jpg"
expect_exit "curves layer" 1 "deletion failed: attributions[0] has shape [1, 8, 8, 8]; input 0 has [1, 1, 8, 8]" \
    "$tmp/cur2.json" -- \
    explain $model --method layer-activation --layer relu1 --input $x --output "$tmp/cur2.json" --metrics deletion \
    --curve-png "$tmp/cur2.png"
if [ ! -e "$tmp/cur2.png" ]; then ok; else bad "curves layer: a plot was written"; fi

# --- explain --metrics randomization: the check's table and JSON; a module without weights refused ------------------
expect_ok "randomization" explain $model --method saliency --input tests/data/cli/batch2.npy --target 3 \
    --output "$tmp/rnd.json" --metrics randomization --seed 2
if grep -q "randomization (the modules randomised from the output down" "$tmp/stdout" && grep -q "^  conv1 " "$tmp/stdout"
then ok; else bad "randomization: no table"; cat "$tmp/stdout"; fi
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["metrics"]["randomization"]
assert r["modules"] == ["fc2", "fc1", "conv2", "conv1"] and r["cascade"] is True, r
assert len(r["spearman"]) == 4 and all(len(row) == 2 and all(-1 <= v <= 1 for v in row) for row in r["spearman"])
assert r["values"] == r["spearman"][-1] and abs(r["mean"] - sum(r["values"]) / 2) < 1e-12
' "$tmp/rnd.json"; then ok; else bad "randomization json"; fi
fi
expect_exit "randomization module" 2 "randomising 'fc9': the model has no weights in a module 'fc9'" "$tmp/rnd2.json" -- \
    explain $model --method saliency --input $x --target 3 --output "$tmp/rnd2.json" --metrics randomization \
    --randomize-modules fc2,fc9
expect_ok "info weight modules" info $model
grep -q "modules with weights (in the order of use): conv1, conv2, fc1, fc2" "$tmp/stdout" && ok || bad "info: no weight modules"

# --- evaluate: explain whose metrics are the point; --output optional (a .json) --------------------------------------
expect_ok "evaluate" evaluate $model --method saliency --input tests/data/cli/batch2.npy --target 3 \
    --metric infidelity,deletion --seed 9
if grep -q "infidelity over 2 examples" "$tmp/stdout" && grep -q "deletion over 2 examples" "$tmp/stdout" &&
    ! grep -q "^wrote" "$tmp/stdout"; then ok; else bad "evaluate: the metric lines"; cat "$tmp/stdout"; fi
expect_ok "evaluate json" evaluate $model --method saliency --input tests/data/cli/batch2.npy --target 3 \
    --metric infidelity --metric-samples 6 --seed 9 --output "$tmp/ev.json"
if [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 -c 'import json, sys
a, b = (json.load(open(f))["metrics"]["infidelity"]["values"] for f in sys.argv[1:3])
assert a == b, (a, b)  # the same numbers as explain --metrics for the same seed
' "$tmp/ev.json" "$tmp/met.json" && ok || bad "evaluate json: not explain's numbers"
fi
expect_exit "evaluate no metric" 2 "evaluate: give --metric LIST" "$tmp/ev2.json" -- \
    evaluate $model --method saliency --input $x --target 3 --output "$tmp/ev2.json"
expect_exit "evaluate npy" 2 "evaluate: --output must be a .json file" "$tmp/ev2.npy" -- \
    evaluate $model --method saliency --input $x --target 3 --metric infidelity --output "$tmp/ev2.npy"
expect_exit "evaluate batch" 2 "evaluate: --batch-size and --split are explain's" "$tmp/ev2.json" -- \
    evaluate $model --method saliency --input $x --target 3 --metric infidelity --batch-size 1

# --- attack: FGSM and PGD write an adversarial input within epsilon; bad arguments leave nothing -----------------------
expect_ok "attack fgsm" attack $model --input tests/data/cli/batch2.npy --target 3 --epsilon 0.1 --loss cross-entropy \
    --output "$tmp/adv.npy" --png "$tmp/adv.png"
expect_ok "attack pgd l2" attack $model --input tests/data/cli/batch2.npy --target 3 --method pgd --epsilon 0.5 \
    --step-size 0.2 --steps 4 --norm l2 --lower 0 --upper 1 --output "$tmp/adv2.npy"
expect_ok "attack pgd targeted" attack $model --input $x --target 5 --targeted --method pgd --epsilon 0.3 \
    --random-start --seed 4 --output "$tmp/adv3.npy"
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import numpy as np, sys
x = np.load(sys.argv[1]); a = np.load(sys.argv[2]); b = np.load(sys.argv[3])
assert a.shape == x.shape and a.dtype == x.dtype and 0 < np.abs(a - x).max() <= 0.1 + 1e-6, np.abs(a - x).max()
d = (b - x).reshape(len(x), -1)
assert (np.linalg.norm(d, axis=1) <= 0.5 + 1e-5).all() and b.min() >= 0 and b.max() <= 1
' tests/data/cli/batch2.npy "$tmp/adv.npy" "$tmp/adv2.npy"; then ok; else bad "attack: the adversarial inputs"; fi
fi
if grep -q "at the adversarial input" "$tmp/stdout"; then ok; else bad "attack: no loss line"; cat "$tmp/stdout"; fi
expect_exit "attack no epsilon" 2 "--epsilon is required" "$tmp/adv4.npy" -- \
    attack $model --input $x --target 3 --output "$tmp/adv4.npy"
expect_exit "attack method" 2 "--method must be fgsm or pgd" "$tmp/adv4.npy" -- \
    attack $model --input $x --target 3 --epsilon 0.1 --method cw --output "$tmp/adv4.npy"
expect_exit "attack target" 2 "give --target or --targets" "$tmp/adv4.npy" -- \
    attack $model --input $x --epsilon 0.1 --output "$tmp/adv4.npy"
expect_exit "attack target range" 1 "target" "$tmp/adv4.npy" -- \
    attack $model --input $x --target 10 --epsilon 0.1 --output "$tmp/adv4.npy"

# --- explain-context: sources scored by removing them (loo, surrogate), sentences, the quality numbers, the template;
# the refusals ------------------------------------------------------------------------------------------------------------
printf 'Sky is green. Sun is up.' > "$tmp/c1.txt"; printf 'Sea is blue.' > "$tmp/c2.txt"; : > "$tmp/c0.txt"
ctpl="C: {context} Q: {question} A:"
expect_ok "explain-context loo" explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c1.txt" \
    --context "$tmp/c2.txt" --answer " green" --json "$tmp/ctx1.json" --quality --html "$tmp/ctx1.html"
grep -q 'class="src"' "$tmp/ctx1.html" && ok || bad "explain-context: the HTML page lacks the sources"
grep -q '^leave-one-out over 2 documents: 2 ablations' "$tmp/stdout" && ok || { bad "explain-context: no loo line"; cat "$tmp/stdout"; }
expect_ok "explain-context surrogate" explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c1.txt" \
    --context "$tmp/c2.txt" --max-new 3 --method surrogate --sources sentences --samples 16 --seed 3 --quality \
    --json "$tmp/ctx2.json"
expect_ok "explain-context surrogate again" explain-context $tiny --template "$ctpl" --question "sky?" \
    --context "$tmp/c1.txt" --context "$tmp/c2.txt" --max-new 3 --method surrogate --sources sentences --samples 16 \
    --seed 3 --quality --json "$tmp/ctx3.json" --quiet
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import json, math, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:4])
assert a["method"] == "loo" and len(a["sources"]) == 2 and a["ablations"] == 2, a
assert [s["text"] for s in a["sources"]] == ["Sky is green. Sun is up.", "Sea is blue."], a["sources"]
assert all(math.isfinite(s["score"]) for s in a["sources"]) and set(a["top_k_drop"]) == {"1", "3", "5"}, a
assert b["sources_kind"] == "sentences" and [s["text"] for s in b["sources"]] == ["Sky is green. ", "Sun is up.",
                                                                                  "Sea is blue."], b["sources"]
assert -1 <= b["lds"] <= 1 and b["ablations"] == 16 and b["held_out"] == 32, b
assert [s["score"] for s in b["sources"]] == [s["score"] for s in c["sources"]], (b, c)
' "$tmp/ctx1.json" "$tmp/ctx2.json" "$tmp/ctx3.json"; then ok; else bad "explain-context: the JSON"; fi
fi
expect_ok "explain-context gradient" explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c1.txt" \
    --context "$tmp/c2.txt" --answer " green" --method gradient --quality
grep -q '^gradient x activation over 2 documents: 0 ablations' "$tmp/stdout" && ok || bad "explain-context: no gradient line"
expect_ok "explain-context hierarchical" explain-context $tiny --template "$ctpl" --question "sky?" \
    --context "$tmp/c1.txt" --context "$tmp/c2.txt" --answer " green" --method hierarchical --top-documents 1
grep -q '^hierarchical over [23] sources: [345] ablations' "$tmp/stdout" && ok || { bad "explain-context: hierarchical"; cat "$tmp/stdout"; }
expect_exit "explain-context no template" 2 "no readable tokenizer_config.json; give --template" "$tmp/ctx4.json" -- \
    explain-context $tiny --question "sky?" --context "$tmp/c1.txt" --answer " g" --json "$tmp/ctx4.json"
expect_exit "explain-context template" 2 "--template must hold {context} and {question}" "$tmp/ctx4.json" -- \
    explain-context $tiny --template "C: {context}" --question "sky?" --context "$tmp/c1.txt" --json "$tmp/ctx4.json"
expect_exit "explain-context no context" 2 "give at least one --context FILE" "$tmp/ctx4.json" -- \
    explain-context $tiny --template "$ctpl" --question "sky?" --json "$tmp/ctx4.json"
expect_exit "explain-context empty" 2 "is empty" "$tmp/ctx4.json" -- \
    explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c0.txt" --json "$tmp/ctx4.json"
expect_exit "explain-context method" 2 "--method must be loo, surrogate, gradient, hierarchical or proxy" "$tmp/ctx4.json" -- \
    explain-context $tiny --template "$ctpl" --question "q" --context "$tmp/c1.txt" --method shap --json "$tmp/ctx4.json"
# the proxy (the model as its own: leave-one-out's scores), lines, a spans file, scores per answer token
printf 'Sky is green.\nSun is up.' > "$tmp/c3.txt"
expect_ok "explain-context proxy" explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c3.txt" \
    --context "$tmp/c2.txt" --answer " green" --method proxy --proxy $tiny --proxy-top 1 --sources lines --per-token \
    --json "$tmp/ctx5.json"
grep -q '^proxy over 3 lines: 1 ablations and 3 with the proxy' "$tmp/stdout" && ok || { bad "explain-context: proxy"; cat "$tmp/stdout"; }
expect_ok "explain-context loo lines" explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c3.txt" \
    --context "$tmp/c2.txt" --answer " green" --sources lines --json "$tmp/ctx6.json" --quiet
printf '[[[0, 3]], ["Sea is", " blue."]]' > "$tmp/spans.json"
expect_ok "explain-context spans" explain-context $tiny --template "$ctpl" --question "sky?" --context "$tmp/c3.txt" \
    --context "$tmp/c2.txt" --answer " green" --sources "$tmp/spans.json" --json "$tmp/ctx7.json" --quiet
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import json, sys
p, l, s = (json.load(open(f)) for f in sys.argv[1:4])
assert [x["text"] for x in l["sources"]] == ["Sky is green.\n", "Sun is up.", "Sea is blue."], l["sources"]
assert [x["score"] for x in p["sources"]] == [x["score"] for x in l["sources"]] and p["proxy_ablations"] == 3, (p, l)
assert sum(x["rescored"] for x in p["sources"]) == 1 and p["sources"][p["ranking"][0]]["rescored"], p
assert p["ranking"] == l["ranking"] and len(p["answer_token_texts"]) == p["answer_tokens"], p
assert all(abs(sum(x["token_scores"]) - x["score"]) < 1e-6 for x in p["sources"]), p
assert [x["text"] for x in s["sources"]] == ["Sky", " is green.\nSun is up.", "Sea is", " blue."], s["sources"]
' "$tmp/ctx5.json" "$tmp/ctx6.json" "$tmp/ctx7.json"; then ok; else bad "explain-context: proxy / lines / spans JSON"; fi
fi
expect_exit "explain-context proxy without --proxy" 2 "--method proxy needs --proxy DIR" "" -- \
    explain-context $tiny --template "$ctpl" --question "q" --context "$tmp/c1.txt" --method proxy
printf '[[[0, 3]]]' > "$tmp/spans1.json"
expect_exit "explain-context spans per document" 2 "one entry per document (2)" "$tmp/ctx4.json" -- \
    explain-context $tiny --template "$ctpl" --question "q" --context "$tmp/c1.txt" --context "$tmp/c2.txt" \
    --sources "$tmp/spans1.json" --json "$tmp/ctx4.json"
# corpus mode: a line per request (texts or files), errors as records, a rerun resumes, other options are refused
printf '%s\n' '{"id": "a", "question": "sky?", "contexts": ["Sky is green.", "Sea is blue."], "answer": " green"}' \
    "{\"id\": \"b\", \"question\": \"sea?\", \"context_files\": [\"$tmp/c1.txt\", \"$tmp/c2.txt\"], \"answer\": \" blue\"}" \
    '{"id": "c", "question": "sea?", "contexts": ["x"], "bogus": 1}' > "$tmp/creq.jsonl"
expect_exit "explain-context corpus" 1 "unknown field 'bogus'" "" -- explain-context $tiny --template "$ctpl" \
    --requests "$tmp/creq.jsonl" --output "$tmp/cres.jsonl"
[ "$(wc -l < "$tmp/cres.jsonl")" -eq 4 ] && grep -q '"id":"b"' "$tmp/cres.jsonl" && grep -q '"command":"explain-context"' "$tmp/cres.jsonl" \
    && ok || { bad "explain-context corpus: results"; cat "$tmp/cres.jsonl"; }
expect_ok "explain-context corpus rerun" explain-context $tiny --template "$ctpl" --requests "$tmp/creq.jsonl" --output "$tmp/cres.jsonl"
grep -q '3 already in' "$tmp/stderr" && [ "$(wc -l < "$tmp/cres.jsonl")" -eq 4 ] && ok || { bad "explain-context corpus: rerun"; cat "$tmp/stderr"; }
expect_exit "explain-context corpus other options" 2 "other options" "" -- explain-context $tiny --template "$ctpl" \
    --requests "$tmp/creq.jsonl" --output "$tmp/cres.jsonl" --method surrogate
expect_exit "explain-context corpus into an explain-llm file" 2 "another version or command" "" -- explain-context $tiny \
    --template "$ctpl" --requests "$tmp/creq.jsonl" --output "$tmp/all.jsonl"
expect_exit "explain-context corpus needs --output" 2 "--requests needs --output" "" -- explain-context $tiny \
    --template "$ctpl" --requests "$tmp/creq.jsonl"

# --- influence: TracIn scores, self influence (the diagonal when the test examples are the training ones), checkpoints
# with learning rates, and the refusals --------------------------------------------------------------------------------
b2=tests/data/cli/batch2.npy; l2=tests/data/cli/labels2.npy; ck=tests/data/cli/fc2_bias0.safetensors
expect_ok "influence" influence $model --train $b2 --train-labels $l2 --test $b2 --test-labels $l2 --layers fc1,fc2 \
    --k 2 --json "$tmp/top.json" --output "$tmp/inf.npy"
grep -q '"indices"' "$tmp/top.json" && ok || bad "influence: --json lacks the indices"
grep -q '^test 1: proponents' "$tmp/stdout" && ok || bad "influence: no top-k line"
expect_ok "influence self" influence $model --train $b2 --train-labels $l2 --self-influence --layers fc1,fc2 \
    --output "$tmp/self.npy" --batch 1
expect_ok "influence checkpoints" influence $model --train $b2 --train-labels $l2 --test $b2 --test-labels $l2 \
    --layers fc2 --checkpoint $ck@0.5 --checkpoint $ck@1.5 --output "$tmp/inf2.npy" --dtype float64
expect_ok "influence checkpoint" influence $model --train $b2 --train-labels $l2 --test $b2 --test-labels $l2 \
    --layers fc2 --checkpoint $ck --output "$tmp/inf1.npy" --dtype float64
expect_ok "influence onnx checkpoint" influence $model --train $b2 --train-labels $l2 --test $b2 --test-labels $l2 \
    --layers fc2 --checkpoint $model@1 --output "$tmp/inf3.npy" --dtype float64
expect_ok "influence plain" influence $model --train $b2 --train-labels $l2 --test $b2 --test-labels $l2 \
    --layers fc2 --output "$tmp/inf4.npy" --dtype float64
if [ -x /usr/bin/python3 ]; then
    if /usr/bin/python3 -c 'import numpy as np, sys
s, d, two, one, onnx, plain = (np.load(f) for f in sys.argv[1:7])
assert s.shape == (2, 2) and d.shape == (2,) and np.isfinite(s).all(), (s.shape, d.shape)
assert np.allclose(np.diag(s), d, rtol=1e-5) and np.allclose(s, s.T, rtol=1e-5), (s, d)
assert np.allclose(two, 2 * one, rtol=1e-12) and not np.allclose(one, plain), (two, one, plain)
assert np.array_equal(onnx, plain), (onnx, plain)
' "$tmp/inf.npy" "$tmp/self.npy" "$tmp/inf2.npy" "$tmp/inf1.npy" "$tmp/inf3.npy" "$tmp/inf4.npy"; then ok
    else bad "influence: the scores"; fi
fi
expect_exit "influence conv" 1 "per-example gradients are computed for the weights and biases of Gemm and MatMul" \
    "$tmp/inf5.npy" -- influence $model --train $b2 --train-labels $l2 --self-influence --output "$tmp/inf5.npy"
expect_exit "influence layer" 2 "'fc9' is no module with weights" "$tmp/inf5.npy" -- \
    influence $model --train $b2 --train-labels $l2 --self-influence --layers fc9 --output "$tmp/inf5.npy"
expect_exit "influence test" 2 "give --test and --test-labels" "$tmp/inf5.npy" -- \
    influence $model --train $b2 --train-labels $l2 --output "$tmp/inf5.npy"
expect_exit "influence labels" 2 "--test-labels has 2 rows for 1 test examples" "$tmp/inf5.npy" -- \
    influence $model --train $b2 --train-labels $l2 --test $x --test-labels $l2 --layers fc2 --output "$tmp/inf5.npy"
expect_exit "influence label range" 1 "labels: example 1 has class 12; the output has 10 per example" \
    "$tmp/inf5.npy" -- influence $model --train $b2 --train-labels tests/data/cli/labels_bad.npy --self-influence \
    --layers fc2 --output "$tmp/inf5.npy"
expect_exit "influence checkpoint kind" 2 "--checkpoint must be a .safetensors or an .onnx file" "$tmp/inf5.npy" -- \
    influence $model --train $b2 --train-labels $l2 --self-influence --checkpoint $b2 --output "$tmp/inf5.npy"
expect_exit "influence checkpoint weights" 2 "holds none of the weights of --layers" "$tmp/inf5.npy" -- \
    influence $model --train $b2 --train-labels $l2 --self-influence --layers fc1 --checkpoint $ck --output "$tmp/inf5.npy"

echo "$((checks - fails)) passed, $fails failed"
[ $fails -eq 0 ]
