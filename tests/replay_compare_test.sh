#!/bin/sh
# `cattr replay` and `cattr compare` on hostile or malformed input: every count and index read from a golden case
# (case.json, a language-model cases.json) is refused beyond the C API's limits, with a message naming the case file,
# the field and the value, quickly (a case with "n_steps": 2e8 used to allocate 3.1 GB and run for minutes); a
# malformed --devices is a usage error naming it; a fatal error prints nothing but the error (no header on stdout).
# usage: replay_compare_test.sh CATTR_BINARY (run from the repository root). The replay checks copy golden cases from
# ${CATTR_GOLDEN:-../shared/golden} (skipped, saying so, without it or without python3).
cattr=$1
golden=${CATTR_GOLDEN:-../shared/golden}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0
model=models/digits/digits.onnx
x=models/digits/samples/digit_3.npy

ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }

# run NAME CODE -- ARGS...: runs cattr (at most 60 s) and checks its exit code
run() {
    name=$1; code=$2; shift 3
    timeout 60 "$cattr" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    if [ $rc -eq 124 ]; then bad "$name: still running after 60 s"; return 1; fi
    if [ $rc -ne "$code" ]; then bad "$name: exit $rc, expected $code"; cat "$tmp/stdout" "$tmp/stderr"; return 1; fi
    ok
}
# has NAME FILE TEXT...: FILE holds every TEXT
has() {
    name=$1; f=$2; shift 2
    for t in "$@"; do
        if ! grep -qF -- "$t" "$f"; then bad "$name: $(basename "$f") lacks '$t':"; cat "$f"; return 1; fi
    done
    ok
}
empty() { if [ -s "$2" ]; then bad "$1: printed to $(basename "$2"):"; cat "$2"; else ok; fi; }

# --- compare: --devices must be two device names ------------------------------------------------------------------
for d in , cpu, ,cpu cpu cpu,,cpu-check "cpu ,cpu-check" "" cpu,nope; do
    run "compare --devices '$d'" 2 -- compare $model --input $x --devices "$d"
    has "compare --devices '$d'" "$tmp/stderr" "--devices" "'$d'"
    empty "compare --devices '$d'" "$tmp/stdout"
done
# --- compare: a fatal error prints nothing but the error ------------------------------------------------------------
run "compare a missing path" 2 -- compare "$tmp/none"
has "compare a missing path" "$tmp/stderr" "$tmp/none"
empty "compare a missing path" "$tmp/stdout"
run "compare a model without --input" 2 -- compare $model
has "compare a model without --input" "$tmp/stderr" "--input"
empty "compare a model without --input" "$tmp/stdout"
printf 'garbage\001\002' >"$tmp/garbage.onnx"
run "compare a garbage model" 2 -- compare "$tmp/garbage.onnx" --input $x
has "compare a garbage model" "$tmp/stderr" "model"
empty "compare a garbage model" "$tmp/stdout"
mkdir "$tmp/nocases"
run "compare a folder without cases" 2 -- compare "$tmp/nocases"
has "compare a folder without cases" "$tmp/stderr" "$tmp/nocases"
empty "compare a folder without cases" "$tmp/stdout"
run "compare a model and a missing path" 2 -- compare $model "$tmp/none" --input $x
empty "compare a model and a missing path" "$tmp/stdout"
# and a good run still prints its header first
run "compare a model" 0 -- compare $model --input $x --target 3
head -n 1 "$tmp/stdout" | grep -q '^devices: A cpu, B cpu-check; float64$' && ok || bad "compare: the header is not the first line"

# --- replay: counts and indices of a case.json -------------------------------------------------------------------
if [ ! -d "$golden/captum" ] || ! command -v python3 >/dev/null; then
    echo "SKIP: replay limits ($golden/captum or python3 not found; set CATTR_GOLDEN)"
    echo "$((checks - fails)) passed, $fails failed"
    [ $fails -eq 0 ]
    exit
