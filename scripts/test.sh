#!/bin/sh
# Builds cattr and runs the whole test suite (ctest, one test per core at a time). Golden-data tests read CATTR_GOLDEN (default ../shared/golden)
# and are skipped with a message when it is absent.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh --test
sh scripts/build.sh
cd "${CATTR_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)"
