#!/bin/sh
# The command's outputs as a careless user and an attacker would try them (issue 30): no file is clobbered, written
# through a link or mixed with another run's; every failure is a message and a non-zero exit, never a signal; a rerun
# with anything different is refused naming the difference. usage: outputs_test.sh CATTR_BINARY (from the repository
# root)
cattr=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
checks=0
model=models/digits/digits.onnx
x=models/digits/samples/digit_3.npy
tiny=tests/data/llm/tiny
py=/usr/bin/python3

ok() { checks=$((checks + 1)); }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*"; }

# run NAME CODE STDERR_SUBSTRING -- ARGS...: cattr exits with CODE (never a signal) and says STDERR_SUBSTRING
run() {
    name=$1; code=$2; want=$3; shift 4
    "$cattr" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    if [ $rc -ne "$code" ]; then bad "$name: exit $rc, expected $code: $(head -c 600 "$tmp/stderr")"; return; fi
    if [ -n "$want" ] && ! grep -qF -- "$want" "$tmp/stderr"; then bad "$name: stderr lacks '$want': $(head -c 600 "$tmp/stderr")"; return; fi
    ok
}
# same FILE COPY: FILE is unchanged (byte for byte its copy)
same() { cmp -s "$1" "$2" && ok || bad "$1 was changed"; }

# --- 1. corpus mode never changes a file that is not its results file -----------------------------------------------
printf '{"id": "a", "prompt": "The capital", "target": " x", "steps": 4}\n{"id": "b", "prompt": "Hi", "target": " y", "steps": 4}' >"$tmp/req.jsonl"
cp "$tmp/req.jsonl" "$tmp/req.copy"
printf 'my notes\nthe last line has no newline' >"$tmp/notes.jsonl"
cp "$tmp/notes.jsonl" "$tmp/notes.copy"
run "corpus into a file of notes" 2 "is not a results file" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/notes.jsonl"
same "$tmp/notes.jsonl" "$tmp/notes.copy"
ln -s "$tmp/notes.jsonl" "$tmp/link.jsonl"
run "corpus through a link" 2 "symbolic link" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/link.jsonl"
same "$tmp/notes.jsonl" "$tmp/notes.copy"
run "corpus into its requests" 2 "is the same file as --prompts" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/req.jsonl"
same "$tmp/req.jsonl" "$tmp/req.copy"
ln "$tmp/req.jsonl" "$tmp/hard.jsonl"
run "corpus into a hard link of its requests" 2 "is the same file as --prompts" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/hard.jsonl"
same "$tmp/req.jsonl" "$tmp/req.copy"
mkdir "$tmp/dir.jsonl"
run "corpus into a folder" 2 "is a directory" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/dir.jsonl"
mkfifo "$tmp/fifo.jsonl"
run "corpus into a FIFO" 2 "not a regular file" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/fifo.jsonl"
rm -f "$tmp/fifo.jsonl"

# --- 2. dataset mode: a link planted at OUT.part, a foreign OUT.part --------------------------------------------------
$py -c "import numpy as np; x = np.load('$x'); np.save('$tmp/ds.npy', np.repeat(x, 12, axis=0))"
echo "the victim's file" >"$tmp/victim"
cp "$tmp/victim" "$tmp/victim.copy"
ln -s "$tmp/victim" "$tmp/d.npy.part"
run "dataset with a link at OUT.part" 2 "symbolic link" -- explain $model --input "$tmp/ds.npy" --batch-size 4 --steps 4 --output "$tmp/d.npy"
same "$tmp/victim" "$tmp/victim.copy"
[ -L "$tmp/d.npy.part" ] && ! [ -e "$tmp/d.npy" ] && ok || bad "the link at OUT.part was replaced, or OUT written"
rm -f "$tmp/d.npy.part"
echo "somebody's unfinished work" >"$tmp/d.npy.part"
cp "$tmp/d.npy.part" "$tmp/part.copy"
run "dataset with a foreign OUT.part" 2 "is not an unfinished run of this command" -- explain $model --input "$tmp/ds.npy" --batch-size 4 --steps 4 --output "$tmp/d.npy"
same "$tmp/d.npy.part" "$tmp/part.copy"
rm -f "$tmp/d.npy.part"
ln -s /dev/null "$tmp/null.npy"
run "dataset into a link to a device" 2 "is not a file" -- explain $model --input "$tmp/ds.npy" --batch-size 4 --steps 4 --output "$tmp/null.npy"

