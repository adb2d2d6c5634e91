#!/bin/sh
# Builds cattr and explains the bundled digits classifier's prediction for a handwritten 3 with Integrated
# Gradients: prints the prediction, the convergence delta and a terminal heatmap, writes the attribution
# (digit3_ig.npy) and a PNG heatmap (digit3_ig.png) in the current directory of the repository.
set -eu
cd "$(dirname "$0")/.."
sh scripts/build.sh
./build/cattr explain models/digits/digits.onnx --method integrated-gradients \
    --input models/digits/samples/digit_3.npy --output digit3_ig.npy --png digit3_ig.png --heatmap
