#!/bin/sh
# Replays every golden Captum case with `cattr replay` in one dtype; cases of methods cattr does not implement yet
# are reported as SKIP by replay itself. Skips (exit 77) when the golden data is absent.
# usage: golden_replay.sh CATTR_BINARY float64|float32
cattr=$1
dtype=$2
golden=${CATTR_GOLDEN:-../shared/golden}
if [ ! -d "$golden/captum" ]; then
    echo "SKIP: golden data not found at '$golden/captum' (set CATTR_GOLDEN to the golden folder)"
    exit 77
fi
out=$("$cattr" replay "$golden/captum" --dtype "$dtype")
rc=$?
printf '%s\n' "$out" | grep -v '^SKIP'
printf '%s\n' "$out" | grep -c '^SKIP' | sed 's/$/ cases skipped (methods not implemented yet)/'
exit $rc
