#!/bin/sh
# Replays golden data with `cattr replay` in one dtype; cases of methods cattr does not implement yet are reported as
# SKIP by replay itself. Skips (exit 77) when the golden data is absent.
# usage: golden_replay.sh CATTR_BINARY float64|float32 [captum|llm|tokenizer] [DEVICE]
# DEVICE cuda: skips (77) when the build has the CUDA backend but the machine no usable GPU.
cattr=$1
dtype=$2
what=${3:-captum}
device=${4:-cpu}
golden=${CATTR_GOLDEN:-../shared/golden}
if [ ! -d "$golden/$what" ]; then
    echo "SKIP: golden data not found at '$golden/$what' (set CATTR_GOLDEN to the golden folder)"
    exit 77
fi
case $device in
cuda*) # a build with the CUDA backend on a machine without a GPU: skipped, saying why
    avail=$("$cattr" info --devices | grep "^cuda: ")
    case $avail in
    "cuda: available") ;;
    *) echo "SKIP: no usable CUDA device here ($avail)"; exit 77 ;;
    esac ;;
esac
case $what in
tokenizer) out=$("$cattr" replay "$golden/tokenizer/qwen3_cases.jsonl" --tokenizer "$golden/llm/qwen3-tiny") ;;
*) out=$("$cattr" replay "$golden/$what" --dtype "$dtype" --device "$device") ;;
esac
rc=$?
printf '%s\n' "$out" | grep -v '^SKIP'
printf '%s\n' "$out" | grep -c '^SKIP' | sed 's/$/ cases skipped (methods not implemented yet)/'
exit $rc
