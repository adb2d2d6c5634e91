#!/bin/sh
# The documentation's commands run as written: every indented code block of docs/CLI.md, README.md, docs/metrics.md,
# docs/robust.md and docs/influence.md that starts
# with a `cattr` command (or a variable for one) runs with `sh -e` and must exit 0, and every row of the error tables
# runs and must give the documented message and exit code. (`cattr replay ../shared/golden/llm` lines are left out:
# the golden_llm tests run exactly that.) The blocks run in a scratch folder that sees the repository's models/
# and tests/ and ../shared (the golden data, CATTR_GOLDEN's parent), like the repository root.
# Blocks with placeholders (MODEL.onnx, FILE, DIR, ...) are synopses and are skipped; so are blocks that need the
# golden data when it is absent. usage: docs_test.sh CATTR_BINARY (run from the repository root)
cattr=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
repo=$(pwd)
golden=${CATTR_GOLDEN:-../shared/golden}
golden=$(cd "$golden" 2>/dev/null && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/work"
ln -s "$cattr" "$tmp/bin/cattr"
ln -s "$repo/models" "$tmp/work/models"
ln -s "$repo/tests" "$tmp/work/tests"
ln -s "$repo/README.md" "$tmp/work/README.md"
[ -n "$golden" ] && mkdir -p "$tmp/shared" && ln -s "$golden" "$tmp/shared/golden"
fails=0 checks=0 skipped=0

# --- code blocks -------------------------------------------------------------------------------------------------
awk -v dir="$tmp/blocks" '
    function flush() { if (n > 0 && first ~ /^(cattr |[A-Z]+=)/) { k++; f = sprintf("%s/%03d.sh", dir, k); printf "%s", body > f; close(f) } n = 0; body = ""; first = "" }
    BEGIN { system("mkdir -p " dir) }
    /^```/ { fence = !fence; flush(); next }
    !fence && (/^    [^ ]/ || (n > 0 && /^     /)) { line = substr($0, 5); if (n == 0) first = line; body = body line "\n"; n++; next }
    { flush() }
    END { flush() }' docs/CLI.md README.md docs/metrics.md docs/robust.md docs/influence.md
for f in "$tmp"/blocks/*.sh; do
    if grep -qE 'MODEL\.onnx|FILE|CHECKPOINT_DIR|PATH\.\.\.|<[a-z]|\[options\]' "$f"; then continue; fi
    if grep -q 'shared/golden' "$f" && [ -z "$golden" ]; then skipped=$((skipped + 1)); continue; fi
    sed -i '/cattr replay \.\.\/shared\/golden\/llm/d' "$f"
    checks=$((checks + 1))
    if ! (cd "$tmp/work" && PATH="$tmp/bin:$PATH" sh -e "$f" >"$tmp/out" 2>&1); then
        fails=$((fails + 1))
        echo "FAIL: docs/CLI.md block exits non-zero:"; sed 's/^/    /' "$f"; sed 's/^/  | /' "$tmp/out" | tail -5
    fi
done

# --- error tables: | `command` | `message` | exit | -----------------------------------------------------------------
grep -E '^\| `(explain|info|replay|explain-llm) ' docs/CLI.md | while IFS= read -r row; do
    cmd=$(printf '%s\n' "$row" | sed -E 's/^\| `([^`]*)` \|.*/\1/')
    msg=$(printf '%s\n' "$row" | sed -E 's/^\| `[^`]*` \| `([^`]*)`.*/\1/')
    code=$(printf '%s\n' "$row" | sed -E 's/.*\| ([0-9]+) \|$/\1/')
    # the message up to its first elision ("...", "<pid>") is what must appear
    want=$(printf '%s\n' "$msg" | sed -E 's/(\.\.\.|<[a-z]+>).*//' | sed 's/\\\\/\\/g')
    printf '%s\n' "$cmd" | grep -q '\.\.\.' && continue
    (cd "$tmp/work" && M=models/digits/digits.onnx PATH="$tmp/bin:$PATH" eval "cattr $cmd" >"$tmp/out" 2>"$tmp/err")
    rc=$?
    if [ "$rc" != "$code" ]; then
        echo "FAIL: docs/CLI.md says '$cmd' exits $code; it exits $rc: $(cat "$tmp/err")"; echo x >>"$tmp/fails"
    elif ! grep -qF -- "$want" "$tmp/err"; then
        echo "FAIL: docs/CLI.md says '$cmd' prints '$want'; it prints: $(cat "$tmp/err")"; echo x >>"$tmp/fails"
    else
        echo x >>"$tmp/oks"
    fi
done
rows_ok=$( [ -f "$tmp/oks" ] && wc -l <"$tmp/oks" || echo 0)
rows_bad=$( [ -f "$tmp/fails" ] && wc -l <"$tmp/fails" || echo 0)
echo "docs: $((checks - fails)) of $checks code blocks ran ($skipped skipped without the golden data), $rows_ok error-table rows as documented, $rows_bad not"
[ "$fails" -eq 0 ] && [ "$rows_bad" -eq 0 ] && [ "$rows_ok" -gt 0 ]
