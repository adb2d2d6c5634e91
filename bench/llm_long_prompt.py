#!/usr/bin/python3
"""Long prompts (issue 34, item 4): LayerIG and LayerGradientXActivation at 1k, 2k and 4k prompt tokens in memory
linear in the prompt, and FeatureAblation over the sentences of the longest prompt.

Run from the repository root with Debian's Python (numpy):

    /usr/bin/python3 bench/llm_long_prompt.py [--dir CHECKPOINT] [--tokens 1000,2000,4000] [--steps 8]

--dir is a checkpoint folder with a tokenizer (default ../shared/golden/llm/qwen3-tiny; the Qwen3-0.6B-shape random
checkpoint of bench/llm_qwen3_shape.py works once the golden tokenizer.json is copied beside it, as --tokenizer-from
does). The prompt is English-like text of random sentences (fixed seed) cut to the token count. Each command runs in
its own process (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset) and reports the attribution time (`--runs 1`), the
planner's peak working memory (`--profile`: the largest memory the plans held, weights excluded) and the process's
peak RSS (its getrusage line). Linear memory shows as a working-memory ratio 4k / 1k near 4 (a T x T matrix would make it 16).
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steps_auto  # noqa: E402  (run: a command in its own process, OpenBLAS variables unset)
WORDS = ("the a model attribution token prompt sentence river mountain city north south light paper window garden "
         "music science history answer question reason value number story quiet bright early late small large "
         "green old new first last people water stone market winter summer").split()


def run(cmd):
    """(attribution time, the plans' peak working memory in MiB, peak RSS in MiB) of one command."""
    t, out = steps_auto.run(cmd)  # its own process, the OpenBLAS variables unset
    peak = re.search(r"peak memory: ([0-9]+) bytes", out)  # --profile's: the plans' working memory
    rss = re.search(r"peak memory: ([0-9]+) MiB resident", out)  # explain-llm's: getrusage
    return t, int(peak.group(1)) / 2**20 if peak else float("nan"), float(rss.group(1)) if rss else float("nan")


def make_text(tok, n_tokens, seed=0):
    rng = np.random.default_rng(seed)
    sents = []
    while True:
        k = int(rng.integers(6, 16))
        words = [WORDS[int(i)] for i in rng.integers(0, len(WORDS), k)]
        sents.append(" ".join(words).capitalize() + ".")
        text = " ".join(sents)
        if len(tok.encode(text)) >= n_tokens:
            break
    ids = tok.encode(text)[:n_tokens]
    return tok.decode(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cattr", default=os.path.join(REPO, "build", "cattr"))
    ap.add_argument("--dir", default=os.path.join(REPO, "..", "shared", "golden", "llm", "qwen3-tiny"))
    ap.add_argument("--tokenizer-from", default=None, help="copy tokenizer.json (and tokenizer_config.json) from this "
                    "folder into --dir first (a random checkpoint of bench/llm_qwen3_shape.py has none)")
    ap.add_argument("--tokens", default="1000,2000,4000")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--methods", default="layer-ig,layer-gradient-x-activation")
    ap.add_argument("--no-fa", action="store_true", help="skip FeatureAblation over the sentences")
    a = ap.parse_args()
    if a.tokenizer_from:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.exists(os.path.join(a.tokenizer_from, f)):
                shutil.copy(os.path.join(a.tokenizer_from, f), os.path.join(a.dir, f))
    import cattr

    tok = cattr.load_llm(a.dir).tokenizer
    tmp = tempfile.mkdtemp(prefix="cattr-long-")
    sizes = [int(x) for x in a.tokens.split(",") if x]
    texts = {n: make_text(tok, n) for n in sizes}
    print("%-30s %7s %9s %12s %9s" % ("run", "tokens", "time s", "working MiB", "RSS MiB"))
    work = {}
    for m in [x for x in a.methods.split(",") if x]:
        for n in sizes:
            prof, out = os.path.join(tmp, "p.json"), os.path.join(tmp, "o.json")
            cmd = [a.cattr, "explain-llm", a.dir, "--prompt", texts[n], "--target", " the", "--method", m,
                   "--runs", "1", "--quiet", "--profile", prof, "--output", out]
            if m == "layer-ig":
                cmd += ["--steps", str(a.steps)]
            t, w, rss = run(cmd)
            work[(m, n)] = w
            print("%-30s %7d %9.2f %12.1f %9.0f" % (m + (" %d steps" % a.steps if m == "layer-ig" else ""), n, t, w,
                                                     rss), flush=True)
        if len(sizes) > 1:
            print("%-30s working memory %d / %d tokens: %.2fx (tokens %.1fx)" % (
                m, sizes[-1], sizes[0], work[(m, sizes[-1])] / work[(m, sizes[0])], sizes[-1] / sizes[0]))
    if not a.no_fa:
        n = sizes[-1]
        out = os.path.join(tmp, "fa.json")
        t, w, rss = run([a.cattr, "explain-llm", a.dir, "--prompt", texts[n], "--target", " the", "--method",
                         "feature-ablation", "--segments", "sentences", "--runs", "1", "--quiet", "--profile",
                         os.path.join(tmp, "p.json"), "--output", out])
        segs = len(json.load(open(out))["segments"])
        print("%-30s %7d %9.2f %12.1f %9.0f   (%d sentences)" % ("feature-ablation, sentences", n, t, w, rss, segs))


if __name__ == "__main__":
    main()