# --- 3. outputs that are inputs or other outputs; devices and links ---------------------------------------------------
cp "$x" "$tmp/in.npy"
cp "$tmp/in.npy" "$tmp/in.copy"
run "--output equal to --input" 2 "is the same file as --input" -- explain $model --input "$tmp/in.npy" --output "$tmp/in.npy"
same "$tmp/in.npy" "$tmp/in.copy"
run "--output equal to --input by another path" 2 "is the same file as --input" -- explain $model --input "$tmp/in.npy" --output "$tmp/../$(basename "$tmp")/in.npy"
same "$tmp/in.npy" "$tmp/in.copy"
cp $model "$tmp/model.json"
run "--output equal to the model" 2 "is the same file as the model" -- explain "$tmp/model.json" --input "$tmp/in.npy" --output "$tmp/model.json"
same "$tmp/model.json" $model
run "--profile equal to --output" 2 "is the same file as --profile" -- explain $model --input "$tmp/in.npy" --output "$tmp/o.json" --profile "$tmp/o.json"
! [ -e "$tmp/o.json" ] && ok || bad "--profile equal to --output wrote it"
run "--profile equal to --input" 2 "--profile" -- explain $model --input "$tmp/in.npy" --output "$tmp/o.npy" --profile "$tmp/in.npy"
same "$tmp/in.npy" "$tmp/in.copy"
cp "$tmp/in.npy" "$tmp/in.json"
run "--profile equal to --input (a .json)" 2 "is the same file as --profile" -- explain $model --input "$tmp/in.json" --output "$tmp/o.npy" --profile "$tmp/in.json"
cp "$tmp/in.npy" "$tmp/o2.npy"
ln "$tmp/o2.npy" "$tmp/o2.png"
run "--png a hard link of --output" 2 "two outputs cannot share a file" -- explain $model --input "$tmp/in.npy" --output "$tmp/o2.npy" --png "$tmp/o2.png"
run "--profile of another suffix" 2 "give a FILE.json" -- explain $model --input "$tmp/in.npy" --output "$tmp/o.npy" --profile "$tmp/trace.txt"
ln -s /dev/null "$tmp/trace.json"
run "--profile to a link to a device" 0 "" -- explain $model --input "$tmp/in.npy" --output "$tmp/o.npy" --profile "$tmp/trace.json" -q
[ -L "$tmp/trace.json" ] && ok || bad "a --profile link to a device was replaced by a file"
"$cattr" explain $model --input "$tmp/in.npy" --output "$tmp/o.npy" --profile /dev/stdout -q >"$tmp/trace.out" 2>/dev/null
grep -q traceEvents "$tmp/trace.out" && [ -L /dev/stdout ] && ok || bad "--profile /dev/stdout into a file: no trace there, or /dev/stdout replaced"
"$cattr" explain $model --input "$tmp/in.npy" --output "$tmp/o.npy" --profile /dev/stdout -q 2>/dev/null | grep -q traceEvents && [ -L /dev/stdout ] && ok || bad "--profile /dev/stdout into a pipe"
echo "results of last week" >"$tmp/old.txt"
ln -s "$tmp/old.txt" "$tmp/out_link.npy"
run "--output a link to a file" 2 "symbolic link" -- explain $model --input "$tmp/in.npy" --output "$tmp/out_link.npy"
[ "$(cat "$tmp/old.txt")" = "results of last week" ] && [ -L "$tmp/out_link.npy" ] && ok || bad "written through a link"
mkfifo "$tmp/fifo.json"
run "--output a FIFO nobody reads" 2 "no process is reading the FIFO" -- explain $model --input "$tmp/in.npy" --output "$tmp/fifo.json"
(cat "$tmp/fifo.json" >"$tmp/fifo.got") &
reader=$!
run "--output a FIFO with a reader" 0 "" -- explain $model --input "$tmp/in.npy" --output "$tmp/fifo.json" -q
wait $reader
grep -q '"attributions"' "$tmp/fifo.got" && ok || bad "nothing came through the FIFO"
run "--html equal to --output" 2 "two outputs cannot share a file" -- explain-llm $tiny --prompt-ids 1,2 --target-ids 3 --output "$tmp/l.json" --html "$tmp/l.json"
! [ -e "$tmp/l.json" ] && ok || bad "--html equal to --output wrote it"
run "--output inside the checkpoint" 2 "is the same file as the checkpoint" -- explain-llm $tiny --prompt-ids 1,2 --target-ids 3 --output "$tiny/config.json"
golden=${CATTR_GOLDEN:-../shared/golden}
if [ -d "$golden/captum/custom_mlp__Occlusion" ]; then # compare's --json over a file of a case it reads
    cp -r "$golden/captum/custom_mlp__Occlusion" "$tmp/case"
    chmod -R u+w "$tmp/case"
    cp "$tmp/case/case.json" "$tmp/case.copy"
    run "compare --json over its case" 2 "is the same file as a compared case" -- compare "$tmp/case" --json "$tmp/case/case.json"
    same "$tmp/case/case.json" "$tmp/case.copy"
    run "compare --json over a case of its folder" 2 "is the same file as a compared case" -- compare "$tmp" --json "$tmp/case/case.json"
    same "$tmp/case/case.json" "$tmp/case.copy"
    rm -rf "$tmp/case"
