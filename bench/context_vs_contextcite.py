#!/usr/bin/python3
"""Context attribution (`cattr explain-context`'s methods) against ContextCite's surrogate written with PyTorch, on a
checkpoint with Qwen3-0.6B's shapes and a long retrieved context.

Run from the repository root with Debian's Python (numpy and torch):

    /usr/bin/python3 bench/context_vs_contextcite.py [--layers 28|L1,L2] [--tokens 4000] [--ref-passes N]
        [--no-quality]

With two depths (--layers 1,2) it runs everything at both and prints what one more layer costs on each side and the
ratios at 28 layers this gives: a shallow model flatters cattr, whose last layer runs its projections and MLP at the
answer's positions only (the reference runs every layer in full), a saving of one layer in 28 at full depth.

1. Writes (once; reused when present) a randomly initialised BF16 checkpoint with Qwen3-0.6B's shapes
   (bench/llm_qwen3_shape.py; --layers takes fewer of its 28 layers, for a machine where the full depth takes too
   long: a shallow model's ratios flatter cattr, so give two depths to get the ratios at 28) with the Qwen3 tokenizer
   of the golden
   qwen3-tiny checkpoint, and a synthetic context of 10 documents of 8 sentences each (80 sentences, about --tokens
   tokens in all, from a fixed word list and seed), a question and a 12-token answer.
2. cattr (the library through its Python package, in this process, float32, exact): the methods over the 80
   sentences with the chat template: loo, hierarchical (top 3 documents), surrogate (64 masks) and gradient, each
   with its quality numbers (top-k drop, LDS over 32 held-out masks; timed apart from the method).
3. The reference: ContextCite's surrogate as it computes it, a forward pass of the whole ablated prompt per mask
   (the kept sentences joined again, tokenized, run from scratch: no cache), written here with PyTorch (float32,
   torch.set_num_threads = the cores; the LM head only at the answer's positions, which makes the reference faster
   than ContextCite's full-logits pass), and the 80 full forward passes a leave-one-out without reuse costs. With
   --ref-passes N only N passes of each are timed and the time scaled to 64 and 80 (printed as such).
   The reference's log-probability of the answer with the whole context is checked against cattr's (the same
   tokens): their difference is printed.

Both sides run in this one process, one after the other, with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
(they must be unset before the process starts: run it with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`, which
the script does for itself by re-executing).
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):  # they halve OpenBLAS: unset both
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "bench"))

import numpy as np  # noqa: E402

import llm_qwen3_shape as Q  # noqa: E402

WORDS = ("river stone market winter engine garden harbor signal copper lantern meadow archive council bridge "
         "orchard canal tower valley museum printer railway summit forest island beacon ledger compass quarry "
         "theatre violin chapel glacier workshop festival mirror journal castle pepper saddle anchor meteor "
         "falcon pillar velvet thunder silver cotton marble crystal granite").split()
VERBS = "built reported measured described opened painted carried studied visited repaired counted".split()
QUESTION = "Which city did the committee choose for the new observatory?"
ANSWER = " The committee chose Lisbon for the new observatory, after a long debate."
FACT = "After a long debate the committee chose Lisbon for the new observatory."


def sentence(rng, n):
    w = [WORDS[i] for i in rng.integers(0, len(WORDS), n)]
    w.insert(2, VERBS[rng.integers(0, len(VERBS))])
    return "The " + " ".join(w) + "."


def make_docs(words_per_sentence, seed=7):
    """10 documents of 8 sentences (lists of the sentences)"""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(10):
        sents = [sentence(rng, words_per_sentence) for _ in range(8)]
        if d == 3:
            sents[5] = FACT
        docs.append(sents)
    return docs


def bf16_file(path):
    """name -> float32 array of a BF16 safetensors file"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, h in header.items():
            if name == "__metadata__":
                continue
            a, b = h["data_offsets"]
            f.seek(base + a)
            u = np.frombuffer(f.read(b - a), np.uint16).astype(np.uint32) << 16
            out[name] = u.view(np.float32).reshape(h["shape"])
    return out


