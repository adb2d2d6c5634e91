#!/bin/sh
# The GPU check of the CUDA backend, in one command on a machine with an NVIDIA GPU, from the repository root:
#
#     sh scripts/device_check.sh OUT_DIR
#
# It uses the bundle scripts/device_bundle.sh made on a development machine (.device/: a CUDA build of cattr with
# the libraries it needs, the golden data, Captum's source), or builds from source when there is none (the CUDA
# toolkit and cattr's build dependencies must then be installed: scripts/deps.sh). Steps, each under a time limit so
# that the whole check ends within 8 minutes on an H200:
#   1. the device: nvidia-smi, `cattr info --devices` (stops here when cuda is not available)
#   2. the CUDA tests: test_ops, test_rules, test_profile on device cuda
#   3. every golden case on --device cuda: captum and llm, float64 and float32
#   4. `cattr compare` cpu vs cuda on every golden case: float64 (max_rel <= 1e-6), float32 (<= 1e-4), the language
#      models in float32 (<= 1e-5); a case over its limit is compared between cpu and cpu-check too, so that a case
#      whose values are rounding noise is told apart (scripts/device_compare.py)
#   5. the GPU bench (bench/gpu_bench.py) against Captum on the same GPU, TF32 off
# OUT_DIR gets summary.txt (every step's verdict and time, the compare and bench tables), bench.json and logs.tar.gz.
# Exit 0 when every step passed.
#
# A dry run without a GPU: CATTR_CHECK_BIN=<a build folder> (its cattr and tests/, e.g. one configured with
# -DCATTR_CUDA_EMULATE=ON, whose device cuda runs the CUDA backend's kernels on the CPU), CATTR_CHECK_DEVICE=<device>
# in place of cuda (e.g. cpu-check), CATTR_CHECK_QUICK=1 (the bench at small sizes).
set -u
out=${1:?usage: sh scripts/device_check.sh OUT_DIR}
cd "$(dirname "$0")/.."
repo=$PWD
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
work=${TMPDIR:-/tmp}/cattr-device-check
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)
summary="$out/summary.txt"
: >"$summary"
failed=0
say() { echo "$*" | tee -a "$summary"; }

# run_step NAME SECONDS COMMAND...: the command's output into logs/NAME.log, its verdict and time into the summary
run_step() {
    name=$1 limit=$2
    shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" >"$out/logs/$name.log" 2>&1
    rc=$?
    dt=$(($(date +%s) - t0))
    if [ $rc -eq 0 ]; then verdict=PASS
    elif [ $rc -eq 124 ]; then verdict="FAIL (time limit ${limit} s)"; failed=$((failed + 1))
    else verdict="FAIL (exit $rc)"; failed=$((failed + 1)); fi
    say "$(printf '%-34s %-24s %4d s   %s' "$name" "$verdict" "$dt" "$(tail -n 1 "$out/logs/$name.log" | cut -c1-90)")"
    return $rc
}

unpack() { # unpack FILE.tar.xz DIR (Python's tarfile: no xz binary needed)
    "$py" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"
}

say "cattr device check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi >"$out/logs/nvidia-smi.log" 2>&1 && say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"

dev=${CATTR_CHECK_DEVICE:-cuda}
py=${PYTHON:-python3} # one with numpy, torch, torchvision and onnx for the bench (the GPU machine's python3 has them)
# ---- the build: the bundle, else from source ------------------------------------------------------------------------
if [ -n "${CATTR_CHECK_BIN:-}" ]; then
    mkdir -p "$work/bin"
    for b in cattr tests/test_ops tests/test_rules tests/test_profile; do cp "$CATTR_CHECK_BIN/$b" "$work/bin/"; done
    bin=$work/bin
    say "build: $CATTR_CHECK_BIN (device $dev)"
elif [ -f .device/cattr-dev.tar.xz ]; then
    unpack .device/cattr-dev.tar.xz "$work"
    bin=$work/cattr-dev/bin
    export LD_LIBRARY_PATH="$work/cattr-dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "build: the bundle .device/cattr-dev.tar.xz"
else
    run_step build 300 sh -c "cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCATTR_CUDA=ON -DCATTR_MPI=OFF \
        -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-device -j$(nproc) --target cattr test_ops test_rules test_profile" ||
        { say "no bundle and no build: stop"; exit 1; }
    mkdir -p "$work/bin"
    for b in cattr tests/test_ops tests/test_rules tests/test_profile; do cp "build-device/$b" "$work/bin/"; done
    bin=$work/bin
fi
# cuBLAS: the toolkit's folder, or the one of PyTorch's nvidia-cublas wheel
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    "$("$py" -c 'import os, nvidia.cublas as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
if [ -f .device/golden.tar.xz ]; then
    unpack .device/golden.tar.xz "$work"
    export CATTR_GOLDEN=$work/golden
else
    export CATTR_GOLDEN=${CATTR_GOLDEN:-../shared/golden}
fi
captum=""
if [ -f .device/captum.tar.xz ]; then
    mkdir -p "$work/captum-src"
    unpack .device/captum.tar.xz "$work/captum-src"
    captum=$work/captum-src
fi
cattr=$bin/cattr
g=$CATTR_GOLDEN

# ---- 1. the device --------------------------------------------------------------------------------------------------
run_step devices 60 "$cattr" info --devices
if ! grep -q "^$dev: available" "$out/logs/devices.log"; then
    say "$dev is not available here: $(grep "^${dev%%:*}" "$out/logs/devices.log")"
    tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"
    exit 1
fi

# ---- 2. the CUDA tests ----------------------------------------------------------------------------------------------
for t in test_ops test_rules test_profile; do
    run_step "$t" 120 env CATTR_TEST_DEVICE="$dev" "$bin/$t"
done

# ---- 3. the goldens on cuda -----------------------------------------------------------------------------------------
for dtype in float64 float32; do
    run_step "golden_captum_${dtype}_$dev" 120 "$cattr" replay "$g/captum" --dtype $dtype --device "$dev"
    run_step "golden_llm_${dtype}_$dev" 240 "$cattr" replay "$g/llm" --dtype $dtype --device "$dev"
done

# ---- 4. cpu vs cuda (scripts/device_compare.py: the limits, and the reference backends' own spread) -------------------
run_step compare 420 "$py" scripts/device_compare.py "$cattr" "$g" "$dev" "$out/logs"
{ echo; echo "cpu vs $dev (scripts/device_compare.py):"; grep -vE '^(PASS|FAIL) ' "$out/logs/compare.log"; echo; } >>"$summary"

# ---- 5. the GPU bench -----------------------------------------------------------------------------------------------
if [ -n "${CATTR_CHECK_QUICK:-}" ]; then quick="--quick --runs 2"; else quick="--runs 5"; fi
# shellcheck disable=SC2086
run_step gpu_bench 270 env PYTHONUNBUFFERED=1 "$py" bench/gpu_bench.py --cattr "$cattr" --device "$dev" \
    --captum "$captum" --golden "$g" $quick --json "$out/bench.json"
{ echo; echo "GPU bench (bench/gpu_bench.py):"; grep -E '^(custom|ResNet|Captum)' "$out/logs/gpu_bench.log"; } >>"$summary"

say ""
say "$failed step(s) failed; $(($(date +%s) - start)) s in all"
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$out/logs"
[ "$failed" -eq 0 ]