else
    echo "SKIP: compare --json over a case ($golden not found)"
fi
run "--max-memory with a T suffix" 0 "" -- explain $model --input "$tmp/in.npy" --output "$tmp/o.npy" --max-memory 1T -q

# --- 4. two runs on one output: the second is refused ----------------------------------------------------------------
i=0
# the first run must still be working when the second starts, on a fast machine too (it is killed after the check)
while [ $i -lt 32 ]; do echo "{\"id\": \"k$i\", \"prompt\": \"The cat $i\", \"target\": \" sat\", \"steps\": 20000}"; i=$((i + 1)); done >"$tmp/slow.jsonl"
"$cattr" explain-llm $tiny --prompts "$tmp/slow.jsonl" --output "$tmp/slow_out.jsonl" -q 2>/dev/null &
first=$!
t=0
while ! [ -s "$tmp/slow_out.jsonl" ] && [ $t -lt 200 ]; do sleep 0.05; t=$((t + 1)); done
run "a second corpus run on the same output" 2 "another process is writing" -- explain-llm $tiny --prompts "$tmp/slow.jsonl" --output "$tmp/slow_out.jsonl"
kill -9 $first 2>/dev/null
wait $first 2>/dev/null
"$cattr" explain $model --input "$tmp/ds.npy" --batch-size 1 --steps 200000 --output "$tmp/lock.npy" -q 2>/dev/null &
first=$!
t=0
while ! [ -e "$tmp/lock.npy.part.json" ] && [ $t -lt 200 ]; do sleep 0.05; t=$((t + 1)); done
run "a second dataset run on the same output" 2 "another process is writing" -- explain $model --input "$tmp/ds.npy" --batch-size 1 --steps 200000 --output "$tmp/lock.npy"
kill -9 $first 2>/dev/null
wait $first 2>/dev/null

# --- 5 and 6. an out-of-range target and NaN: a message, never a signal, also in dataset mode --------------------------
run "deeplift-shap, target 10" 1 "target index 10 is out of range" -- explain $model --method deeplift-shap --input tests/data/cli/batch2.npy --baseline tests/data/cli/batch2.npy --target 10 --output "$tmp/t.npy"
run "deeplift-shap, target 10, dataset mode" 1 "rows 0 to 4: target index 10 is out of range" -- explain $model --method deeplift-shap --input "$tmp/ds.npy" --baseline tests/data/cli/batch2.npy --batch-size 4 --target 10 --output "$tmp/t.npy"
! [ -e "$tmp/t.npy" ] && ! [ -e "$tmp/t.npy.part" ] && ok || bad "a refused run left its output or part file"
"$cattr" compare $model --input "$x" --target 10 >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
[ $rc -eq 1 ] && grep -q "target index 10 is out of range" "$tmp/stdout" "$tmp/stderr" && ok || bad "compare with target 10: exit $rc: $(head -c 400 "$tmp/stdout" "$tmp/stderr")"
$py -c "import numpy as np; x = np.load('$tmp/ds.npy'); x[6, 0, 3, 3] = np.nan; np.save('$tmp/nan.npy', x)"
run "a NaN row in dataset mode" 1 "rows 4 to 8: input 0 has a non-finite value" -- explain $model --input "$tmp/nan.npy" --batch-size 4 --steps 4 --output "$tmp/n.npy"
grep -q '"rows_done":4' "$tmp/n.npy.part.json" && ok || bad "the rows before the NaN are not kept for a rerun"
run "a NaN in the first batch" 1 "non-finite" -- explain $model --input "$tmp/nan.npy" --batch-size 8 --steps 4 --output "$tmp/n8.npy"
! [ -e "$tmp/n8.npy.part" ] && ! [ -e "$tmp/n8.npy.part.json" ] && ok || bad "a run that wrote nothing left its part files"

