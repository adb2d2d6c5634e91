#!/bin/sh
# Installs the Debian 12 packages cattr needs to build, if any are missing (sudo when not root); with --test also
# what the test suite uses (chromium renders the HTML heatmap in tests/test_html_render.c; clang, its OpenMP and its
# libFuzzer runtime build the fuzz harnesses), with --fuzz only the latter.
set -eu
pkgs="gcc g++ make cmake pkg-config libc6-dev libopenblas-dev libprotobuf-c-dev protobuf-c-compiler libonnx-dev
libcjson-dev libpng-dev libpcre2-dev libutf8proc-dev"
if [ "${1:-}" = "--test" ]; then
    pkgs="$pkgs chromium clang libomp-dev libclang-rt-14-dev"
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
echo "cattr: installing Debian packages:$missing"
$SUDO apt-get update -q
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
