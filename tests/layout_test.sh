#!/bin/sh
# The architecture's rules that a grep can hold: no source file over 1,000 lines but the kernel sets; nothing outside
# src/backend names a backend (the device registry, backend/registry.c, is the one place a name becomes a backend),
# and no folder includes one above it in the layers
# of docs/ARCHITECTURE.md (tools > metrics > attr > models > exec > viz, backend > io, graph > ops > core).
cd "$(dirname "$0")/.." || exit 2
fail=0
hits=$(grep -rnE 'cx_backend_(cpu|check)_get|backend/(cpu|check)/' src tools --include='*.c' --include='*.h' |
       grep -v '^src/backend/')
if [ -n "$hits" ]; then
    echo "FAIL: a backend named outside src/backend:"
    echo "$hits"
    fail=1
fi
# layer of each folder (higher uses lower)
layer() {
    case $1 in
    tools) echo 10 ;; metrics) echo 9 ;; attr) echo 8 ;; models) echo 7 ;; exec) echo 6 ;; viz) echo 5 ;; backend) echo 5 ;;
    io) echo 4 ;; graph) echo 3 ;; ops) echo 2 ;; core) echo 1 ;; *) echo 0 ;;
    esac
}
checked=0
for f in $(find src -name '*.c' -o -name '*.h'); do
    from=$(echo "$f" | cut -d/ -f2)
    lf=$(layer "$from")
    for inc in $(sed -n 's/^#include "\(\.\.\/\)\{0,1\}\([a-z_]*\)\/.*"/\2/p' "$f" | sort -u); do
        li=$(layer "$inc")
        checked=$((checked + 1))
        if [ "$li" -gt "$lf" ]; then
            echo "FAIL: $f (layer $from) includes $inc/, a layer above it"
            fail=1
        fi
    done
done
# files with one job: none in src/ over 1,000 lines but the kernel sets (issue 33)
for f in $(find src -name '*.c' -o -name '*.h' -o -name '*.cu'); do
    case $f in src/backend/check/check_kernels.c | src/backend/cpu/kernels_impl.h) continue ;; esac
    n=$(wc -l < "$f")
    if [ "$n" -gt 1000 ]; then
        echo "FAIL: $f has $n lines (at most 1000 outside the kernel sets: split it along its jobs)"
        fail=1
    fi
done
echo "layout: $checked includes checked; backends named only in src/backend; no file over 1000 lines"
[ "$checked" -gt 50 ] || { echo "FAIL: too few includes seen ($checked): is the tree there?"; fail=1; }
exit $fail