# --- the sweep: every method with an out-of-range target and with a NaN input, in one call and in dataset mode: a
# message and exit 1 or 2, never a signal and never an output
methods="saliency input-x-gradient integrated-gradients deeplift deeplift-shap guided-backprop deconvolution
guided-gradcam lrp gradient-shap feature-ablation feature-permutation occlusion shapley-value-sampling shapley-values
lime kernel-shap layer-activation layer-gradient-x-activation layer-gradcam internal-influence layer-conductance
layer-integrated-gradients layer-deeplift layer-deeplift-shap layer-gradient-shap layer-feature-ablation
layer-feature-permutation layer-lrp neuron-gradient neuron-integrated-gradients neuron-conductance neuron-deeplift
neuron-deeplift-shap neuron-gradient-shap neuron-guided-backprop neuron-deconvolution neuron-feature-ablation"
$py -c "import numpy as np; x = np.load('tests/data/cli/batch2.npy'); x[1, 0, 2, 2] = np.nan; np.save('$tmp/nan2.npy', x)"
$py -c "import numpy as np; x = np.load('$tmp/ds.npy'); x[1, 0, 2, 2] = np.nan; np.save('$tmp/nan_first.npy', x)"
sweep() { # sweep NAME WANT ARGS...: exit 1 or 2 with WANT in the message, no output
    name=$1; sw_want=$2; shift 2
    "$cattr" explain $model --layer conv2 --neuron 0,1,1 --sliding-window 1,3,3 --n-samples 4 --steps 4 \
        --baseline models/digits/samples/digit_0.npy --output "$tmp/sw.npy" -q "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    if [ $rc -ne 1 ] && [ $rc -ne 2 ]; then bad "$name: exit $rc: $(head -c 300 "$tmp/stderr")"
    elif ! grep -qi -- "$sw_want" "$tmp/stderr"; then bad "$name: the message lacks '$sw_want': $(head -c 300 "$tmp/stderr")"
    elif [ -e "$tmp/sw.npy" ] || [ -e "$tmp/sw.npy.part" ]; then bad "$name: wrote an output"
    else ok; fi
    rm -f "$tmp/sw.npy" "$tmp/sw.npy.part" "$tmp/sw.npy.part.json"
}
for m in $methods; do
    case $m in
        layer-activation | neuron-gradient | neuron-integrated-gradients | neuron-deeplift | neuron-deeplift-shap | \
            neuron-gradient-shap | neuron-guided-backprop | neuron-deconvolution | neuron-feature-ablation)
            want="takes no target" ;;
        *) want="target index 10 is out of range" ;;
    esac
    sweep "$m, target 10" "$want" --method $m --input tests/data/cli/batch2.npy --target 10
    sweep "$m, NaN input" "non-finite" --method $m --input "$tmp/nan2.npy"
    [ $m = feature-permutation ] && continue # permutes across the batch: no dataset mode
    sweep "$m, target 10, dataset mode" "$want" --method $m --input "$tmp/ds.npy" --batch-size 4 --target 10
    sweep "$m, NaN input, dataset mode" "non-finite" --method $m --input "$tmp/nan_first.npy" --batch-size 4
done