fi
# edit CASE NAME PYTHON: a copy of golden case CASE in $tmp/NAME, its case.json c changed by PYTHON
edit() {
    rm -rf "$tmp/$2"
    cp -r "$golden/captum/$1" "$tmp/$2"
    python3 -c 'import json, sys
p = sys.argv[1]; c = json.load(open(p))
exec(sys.argv[2])
json.dump(c, open(p, "w"))' "$tmp/$2/case.json" "$3" || bad "could not edit $1"
}
# refused NAME FIELD VALUE: replay of $tmp/NAME fails (exit 1) within the time limit, naming the file, field, value
refused() {
    run "replay $1" 1 -- replay "$tmp/$1" || return
    has "replay $1" "$tmp/stdout" "FAIL" "$tmp/$1/case.json" "$2" "$3"
}
ig=basic_multi_input__IntegratedGradients
edit $ig ig_ok 'pass'
run "replay an unchanged case" 0 -- replay "$tmp/ig_ok"
edit $ig ig_steps 'c["attribute_args"]["n_steps"] = 2e8'
refused ig_steps n_steps 200000000
edit $ig ig_steps_neg 'c["attribute_args"]["n_steps"] = -727379968'
refused ig_steps_neg n_steps -727379968
edit $ig ig_steps_frac 'c["attribute_args"]["n_steps"] = 2.5'
refused ig_steps_frac n_steps 2.5
edit $ig ig_steps_str 'c["attribute_args"]["n_steps"] = "50"'
refused ig_steps_str n_steps '"50"'
edit $ig ig_ibs 'c["attribute_args"]["internal_batch_size"] = 1e12'
refused ig_ibs internal_batch_size 1000000000000
edit $ig ig_quad 'c["attribute_args"]["method"] = "simpson"'
refused ig_quad "method" simpson
edit $ig ig_target 'c["target"]["value"] = 1e30'
refused ig_target target.value 1e+30
edit basic_multi_target__ShapleyValueSampling svs_samples 'c["attribute_args"]["n_samples"] = 1e9'
refused svs_samples n_samples 1000000000
edit basic_multi_target__ShapleyValueSampling svs_ppe 'c["attribute_args"]["perturbations_per_eval"] = 0'
refused svs_ppe perturbations_per_eval 0
edit basic_multi_target__ShapleyValueSampling svs_list 'c["target"]["value"][2] = "x"'
refused svs_list "target.value[2]" '"x"'
edit basic_multi_input_multi_target_nt__IntegratedGradients__NoiseTunnel nt_samples 'c["attribute_args"]["nt_samples"] = 1e7'
refused nt_samples nt_samples 10000000
edit custom_mlp__Occlusion occ_window 'c["attribute_args"]["sliding_window_shapes"] = [0]'
refused occ_window "sliding_window_shapes[0]" 0
edit custom_mlp__Occlusion occ_stride 'c["attribute_args"]["strides"] = 1e20'
refused occ_stride strides 1e+20
tup=basic_layer_multiple_tuple_target__InternalInfluence
if [ -d "$golden/captum/$tup" ]; then
    edit $tup tuples 'c["target"] = {"kind": "list_of_tuples", "value": [[0, 1], [1], [0, 0]]}'
    refused tuples "target.value[1]" "tuple of 2"
fi

# --- replay: a language-model index (cases.json) ------------------------------------------------------------------
if [ -f "$golden/llm/cases.json" ]; then
    # one prompt and the cases named, beside links to the index's tensors and model folders
    llm_edit() {
        rm -rf "$tmp/$1"
        mkdir "$tmp/$1"
        for f in "$golden/llm"/*; do case $f in *.json|*.md) ;; *) ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$tmp/$1/";; esac; done
        python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
j["cases"] = [k for k in j["cases"] if k["id"] in sys.argv[3].split(",")]
j["prompts"] = [p for p in j["prompts"] if p["id"] == j["cases"][0]["prompt"]]
for p in j["prompts"]: p.pop("hidden_states", None)
c = j["cases"][0]; pr = j["prompts"][0]
exec(sys.argv[4])
json.dump(j, open(sys.argv[2], "w"))' "$golden/llm/cases.json" "$tmp/$1/cases.json" "$2" "$3" || bad "could not edit the llm index"
    }
    llm_refused() {
        run "replay llm $1" 1 -- replay "$tmp/$1/cases.json" --dtype float32 || return
        has "replay llm $1" "$tmp/stdout" "FAIL" "$tmp/$1/cases.json" "$2" "$3"
    }
    llm_edit llm_steps english.lig.gausslegendre.n16.zeros 'c["args"]["n_steps"] = 2e8'
    llm_refused llm_steps args.n_steps 200000000
    llm_edit llm_prompt english.lig.gausslegendre.n16.zeros 'pr["input_ids"][1] = 10**9; c.pop("input_ids", None)'
    llm_refused llm_prompt "input_ids[1]" 1000000000
    llm_edit llm_target english.fa 'c["target_ids"][0] = -5'
    llm_refused llm_target "target_ids[0]" -5
    llm_edit llm_perm english.svs.n10 'c["permutations"][0] = c["permutations"][0][:2]'
    llm_refused llm_perm "permutations[0]" "order of"
else
    echo "SKIP: language-model replay limits ($golden/llm/cases.json not found)"
fi

echo "$((checks - fails)) passed, $fails failed"
[ $fails -eq 0 ]
