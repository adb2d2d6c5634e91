#!/usr/bin/python3
"""cattr on a language model with a released model's shapes: time, peak memory and the share of the GEMM roofline.

Run from the repository root with Debian's Python (numpy only):

    /usr/bin/python3 bench/llm_qwen3_shape.py [--shape qwen3-0.6b|qwen3-8b|llama3-8b] [--cattr build/cattr]
                                              [--dir /tmp/cattr-<shape>-random]

1. Writes (once; reused when present) a randomly initialised BF16 checkpoint with the shapes of --shape: Qwen3-0.6B
   (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128, intermediate 3072, vocab 151936, tied embeddings;
   about 1.2 GB), Qwen3-8B (hidden 4096, 36 layers, 32/8 heads, intermediate 12288, vocab 151936, its own LM head;
   16.4 GB) or Llama-3-8B (hidden 4096, 32 layers, 32/8 heads, intermediate 14336, vocab 128256; 16.1 GB), as
   config.json + model.safetensors. cattr keeps the BF16 matrices as stored (mapped), so the peak RSS is about the
   file's size plus the activation budget.
2. Measures the roofline: OpenBLAS sgemm at 2048^3 (`sgemm_rate`, built with cattr: the same BLAS and threads),
   and the rate of cattr's own AVX-512F float32 GEMM at 2048^3 (`sgemm_rate 2048 5 own`), which cattr uses in place
   of OpenBLAS where the CPU has AVX-512F ('own roof': the share of that rate; CATTR_GEMM=openblas turns it off).
3. Runs `cattr explain-llm` on a 42-token prompt with a one-token target, each in its own process (peak RSS from
   os.wait4): LayerIG with 64 steps, FeatureAblation over all tokens, and FeatureAblation evaluated one forward per
   ablated token (--perturbations-per-eval 1 --no-prefix-cache, the reference the batched form is compared with).
   `--runs R` gives the first-call and the warm (median of runs 2..R) time. LayerIG runs again with --precision high
   (bfloat16 GEMM inputs, float32 accumulation) and --precision-error (its error against highest, measured in the
   same process). `--pairs N` runs the two FeatureAblation forms alternately N times in all and reports the median
   of the N ratios (each pair back to back: this machine's load drifts by 10-30% within minutes).

FLOPs of LayerIG = 2 x (matmul weights of the layers, without embedding and LM head) x tokens x steps x 2 (forward
and input-gradient backward) + the LM head at the scored positions (2 x V x H per step, forward and backward).
Share of the roofline = FLOPs / warm time / sgemm rate (own roof: / the own GEMM rate; for LayerIG the own rate is
measured again right after its run and the higher of the two taken, since this shared machine's rate drifts).
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:  # pragma: no cover
    sys.exit("numpy missing: run this script with /usr/bin/python3 (Debian's Python)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the released models' shapes (their config.json); --shape picks one
SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, intermediate_size=3072, vocab_size=151936, model_type="qwen3",
                       tie_word_embeddings=True, rope_theta=1000000.0),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=12288, vocab_size=151936, model_type="qwen3",
                     tie_word_embeddings=False, rope_theta=1000000.0),
    "llama3-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, intermediate_size=14336, vocab_size=128256, model_type="llama",
                      tie_word_embeddings=False, rope_theta=500000.0),
}
SHAPE = dict(SHAPES["qwen3-0.6b"])


def config():
    c = {"architectures": ["Qwen3ForCausalLM" if SHAPE["model_type"] == "qwen3" else "LlamaForCausalLM"],
         "attention_bias": False, "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
         "rope_scaling": None, "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645,
         "sliding_window": None, "use_sliding_window": False}
    c.update(SHAPE)
    return c


def tensors():
    """(name, shape, kind) of every weight, in file order."""
    H, L, nh, nkv, d, I, V = (SHAPE[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                  "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size"))
    out = [("model.embed_tokens.weight", (V, H), "w")]
    for l in range(L):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", (H,), "one"), (p + "post_attention_layernorm.weight", (H,), "one"),
                (p + "self_attn.q_proj.weight", (nh * d, H), "w"), (p + "self_attn.k_proj.weight", (nkv * d, H), "w"),
                (p + "self_attn.v_proj.weight", (nkv * d, H), "w"), (p + "self_attn.o_proj.weight", (H, nh * d), "w"),
                (p + "mlp.gate_proj.weight", (I, H), "w"), (p + "mlp.up_proj.weight", (I, H), "w"),
                (p + "mlp.down_proj.weight", (H, I), "w")]
        if SHAPE["model_type"] == "qwen3":
            out += [(p + "self_attn.q_norm.weight", (d,), "one"), (p + "self_attn.k_norm.weight", (d,), "one")]
    out.append(("model.norm.weight", (H,), "one"))
    if not SHAPE["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, H), "w"))
    return out


def layer_matmul_params():
    return sum(int(np.prod(s)) for n, s, k in tensors() if k == "w" and n.startswith("model.layers."))


def write_checkpoint(d, seed=0):
    os.makedirs(d, exist_ok=True)
    st = os.path.join(d, "model.safetensors")
    if os.path.exists(st) and os.path.exists(os.path.join(d, "config.json")):
        return False
    rng = np.random.default_rng(seed)
    header, off = {}, 0
    specs = tensors()
    for name, shape, kind in specs:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    tmp = st + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, kind in specs:
            rows = shape[0] if len(shape) == 2 else 1
            step = max(1, (1 << 25) // (int(np.prod(shape)) // rows))  # ~32 M values at a time (8B shapes)
            for r0 in range(0, rows, step):
                sh = (min(step, rows - r0),) + tuple(shape[1:]) if len(shape) == 2 else shape
                if kind == "one":
                    x = np.ones(sh, np.float32)
                else:
                    x = (rng.standard_normal(sh, dtype=np.float32) * 0.02).astype(np.float32)
                u = x.view(np.uint32)
                bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
                f.write(bf.tobytes())
    os.replace(tmp, st)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(), f, indent=1)
    return True


def run_wait4(cmd, env):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    return p.returncode, out.decode(), err.decode(), wall, ru.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cattr", default=os.path.join(REPO, "build", "cattr"))
    ap.add_argument("--sgemm", default=None, help="the sgemm_rate binary (default: next to --cattr)")
    ap.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES),
                    help="the released model whose shapes the random checkpoint takes")
    ap.add_argument("--dir", default=None, help="where the checkpoint is written/reused (default: "
                    "/tmp/cattr-<shape>-random)")
    ap.add_argument("--tokens", type=int, default=42)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--runs", type=int, default=2, help="calls per process (first + warm median of the rest)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--max-memory", default=None, help="passed to cattr (default: cattr's own default)")
    ap.add_argument("--methods", default="layer-ig,layer-ig-high,feature-ablation,feature-ablation-1",
                    help="comma list of layer-ig, layer-ig-high (--precision high), feature-ablation, "
                         "feature-ablation-1 (one full forward per ablated token)")
    ap.add_argument("--pairs", type=int, default=1,
                    help="FeatureAblation ratio: run batched and one-forward-per-token alternately this many more "
                         "times and report every pair's ratio and their median (a shared machine's load changes "
                         "within minutes; a pair runs back to back)")
    ap.add_argument("--json", default=None, help="write every measurement as JSON")
    a = ap.parse_args()

    SHAPE.clear()
    SHAPE.update(SHAPES[a.shape])
    a.dir = a.dir or "/tmp/cattr-%s-random" % a.shape
    if not os.path.exists(a.cattr):
        sys.exit("cattr binary %s missing: build first (cmake --build build)" % a.cattr)
    sg = a.sgemm or os.path.join(os.path.dirname(a.cattr), "sgemm_rate")
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(a.threads)

    t0 = time.perf_counter()
    if write_checkpoint(a.dir):
        print("wrote %s in %.1f s" % (a.dir, time.perf_counter() - t0), flush=True)
    size = os.path.getsize(os.path.join(a.dir, "model.safetensors"))
    n_params = sum(int(np.prod(s)) for _, s, _ in tensors())
    f32_mib = n_params * 4 / 2**20
    P = layer_matmul_params()
    H, V = SHAPE["hidden_size"], SHAPE["vocab_size"]
    print("checkpoint (%s shapes): %s, %.2f GB BF16, %.1f M parameters (%.1f M in layer matmuls), as float32 "
          "%.0f MiB (cattr keeps the BF16 matrices as stored)" % (a.shape, a.dir, size / 1e9, n_params / 1e6, P / 1e6,
                                                                  f32_mib), flush=True)

    rc, out, err, _, _ = run_wait4([sg, "2048", "5"], env)
    m = re.search(r"gflops=([0-9.]+)", out)
    if rc != 0 or not m:
        sys.exit("sgemm_rate failed: %s" % (err or out))
    rate = float(m.group(1)) * 1e9
    print("roofline: sgemm 2048^3 = %.1f GFLOP/s (%d threads)" % (rate / 1e9, a.threads), flush=True)
    def own_gemm_rate():
        rc, out, err, _, _ = run_wait4([sg, "2048", "5", "own"], env)
        m = re.search(r"gflops=([0-9.]+)", out)
        return float(m.group(1)) * 1e9 if rc == 0 and m else None

    own_rate = own_gemm_rate()
    if own_rate:
        print("cattr's own float32 GEMM (AVX-512F or AVX2, used in place of OpenBLAS here) at 2048^3 = %.1f GFLOP/s: "
              "'own roof' is the share of that rate" % (own_rate / 1e9), flush=True)
    else:
        print("cattr's own float32 GEMM: not available on this CPU (OpenBLAS runs every product)", flush=True)

    rng = np.random.default_rng(1)
    prompt = ",".join(str(int(x)) for x in rng.integers(0, V, a.tokens))
    target = str(int(rng.integers(0, V)))
    results = {"sgemm_gflops": rate / 1e9, "own_gemm_gflops": own_rate / 1e9 if own_rate else None, "threads": a.threads, "tokens": a.tokens, "steps": a.steps,
               "f32_weights_mib": f32_mib, "runs": {}}
    base = [a.cattr, "explain-llm", a.dir, "--prompt-ids", prompt, "--target-ids", target, "--runs", str(a.runs),
            "--quiet"]
    if a.max_memory:
        base += ["--max-memory", a.max_memory]
    flops_ig = 2.0 * P * a.tokens * a.steps * 2 + 2.0 * V * H * a.steps * 2
    flops_fa = 2.0 * P * a.tokens * (a.tokens + 1) + 2.0 * V * H * (a.tokens + 1)  # one full forward per row
    print("\n%-22s %10s %10s %9s %10s %9s %9s  %s" % ("method", "first s", "warm s", "RSS MiB", "GFLOP/s", "roofline",
                                                     "own roof", "notes"))
    for meth in [x for x in a.methods.split(",") if x]:
        if meth in ("layer-ig", "layer-ig-high"):
            cmd = base + ["--method", "layer-ig", "--steps", str(a.steps)]
            if meth == "layer-ig-high":
                cmd += ["--precision", "high", "--precision-error"]
            flops = flops_ig
        elif meth == "feature-ablation":
            cmd = base + ["--method", "feature-ablation"]
            flops = flops_fa
        elif meth == "feature-ablation-1":
            cmd = base + ["--method", "feature-ablation", "--perturbations-per-eval", "1", "--no-prefix-cache"]
            flops = flops_fa
        else:
            sys.exit("unknown method %s" % meth)
        rc, out, err, wall, rss = run_wait4(cmd, env)
        roof, after = own_rate, None
        if own_rate and meth.startswith("layer-ig") and rc == 0:
            # this machine's GEMM rate moves 10-30% with the load of its neighbours: measured again right after the
            # run, and the share taken of the higher of the two (the stricter)
            after = own_gemm_rate()
            roof = max(own_rate, after or 0)
        m = re.search(r"time: first=([0-9.]+) warm_median=([0-9.na]+)", out + err)
        if rc != 0 or not m:
            print("%-22s failed (exit %d): %s" % (meth, rc, (err or out).strip()[-400:]))
            results["runs"][meth] = {"rc": rc, "stderr": err[-2000:]}
            continue
        first, warm = float(m.group(1)), float(m.group(2))
        t = warm if warm == warm else first
        gf = flops / t
        note = "process %.1f s" % wall
        m2 = re.search(r"precision high vs highest: (.*)", err)
        if m2:
            note += "; " + m2.group(1).strip()
        if meth.startswith("layer-ig"):
            note += ", FLOPs %.3g (roofline time %.1f s)" % (flops, flops / rate)
            if own_rate:
                note += "; own GEMM 2048^3 before %.1f, after %.1f GFLOP/s" % (own_rate / 1e9,
                                                                              (after or float("nan")) / 1e9)
        own_share = "%8.1f%%" % (100 * gf / roof) if roof else "%9s" % "-"
        print("%-22s %10.3f %10.3f %9.0f %10.1f %8.1f%% %s  %s" % (meth, first, warm, rss, gf / 1e9, 100 * gf / rate,
                                                                  own_share, note), flush=True)
        results["runs"][meth] = {"first_s": first, "warm_s": warm, "rss_mib": rss, "flops": flops,
                                 "gflops": gf / 1e9, "roofline_share": gf / rate,
                                 "own_gemm_share": gf / roof if roof else None, "own_gemm_gflops": roof / 1e9 if roof
                                 else None, "process_s": wall, "cmd": cmd}
    r = results["runs"]
    if "feature-ablation" in r and "feature-ablation-1" in r and "warm_s" in r["feature-ablation"] \
            and "warm_s" in r["feature-ablation-1"]:
        sp = r["feature-ablation-1"]["warm_s"] / r["feature-ablation"]["warm_s"]
        results["fa_speedup"] = sp
        print("\nFeatureAblation batched with prefix reuse vs one forward per token: %.2fx" % sp)
    if a.pairs > 1 and "fa_speedup" in results:
        fa = base + ["--method", "feature-ablation"]
        cmds = (fa, fa + ["--perturbations-per-eval", "1", "--no-prefix-cache"])
        ratios = [results["fa_speedup"]]
        for i in range(1, a.pairs):
            t = []
            for cmd in cmds:
                rc, out, err, _, _ = run_wait4(cmd, env)
                m = re.search(r"time: first=([0-9.]+) warm_median=([0-9.na]+)", out + err)
                if rc != 0 or not m:
                    sys.exit("feature-ablation pair %d failed (exit %d): %s" % (i + 1, rc, (err or out).strip()[-400:]))
                w = float(m.group(2))
                t.append(w if w == w else float(m.group(1)))
            ratios.append(t[1] / t[0])
            print("pair %d: batched %.3f s, one forward per token %.3f s: %.2fx" % (i + 1, t[0], t[1], ratios[-1]),
                  flush=True)
        srt = sorted(ratios)
        med = srt[len(srt) // 2] if len(srt) % 2 else 0.5 * (srt[len(srt) // 2 - 1] + srt[len(srt) // 2])
        results["fa_speedup_pairs"] = ratios
        results["fa_speedup_median"] = med
        print("FeatureAblation ratio over %d pairs: median %.2fx, min %.2fx, max %.2fx"
              % (len(ratios), med, srt[0], srt[-1]))
    highest = [v["rss_mib"] for k, v in r.items() if k != "layer-ig-high" and "rss_mib" in v]
    if highest:
        print("peak RSS at precision highest %.0f MiB; the BF16 file + 1 GiB = %.0f MiB (float32 weights would take "
              "%.0f MiB)" % (max(highest), size / 2**20 + 1024, f32_mib))
        results["peak_rss_mib"] = max(highest)
    if "rss_mib" in r.get("layer-ig-high", {}):
        print("(layer-ig-high with --precision-error holds the float32 and the bfloat16 weights: %.0f MiB)"
              % r["layer-ig-high"]["rss_mib"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