# --- 7. a rerun that differs is refused, naming what differs ----------------------------------------------------------
rm -f "$tmp/c.jsonl"
run "a corpus" 0 "" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/c.jsonl" -q
cp "$tmp/c.jsonl" "$tmp/c.copy"
run "the corpus with other options" 2 "--steps \"8\" here, not given in the file" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/c.jsonl" --steps 8
run "the corpus with another method" 2 "--method" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/c.jsonl" --method feature-ablation
cp -r $tiny "$tmp/tiny2"
$py -c "
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read()); b[-1] ^= 1; open(p, 'wb').write(bytes(b))" "$tmp/tiny2/model.safetensors"
run "the corpus with another checkpoint" 2 "holds results of another checkpoint" -- explain-llm "$tmp/tiny2" --prompts "$tmp/req.jsonl" --output "$tmp/c.jsonl"
sed 's/"Hi"/"Hello"/' "$tmp/req.jsonl" >"$tmp/req2.jsonl"
run "the corpus with a changed request" 2 "line 2 of the requests (id \"b\") is not the request" -- explain-llm $tiny --prompts "$tmp/req2.jsonl" --output "$tmp/c.jsonl"
same "$tmp/c.jsonl" "$tmp/c.copy"
cp -r $tiny "$tmp/tiny3" # the same checkpoint elsewhere: its fingerprint is the same
run "the corpus with the checkpoint moved" 0 "" -- explain-llm "$tmp/tiny3" --prompts "$tmp/req.jsonl" --output "$tmp/c.jsonl" -q
same "$tmp/c.jsonl" "$tmp/c.copy"
head -n 1 "$tmp/c.jsonl" | sed 's/"cattr_results":1,//' >"$tmp/nohdr.jsonl"
run "a header without its version" 2 "is not a results file" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/nohdr.jsonl"
tail -n 1 "$tmp/c.jsonl" >"$tmp/old.jsonl"
run "a results file of an earlier cattr" 2 "written by an earlier cattr" -- explain-llm $tiny --prompts "$tmp/req.jsonl" --output "$tmp/old.jsonl"
# dataset mode: the input rewritten with the same shape
"$cattr" explain $model --input "$tmp/ds.npy" --steps 2000 --batch-size 1 --output "$tmp/dc.npy" -q 2>/dev/null &
first=$!
t=0
while ! grep -qs '"rows_done":[1-9]' "$tmp/dc.npy.part.json" && [ $t -lt 400 ]; do sleep 0.05; t=$((t + 1)); done
kill -9 $first 2>/dev/null
wait $first 2>/dev/null
cp "$tmp/ds.npy" "$tmp/ds.orig"
$py -c "import numpy as np; x = np.load('$tmp/ds.npy'); np.save('$tmp/ds.npy', x * 0.5)"
run "dataset resumed on a changed input" 2 "the content of --input '$tmp/ds.npy' changed since it was begun" -- explain $model --input "$tmp/ds.npy" --steps 2000 --batch-size 1 --output "$tmp/dc.npy"
run "dataset resumed with other options" 2 "--steps \"16\" here, \"2000\" in the file" -- explain $model --input "$tmp/ds.orig" --steps 16 --batch-size 1 --output "$tmp/dc.npy"
run "dataset resumed with another batch size" 2 "--batch-size" -- explain $model --input "$tmp/ds.npy" --steps 2000 --batch-size 2 --output "$tmp/dc.npy"
mv "$tmp/ds.orig" "$tmp/ds.npy"
touch "$tmp/ds.npy" # a newer time, the same content: a small file is fingerprinted whole
run "dataset resumed as begun" 0 "resuming" -- explain $model --input "$tmp/ds.npy" --steps 2000 --batch-size 1 --output "$tmp/dc.npy"
! [ -e "$tmp/dc.npy.part" ] && [ -s "$tmp/dc.npy" ] && ok || bad "the resumed dataset run did not finish"

