#!/bin/sh
# Builds the libFuzzer harnesses (tests/fuzz, clang + ASan + UBSan) into ${CATTR_FUZZ_DIR:-build-fuzz} and runs each
# for SECONDS on its corpus: the seeds in the repository plus what earlier runs found (kept in the build folder).
#
#   sh scripts/fuzz.sh                    every harness for 20 s (what CI runs)
#   sh scripts/fuzz.sh 3600               every harness for an hour
#   sh scripts/fuzz.sh 36000 onnx npy     the named harnesses for ten hours each
#   FUZZ_JOBS=2 sh scripts/fuzz.sh 3600   two harnesses at once
#
# A finding (crash, sanitizer report, leak, timeout over 25 s, more than 4 GiB resident) stops that harness; the input
# is saved as ${CATTR_FUZZ_DIR}/findings/<harness>/crash-* (reproduce: build-fuzz/tests/fuzz/fuzz_<harness> FILE)
# and the script exits 1 after the others have run; the end of the harness's log and the input (base64) are printed
# so that a CI log is enough to reproduce it. Each harness's line gives its executions and their rate.
# fuzz_tokenize and fuzz_segments read the real Qwen3 tokenizer (and checkpoint) from $CATTR_GOLDEN/llm/qwen3-tiny
# (default ../shared/golden); they are skipped with a message where that is absent.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-20}
[ $# -gt 0 ] && shift
all="onnx npy safetensors hf_config tokenizer_json tokenize checkpoint requests parts segments chat_frame"
which=${*:-$all}
dir=${CATTR_FUZZ_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-1}
export CATTR_GOLDEN="${CATTR_GOLDEN:-../shared/golden}"

sh scripts/deps.sh --fuzz
if ! [ -f "$dir/CMakeCache.txt" ]; then
    CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCATTR_FUZZ=ON -DCATTR_BUILD_TESTS=OFF \
        -DCATTR_WERROR=ON >/dev/null
fi
cmake --build "$dir" -j"$(nproc)" >/dev/null

seeds_of() {
    case $1 in
    onnx) echo "tests/data/onnx models/digits" ;;
    npy) echo "tests/fuzz/seeds/npy tests/data/io tests/data/cli" ;;
    safetensors) echo "tests/fuzz/seeds/safetensors tests/data/io" ;;
    *) echo "tests/fuzz/seeds/$1" ;;
    esac
}

run_one() {
    h=$1
    corpus="$dir/corpus/$h" findings="$dir/findings/$h" log="$dir/logs/$h.log"
    mkdir -p "$corpus" "$findings" "$dir/logs"
    if [ "$h" = segments ] && [ -z "${CATTR_FUZZ_CHECKPOINT:-}" ] && ! [ -f "$CATTR_GOLDEN/llm/qwen3-tiny/tokenizer.json" ]; then
        echo "fuzz_$h: SKIP ($CATTR_GOLDEN/llm/qwen3-tiny is absent; set CATTR_GOLDEN)"
        return 0
    fi
    if [ "$h" = tokenize ] && [ -z "${CATTR_FUZZ_TOKENIZER:-}" ] && ! [ -f "$CATTR_GOLDEN/llm/qwen3-tiny/tokenizer.json" ]; then
        echo "fuzz_$h: SKIP ($CATTR_GOLDEN/llm/qwen3-tiny/tokenizer.json is absent; set CATTR_GOLDEN)"
        return 0
    fi
    # shellcheck disable=SC2046
    if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$dir/tests/fuzz/fuzz_$h" -max_total_time="$secs" -timeout=25 -rss_limit_mb=4096 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" $(seeds_of "$h") >"$log" 2>&1; then
        status=ok
    else
        status="FINDING (see $log and $findings/)"
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz_$h: $status: $execs executions in ${secs} s ($rate/s), corpus $(ls "$corpus" | wc -l) files"
    if [ "$status" != ok ]; then
        # what a CI log needs to reproduce the finding without the build folder: the report and the input itself
        echo "--- fuzz_$h: the end of $log"
        grep -v -E '^#[0-9]+|^INFO:|^MS:|^base unit:' "$log" | tail -n 60
        for f in "$findings"/*; do
            [ -f "$f" ] || continue
            echo "--- fuzz_$h: $f ($(wc -c <"$f") bytes), base64 (first 64 KiB):"
            head -c 65536 "$f" | base64
        done
    fi
    [ "$status" = ok ]
}

fail=0
if [ "$jobs" -gt 1 ]; then
    # at most $jobs harnesses at once: when that many run, wait for the oldest
    pids=""
    for h in $which; do
        run_one "$h" &
        pids="$pids $!"
        set -- $pids
        if [ $# -ge "$jobs" ]; then
            wait "$1" || fail=1
            shift
            pids="$*"
        fi
    done
    for p in $pids; do wait "$p" || fail=1; done
else
    for h in $which; do run_one "$h" || fail=1; done
fi
exit $fail
