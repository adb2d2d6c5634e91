#!/bin/sh
# Builds cattr into ${CATTR_BUILD_DIR:-build} (Release, warnings as errors). Extra arguments go to cmake.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
dir=${CATTR_BUILD_DIR:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCATTR_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
# the Python package of this source tree for this user: a .pth file in Python's user site naming python/ (its
# library is found in build/, or CATTR_LIB); `cmake --install` installs it system-wide instead. CATTR_NO_PTH=1 skips.
if [ -z "${CATTR_NO_PTH:-}" ] && [ "$dir" = build ] && [ -x /usr/bin/python3 ]; then
    site=$(/usr/bin/python3 -m site --user-site 2>/dev/null || true)
    if [ -n "$site" ] && ! grep -qxF "$PWD/python" "$site/cattr-source-tree.pth" 2>/dev/null; then
        if mkdir -p "$site" 2>/dev/null && printf '%s\n' "$PWD/python" >"$site/cattr-source-tree.pth" 2>/dev/null; then
            echo "cattr: 'import cattr' in python3 now loads this source tree ($site/cattr-source-tree.pth)"
        fi
    fi
fi