# --- 8. ids: repeated, malformed, colliding with a line number; text after the object; blank lines ---------------------
{
    echo '{"id": "a", "prompt": "one", "target": " x", "steps": 2}'
    echo '{"id": "a", "prompt": "two", "target": " x", "steps": 2}'
    echo '   '
    echo '{"prompt": "no id: known as 4", "target": " x", "steps": 2}'
    echo '{"id": 4, "prompt": "collides with line 4", "target": " x", "steps": 2}'
    echo '{"id": "n\u0000a", "prompt": "x", "target": " x", "steps": 2}'
    echo '{"id": "n\u0000b", "prompt": "x", "target": " x", "steps": 2}'
    echo '{"id": 1e400, "prompt": "x", "target": " x", "steps": 2}'
    echo '{"id": null, "prompt": "null id: known as 9", "target": " x", "steps": 2}'
    echo '{"id": [1], "prompt": "x", "target": " x", "steps": 2}'
    echo '{"id": "t", "prompt": "x", "target": " x", "steps": 2}{"id": "u"}'
    echo '{"id": "big", "prompt_ids": ['"$($py -c "print(','.join(['123'] * 20000))")"'], "target_ids": [6], "method": "feature-ablation"}'
} >"$tmp/ids.jsonl"
rm -f "$tmp/ids_out.jsonl"
run "repeated and malformed ids" 1 "" -- explain-llm $tiny --prompts "$tmp/ids.jsonl" --output "$tmp/ids_out.jsonl"
[ "$(wc -l <"$tmp/ids_out.jsonl")" -eq 12 ] && ok || bad "ids: $(wc -l <"$tmp/ids_out.jsonl") lines, expected the header and 11 records (the blank line skipped)"
grep -q "line 2: the id \\\\\"a\\\\\" is already line 1's" "$tmp/ids_out.jsonl" && ok || bad "no error record for the repeated id"
grep -q "line 5: the id 4 is already line 4's (ids name the results: each must be unique; a line without an" "$tmp/ids_out.jsonl" && ok || bad "no error record for the id that is a line's number"
[ "$(grep -c 'holds a NUL character' "$tmp/ids_out.jsonl")" -eq 2 ] && ok || bad "ids with a NUL are not both error records"
grep -q '"error":"line 8: .id. must be a non-empty string' "$tmp/ids_out.jsonl" && ok || bad "no error record for the id 1e400"
grep -q '"error":"line 10: .id. must be a non-empty string' "$tmp/ids_out.jsonl" && ok || bad "no error record for an array id"
grep -q '"id":9,' "$tmp/ids_out.jsonl" && ! grep -q '"error":"line 9' "$tmp/ids_out.jsonl" && ok || bad "an id null is not the line number"
grep -q "line 11 has text after its JSON object" "$tmp/ids_out.jsonl" && ok || bad "text after the object is not an error"
grep -q "context of 128 tokens (got 20000)\",\"status\":\"invalid argument\",\"id\":\"big\"" "$tmp/ids_out.jsonl" && ok || bad "a request with 20000 prompt ids (over 64 KB of text) was not read: $(grep '"big"' "$tmp/ids_out.jsonl" | head -c 300)"
grep -q "0 already in" "$tmp/stderr" && ok || bad "a new file claims requests already in it: $(tail -1 "$tmp/stderr")"
cp "$tmp/ids_out.jsonl" "$tmp/ids.copy"
run "repeated and malformed ids, rerun" 0 "11 requests: 0 attributed, 0 failed, 11 already in" -- explain-llm $tiny --prompts "$tmp/ids.jsonl" --output "$tmp/ids_out.jsonl"
same "$tmp/ids_out.jsonl" "$tmp/ids.copy"

# --- 11. a rerun over many ids is fast (the done set is a hash table, not a list) ------------------------------------
$py -c "
for i in range(100000): print('{\"id\": \"r%d\", \"bogus\": 1}' % i)" >"$tmp/many.jsonl"
rm -f "$tmp/many_out.jsonl"
run "100000 failing requests" 1 "" -- explain-llm $tiny --prompts "$tmp/many.jsonl" --output "$tmp/many_out.jsonl" -q
start=$(date +%s%N)
run "100000 requests resumed" 0 "" -- explain-llm $tiny --prompts "$tmp/many.jsonl" --output "$tmp/many_out.jsonl" -q
ms=$((($(date +%s%N) - start) / 1000000))
[ $ms -lt 15000 ] && ok || bad "resuming 100000 requests took $ms ms"

echo "outputs: $((checks - fails)) passed, $fails failed"
[ $fails -eq 0 ]
