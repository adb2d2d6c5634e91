#!/bin/sh
# Builds cattr and runs the test suite (ctest, one test per core at a time). Golden-data tests read CATTR_GOLDEN
# (default ../shared/golden) and are skipped with a message when it is absent. The language-model goldens on the
# cpu-check device (scalar reference kernels) take minutes: they run with CATTR_TEST_ALL=1, as CI does (.ci/run).
# CATTR_TEST_EXCLUDE: a ctest regular expression of tests left out (CI uses it to stay within its time).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh --test
sh scripts/build.sh
cd "${CATTR_BUILD_DIR:-build}"
if [ -n "${CATTR_TEST_EXCLUDE:-}" ]; then
    set -- -E "$CATTR_TEST_EXCLUDE"
fi
if [ -n "${CATTR_TEST_ALL:-}" ]; then
    ctest --output-on-failure -j "$(nproc)" "$@"
else
    ctest --output-on-failure -j "$(nproc)" -LE check_llm "$@"
fi