class TorchQwen3:
    """Qwen3 in PyTorch (float32): what a forward pass of ContextCite's costs on this machine."""

    def __init__(self, d, torch):
        self.t = torch
        self.c = json.load(open(os.path.join(d, "config.json")))
        w = bf16_file(os.path.join(d, "model.safetensors"))
        self.w = {k: torch.from_numpy(v.copy()) for k, v in w.items()}
        c = self.c
        self.hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd))
        self.inv = torch.from_numpy(inv)

    def rms(self, x, w):
        t = self.t
        return x * t.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"]) * w

    def logprob(self, ids, n_answer):
        """the total log-probability of the last n_answer tokens of ids given those before"""
        t, c, W = self.t, self.c, self.w
        with t.no_grad():
            T = len(ids)
            x = W["model.embed_tokens.weight"][t.tensor(ids)]
            pos = t.arange(T, dtype=t.float64)[:, None] * self.inv[None, :]
            cos = t.cat([pos.cos(), pos.cos()], -1).float()
            sin = t.cat([pos.sin(), pos.sin()], -1).float()
            nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], self.hd
            mask = t.full((T, T), float("-inf")).triu(1)

            def rope(v):
                h = hd // 2
                return v * cos[:, None, :] + t.cat([-v[..., h:], v[..., :h]], -1) * sin[:, None, :]

            for l in range(c["num_hidden_layers"]):
                p = "model.layers.%d." % l
                h = self.rms(x, W[p + "input_layernorm.weight"])
                q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, nh, hd)
                k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, nkv, hd)
                v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, nkv, hd)
                q = rope(self.rms(q, W[p + "self_attn.q_norm.weight"]))
                k = rope(self.rms(k, W[p + "self_attn.k_norm.weight"]))
                o = t.empty(T, nh, hd)
                for hh in range(nh):  # a head at a time: the T x T scores of one head in memory
                    g = hh // (nh // nkv)
                    s = (q[:, hh] @ k[:, g].T) / math.sqrt(hd) + mask
                    o[:, hh] = t.softmax(s, -1) @ v[:, g]
                x = x + o.reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
                h = self.rms(x, W[p + "post_attention_layernorm.weight"])
                g = h @ W[p + "mlp.gate_proj.weight"].T
                x = x + (t.nn.functional.silu(g) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
            hN = self.rms(x[T - n_answer - 1:T - 1], W["model.norm.weight"])
            head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
            lp = t.log_softmax((hN @ head.T).double(), -1)
            return float(lp[t.arange(n_answer), t.tensor(ids[T - n_answer:])].sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", default="28",
                    help="layers of Qwen3-0.6B's 28 (default: all); two depths such as 1,2 also give the cost of one "
                         "more layer on each side and the ratios at 28 layers from it")
    ap.add_argument("--no-quality", action="store_true", help="leave out the quality numbers (top-k drop, LDS)")
    ap.add_argument("--tokens", type=int, default=4000, help="the context's size in tokens, about (default 4000)")
    ap.add_argument("--samples", type=int, default=64, help="the surrogate's masks (default 64)")
    ap.add_argument("--ref-passes", type=int, default=0,
                    help="time only N of the reference's passes and scale (default: all 64 and 80)")
    ap.add_argument("--dir", default=None, help="the checkpoint's folder (default /tmp/cattr-ctx-qwen3-0.6b-L<layers>)")
    ap.add_argument("--methods", default="loo,hierarchical,surrogate,gradient")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    a = ap.parse_args()
    depths = [int(v) for v in a.layers.split(",")]
    if len(depths) > 2 or any(d < 1 or d > 28 for d in depths) or (len(depths) == 2 and depths[0] >= depths[1]):
        sys.exit("--layers: one depth, or two increasing ones (such as 1,2), from 1 to 28")
    runs = []
    for L in depths:
        a.layers = L
        runs.append(run_depth(a))
    if len(runs) == 2:
        (L0, r0), (L1, r1) = (depths[0], runs[0]), (depths[1], runs[1])
        print("one more layer (from %d to %d layers) costs, and the ratios at 28 layers this gives (the last layer of "
              "cattr's scores only the answer's positions after its attention: a saving that shrinks with the depth):"
              % (L0, L1))
        for m, base, what in (("loo", "full_passes_80_seconds", "80 full passes"),
                              ("hierarchical", "full_passes_80_seconds", "80 full passes"),
                              ("surrogate", "surrogate_seconds", "the reference surrogate"),
                              ("gradient", "full_passes_80_seconds", "80 full passes")):
            if m not in r1["methods"]:
                continue
            dc = (r1["methods"][m]["seconds"] - r0["methods"][m]["seconds"]) / (L1 - L0)
            dr = (r1["reference"][base] - r0["reference"][base]) / (L1 - L0)
            c28 = r1["methods"][m]["seconds"] + (28 - L1) * dc
            t28 = r1["reference"][base] + (28 - L1) * dr
            print("%-12s a layer: cattr %6.1f s, reference %6.1f s (%.1fx); at 28 layers about %.0f s vs %.0f s: %.1fx "
                  "faster than %s" % (m, dc, dr, dr / dc, c28, t28, t28 / c28, what))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs if len(runs) > 1 else runs[0], f, indent=1)


