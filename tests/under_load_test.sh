#!/bin/sh
# Small calls on a loaded machine (issue 33, item 6): the golden CNN's and MLP's IG (20 steps) in fresh processes,
# quiet and with one process spinning beside them (bench/under_load.py). The slowest loaded process's warm call must
# stay within 10 times the quiet median plus 1 ms (a generous bound, for a shared machine and the sanitizer builds):
# when idle threads spun after a parallel region, it took 8 ms against 0.16 ms quiet.
# usage: under_load_test.sh CATTR_BINARY (run from the repository root; the golden data from
# ${CATTR_GOLDEN:-../shared/golden})
cattr=$1
golden=${CATTR_GOLDEN:-../shared/golden}
if [ ! -x /usr/bin/python3 ] || [ ! -d "$golden/captum/custom_cnn__IntegratedGradients_gausslegendre" ]; then
    echo "SKIP: under load ($golden or /usr/bin/python3 not found)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TMPDIR=$tmp /usr/bin/python3 bench/under_load.py --cattr "$cattr" --golden "$golden" --procs 4 --runs 20 \
    --json "$tmp/u.json" || { echo "FAIL: bench/under_load.py failed"; exit 1; }
/usr/bin/python3 - "$tmp/u.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
bad = 0
for r in rows:
    bound = 10 * r["quiet_warm_ms"] + 1.0
    ok = r["loaded_warm_max_ms"] <= bound
    print("%s %s: quiet %.3f ms, slowest loaded %.3f ms (bound %.3f)" % ("ok" if ok else "FAIL", r["case"],
          r["quiet_warm_ms"], r["loaded_warm_max_ms"], bound))
    bad += not ok
assert len(rows) == 2, rows
sys.exit(1 if bad else 0)
PY
