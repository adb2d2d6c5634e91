#!/bin/sh
# Prepares .device/ (git-ignored) for scripts/device_check.sh on a GPU machine that has no Debian packages and no
# network: a CUDA build of cattr made here (the command, the CUDA tests and libcattr for Python), the shared
# libraries they need beyond the C and C++ runtimes, the golden data (../shared does not travel) and Captum's
# pure-Python source for the GPU bench, compressed. Run it here, where the CUDA toolkit is (/usr/local/cuda), then
# carry .device to the GPU machine with the repository:
#
#     sh scripts/device_bundle.sh            # CAPTUM_SRC=<a captum checkout> (default: the fetched mirror)
#     # on the GPU machine, from the repository root:   sh scripts/device_check.sh OUT_DIR
#
# CATTR_GOLDEN (default ../shared/golden). CUDA_ARCH (default 90: H100/H200). The bundle must stay under the 64 MiB
# a device call carries with the repository; the script says its size.
set -eu
cd "$(dirname "$0")/.."
golden=${CATTR_GOLDEN:-../shared/golden}
captum=${CAPTUM_SRC:-/work/.mirror/pytorch+captum/repo}
dir=build-device
out=.device
[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || { echo "device_bundle: no nvcc (the CUDA toolkit)" >&2; exit 1; }
[ -d "$golden/captum" ] || { echo "device_bundle: no golden data at $golden" >&2; exit 1; }
sh scripts/deps.sh
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCATTR_WERROR=ON -DCATTR_CUDA=ON -DCATTR_MPI=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >/dev/null
grep -q "CATTR_WITH_CUDA" "$dir/CMakeCache.txt" 2>/dev/null || true
cmake --build "$dir" -j"$(nproc)" --target cattr cattr_shared test_ops test_rules test_profile
rm -rf "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out" "$stage/cattr-dev/bin" "$stage/cattr-dev/lib"
for b in cattr tests/test_ops tests/test_rules tests/test_profile; do cp "$dir/$b" "$stage/cattr-dev/bin/"; done
cp -L "$dir/libcattr.so" "$stage/cattr-dev/lib/libcattr.so"
# the libraries beyond glibc and the C++ runtime (the GPU machine has its own of those)
for f in "$stage"/cattr-dev/bin/* "$stage/cattr-dev/lib/libcattr.so"; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' |
    sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    while read -r l; do cp -L "$l" "$stage/cattr-dev/lib/"; done
strip "$stage"/cattr-dev/bin/* "$stage"/cattr-dev/lib/* 2>/dev/null || true
tar -C "$stage" -cf - cattr-dev | xz -9 -T0 >"$out/cattr-dev.tar.xz"
tar -C "$(dirname "$golden")" -cf - "$(basename "$golden")" | xz -9 -T0 >"$out/golden.tar.xz"
if [ -d "$captum/captum" ]; then
    tar -C "$captum" -cf - captum | xz -9 >"$out/captum.tar.xz"
elif git -C "$captum" rev-parse HEAD >/dev/null 2>&1; then # a bare mirror: the captum/ package's files only
    git -C "$captum" ls-tree -r --name-only HEAD captum | while read -r f; do
        mkdir -p "$stage/src/$(dirname "$f")"
        git -C "$captum" show "HEAD:$f" >"$stage/src/$f"
    done
    tar -C "$stage/src" -cf - captum | xz -9 >"$out/captum.tar.xz"
else
    echo "device_bundle: no Captum source at $captum (CAPTUM_SRC): the GPU bench will run cattr alone" >&2
fi
du -sh "$out"/*
kib=$(du -sk . --exclude=.git --exclude='build*' | cut -f1)
echo "device_bundle: the repository with .device is about $((kib / 1024)) MiB (a device call carries at most 64)"