def run_depth(a):
    Q.SHAPE.clear()
    Q.SHAPE.update(Q.SHAPES["qwen3-0.6b"])
    Q.SHAPE["num_hidden_layers"] = a.layers
    d = a.dir or "/tmp/cattr-ctx-qwen3-0.6b-L%d" % a.layers
    if Q.write_checkpoint(d):
        print("wrote %s" % d)
    golden = os.environ.get("CATTR_GOLDEN") or os.path.join(REPO, "..", "shared", "golden")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if not os.path.exists(os.path.join(d, f)):
            shutil.copy(os.path.join(golden, "llm", "qwen3-tiny", f), os.path.join(d, f))

    import torch
    import cattr
    from cattr.context import ContextAttribution

    cores = os.cpu_count()
    torch.set_num_threads(cores)
    llm = cattr.load_llm(d)
    tok = llm.tokenizer
    wps = 30
    split = make_docs(wps)
    n_ctx = sum(len(tok.encode(" ".join(x))) for x in split)
    wps = max(4, int(round(wps * a.tokens / n_ctx)))
    split = make_docs(wps)
    docs = [" ".join(x) for x in split]
    ca = ContextAttribution(llm)
    pre, post = "<|im_start|>user\n", "\n\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = lambda s: list(tok.encode(s)) if s else []
    ans = ids(ANSWER)
    print("checkpoint: Qwen3-0.6B shapes, %d of 28 layers (%s); %d cores; context %d tokens in 10 documents, "
          "answer %d tokens" % (a.layers, d, cores, sum(len(ids(x)) for x in docs), len(ans)))

    out = {"layers": a.layers, "cores": cores, "methods": {}}
    full = None
    for m in a.methods.split(","):
        t0 = time.perf_counter()
        r = ca.attribute(QUESTION, docs, answer=ANSWER, method=m, sources="sentences", samples=a.samples,
                         quality=not a.no_quality, top_documents=3)
        wall = time.perf_counter() - t0
        assert len(r.sources) == 80 or m == "hierarchical", (m, len(r.sources))
        full = r.answer_logprob
        sec = r.seconds["ablations"]
        out["methods"][m] = {"seconds": sec, "ablations": r.ablations, "top_k_drop": r.top_k_drop, "lds": r.lds,
                             "quality_seconds": r.seconds["quality"], "wall": wall, "sources": len(r.sources)}
        if a.no_quality:
            print("cattr %-12s %7.2f s  (%3d ablations)" % (m, sec, r.ablations))
        else:
            print("cattr %-12s %7.2f s  (%3d ablations; quality: top-1/3/5 drop %.3f %.3f %.3f, LDS %.3f, %.1f s more)"
                  % (m, sec, r.ablations, r.top_k_drop[1], r.top_k_drop[3], r.top_k_drop[5], r.lds,
                     r.seconds["quality"]))

    # the reference: a forward pass of the whole ablated prompt per mask
    ref = TorchQwen3(d, torch)
    def prompt_ids(keep):
        k = iter(keep)
        parts = [" ".join(s for s in doc if next(k)) for doc in split]
        seq = ids(pre)
        first = True
        for p in parts:
            if not p:
                continue
            if not first:
                seq += ids("\n\n")
            seq += ids(p)
            first = False
        return seq + ids(post) + ans

    whole = prompt_ids([1] * 80)
    t0 = time.perf_counter()
    lp_full = ref.logprob(whole, len(ans))
    t_full = time.perf_counter() - t0
    print("reference: the answer's log-probability %.5f (cattr %.5f, difference %.2g); a full pass %.2f s"
          % (lp_full, full, abs(lp_full - full), t_full))
    rng = np.random.default_rng(0)
    masks = rng.random((a.samples, 80)) < 0.5
    n_sur = a.ref_passes or a.samples
    t0 = time.perf_counter()
    for i in range(min(n_sur, a.samples)):
        ref.logprob(prompt_ids(masks[i]), len(ans))
    t_sur = (time.perf_counter() - t0) * a.samples / min(n_sur, a.samples)
    n_loo = a.ref_passes or 80
    t0 = time.perf_counter()
    for i in range(min(n_loo, 80)):
        ref.logprob(whole, len(ans))
    t_loo = (time.perf_counter() - t0) * 80 / min(n_loo, 80)
    scaled = " (timed %d, scaled)" % a.ref_passes if a.ref_passes else ""
    print("reference surrogate (%d passes)%s: %.1f s; 80 full passes%s: %.1f s" % (a.samples, scaled, t_sur, scaled,
                                                                                    t_loo))
    out["reference"] = {"surrogate_seconds": t_sur, "full_passes_80_seconds": t_loo, "full_pass_seconds": t_full,
                        "timed_passes": a.ref_passes or None, "logprob_difference": abs(lp_full - full)}
    M = out["methods"]
    for m, base, what in (("loo", t_loo, "80 full passes"), ("hierarchical", t_loo, "80 full passes"),
                          ("surrogate", t_sur, "the reference surrogate"), ("gradient", t_loo, "80 full passes")):
        if m in M:
            M[m]["speedup"] = base / M[m]["seconds"]
            print("%-12s %6.1fx faster than %s" % (m, base / M[m]["seconds"], what))
    return out


if __name__ == "__main__":
    main()
