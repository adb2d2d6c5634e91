#!/bin/sh
# Installs the Debian 12 packages cattr needs to build, if any are missing (sudo when not root), and python3-numpy for
# its Python package; with --test also what the test suite uses (chromium renders the HTML heatmap in
# tests/test_html_render.c; clang, its OpenMP and its libFuzzer runtime build the fuzz harnesses; python3-pytest runs
# tests/python; OpenMPI builds the command with MPI and runs tests/mpi_test.sh; PyTorch and Captum's test
# dependencies run Captum's own unit tests against cattr, tests/captum_suite; torchvision's models exported as
# torch.onnx.export does by default, tests/python/test_fixed_batch.py; python3-onnx, node and npm for the op modes
# against onnxruntime-node, tests/python/test_ops_ort.py), with --fuzz only the fuzz harnesses' part. Without OpenMPI
# the command builds without MPI.
set -eu
pkgs="gcc g++ make cmake pkg-config libc6-dev libopenblas-dev libopenblas-openmp-dev libprotobuf-c-dev protobuf-c-compiler libonnx-dev
libcjson-dev libpng-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev python3-numpy"
if [ "${1:-}" = "--test" ]; then
    pkgs="$pkgs chromium clang libomp-dev libclang-rt-14-dev python3-pytest libopenmpi-dev openmpi-bin
        python3-torch python3-torchvision python3-parameterized python3-sklearn python3-tqdm python3-matplotlib
        python3-onnx"
    # node and npm for onnxruntime-node (tests/python/test_ops_ort.py, bench/pretrained.py); a node of another origin
    # that has npm is kept
    command -v npm >/dev/null 2>&1 || pkgs="$pkgs nodejs npm"
elif [ "${1:-}" = "--fuzz" ]; then
    pkgs="$pkgs clang libomp-dev libclang-rt-14-dev"
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "cattr: these packages are missing and there is no sudo: install them as root:$missing" >&2
    exit 1
fi
# apt-get with these arguments; while another installation holds the package manager's lock (unattended upgrades, a
# second set-up command), it waits and tries again, for up to 20 minutes, saying so
apt_get() {
    err=$(mktemp)
    tries=0
    while :; do
        if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 "$@" 2>"$err"; then
            cat "$err" >&2
            rm -f "$err"
            return 0
        fi
        if grep -qiE 'could not get lock|unable to acquire|unable to lock|is another process using it' "$err" &&
            [ "$tries" -lt 20 ]; then
            tries=$((tries + 1))
            echo "cattr: another package installation holds the lock; waiting for it (try $tries of 20)" >&2
            sleep 60
            continue
        fi
        cat "$err" >&2
        rm -f "$err"
        return 1
    done
}

echo "cattr: installing Debian packages:$missing"
apt_get update -q
# shellcheck disable=SC2086
apt_get install -y -q --no-install-recommends $missing
