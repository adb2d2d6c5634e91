#!/bin/sh
# Builds cattr into ${CATTR_BUILD_DIR:-build} (Release, warnings as errors). Extra arguments go to cmake.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
dir=${CATTR_BUILD_DIR:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCATTR_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
