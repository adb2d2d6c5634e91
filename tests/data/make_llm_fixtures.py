#!/usr/bin/python3
"""make_llm_fixtures.py - writes small Hugging Face checkpoint folders under tests/data/llm/ for the tests that must
run without the golden data (bad-input refusals, thread counts, messages), and the bad tensor files of
tests/data/cli/ that need no numpy. Plain Python: `python3 tests/data/make_llm_fixtures.py`. The outputs are
committed; tests/fuzz/make_seeds.py builds its checkpoint seeds with the same writers.

tests/data/llm/tiny/       qwen3, hidden 16, 2 layers, 4 heads / 2 kv heads of 4, vocab 300, random BF16 weights,
                           a byte-level BPE tokenizer.json (ids 0-255 the bytes, 256-299 merges of common pairs)
tests/data/llm/overflow/   the same with layer 0's up_proj at 1.7e38 (its float32 products overflow: NaN in the
                           attributions, which cattr must report with the node where it appeared)
tests/data/cli/*.safetensors, *.npy  malformed tensor files (see tests/data/cli/README.md)
"""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- writers (shared with tests/fuzz/make_seeds.py) -------------------------------------------------------------


def safetensors(entries, meta=None, align=1, pad_header=8):
    """entries: (name, dtype, shape, payload bytes) -> the bytes of a .safetensors file."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dt, shape, raw in entries:
        while len(data) % align:
            data += b"\x00"
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hj = json.dumps(header).encode()
    hj += b" " * ((pad_header - len(hj) % pad_header) % pad_header)
    return struct.pack("<Q", len(hj)) + hj + data


def npy(descr, shape, payload, version=(1, 0)):
    shp = "()" if not shape else "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shp)
    pre = 10 if version[0] == 1 else 12
    head += " " * ((64 - (pre + len(head) + 1) % 64) % 64) + "\n"
    hl = struct.pack("<H", len(head)) if version[0] == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes(version) + hl + head.encode() + payload


def bf16(values):
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def weight_shapes(cfg):
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", H // nh)
    mt = cfg["model_type"]
    shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [V, H]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        shapes.update({p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
                       p + "self_attn.q_proj.weight": [nh * d, H], p + "self_attn.k_proj.weight": [nkv * d, H],
                       p + "self_attn.v_proj.weight": [nkv * d, H], p + "self_attn.o_proj.weight": [H, nh * d],
                       p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                       p + "mlp.down_proj.weight": [H, I]})
        if mt == "qwen3":
            shapes.update({p + "self_attn.q_norm.weight": [d], p + "self_attn.k_norm.weight": [d]})
        if mt == "qwen2" or cfg.get("attention_bias"):
            shapes.update({p + "self_attn.q_proj.bias": [nh * d], p + "self_attn.k_proj.bias": [nkv * d],
                           p + "self_attn.v_proj.bias": [nkv * d]})
        if mt == "llama" and cfg.get("attention_bias"):
            shapes[p + "self_attn.o_proj.bias"] = [H]
        if mt == "llama" and cfg.get("mlp_bias"):
            shapes.update({p + "mlp.gate_proj.bias": [I], p + "mlp.up_proj.bias": [I], p + "mlp.down_proj.bias": [H]})
    return shapes


def weights(cfg, rng, dtype="BF16", override=None):
    """Random weights of a config (norms 1 + N(0, 0.1), the rest N(0, 0.2)) as safetensors entries; override maps a
    weight name to a constant value."""
    out = []
    for name, shape in sorted(weight_shapes(cfg).items()):
        n = 1
        for s in shape:
            n *= s
        norm = name.endswith("norm.weight")
        vals = [(1.0 if norm else 0.0) + rng.gauss(0, 0.1 if norm else 0.2) for _ in range(n)]
        if override and name in override:
            vals = [override[name]] * n
        raw = bf16(vals) if dtype == "BF16" else struct.pack("<%df" % n, *vals)
        out.append((name, dtype, shape, raw))
    return out


def byte_cp(b):
    if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE:
        return b
    return 256 + sum(1 for x in range(b) if not (0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE))


def tokenizer(pre, normalizer=None, post=None, added=(), merges=(), extra=()):
    """A byte-level BPE tokenizer.json: ids 0-255 the bytes, then `extra` tokens, the given merges and components."""
    vocab = {chr(byte_cp(b)): b for b in range(256)}
    for i, t in enumerate(extra):
        vocab[t] = 256 + i
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(id=i, content=c, single_word=sw, lstrip=ls, rstrip=rs, normalized=n, special=sp)
                         for i, c, sw, ls, rs, n, sp in added],
        "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": list(merges)}}, ensure_ascii=False)


BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}

# ---- the fixtures ----------------------------------------------------------------------------------------------

TINY = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "bos_token_id": 298, "eos_token_id": 299,
        "head_dim": 4, "hidden_act": "silu", "hidden_size": 16, "intermediate_size": 24,
        "max_position_embeddings": 128, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 300}


def tiny_tokenizer():
    # merges of frequent English pairs (Ġ is the byte-level space)
    pairs = [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "a"), ("e", "r"), ("o", "n"),
             ("\u0120", "c"), ("\u0120", "P"), ("a", "r"), ("i", "s"), ("\u0120", "F"), ("a", "n"), ("\u0120", "o"),
             ("o", "f"), ("\u0120", "is"), ("\u0120c", "a"), ("\u0120P", "ar"), ("\u0120Par", "is"), ("e", "s")]
    extra = ["".join(p) for p in pairs]
    added = [(298, "<|bos|>", False, False, False, False, True), (299, "<|eos|>", False, False, False, False, True)]
    return tokenizer(BL, normalizer={"type": "NFC"}, added=added, extra=extra,
                     merges=[a + " " + b for a, b in pairs])


def write_checkpoint(folder, cfg, entries, tok=None):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(safetensors(entries, meta={"format": "pt"}))
    if tok:
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            f.write(tok)


def main():
    llm = os.path.join(HERE, "llm")
    write_checkpoint(os.path.join(llm, "tiny"), TINY, weights(TINY, random.Random(12)), tiny_tokenizer())
    write_checkpoint(os.path.join(llm, "overflow"), TINY,
                     weights(TINY, random.Random(12), override={"model.layers.0.mlp.up_proj.weight": 1.7e38}),
                     tiny_tokenizer())
    cli = os.path.join(HERE, "cli")
    f32 = struct.pack("<4f", 1, 2, 3, 4)
    # two tensors whose bytes overlap (the format forbids it)
    ok = safetensors([("a", "F32", [2], f32[:8]), ("b", "F32", [2], f32[8:])])
    n = struct.unpack("<Q", ok[:8])[0]
    h = json.loads(ok[8:8 + n])
    h["b"]["data_offsets"] = [4, 12]
    hj = json.dumps(h).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    data = ok[8 + n:]
    with open(os.path.join(cli, "overlap.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + data)
    # 16 bytes after the last tensor that no tensor covers
    with open(os.path.join(cli, "unindexed.safetensors"), "wb") as f:
        f.write(safetensors([("input", "F32", [1, 1, 8, 8], bytes(256))]) + b"\x01" * 16)
    # a tensor named with bytes that are not UTF-8 (cJSON keeps them) and of a dtype cattr does not read: the message
    # names the tensor, and must escape those bytes
    hj = b'{"x\xff\x01": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}'
    hj += b" " * ((8 - len(hj) % 8) % 8)
    raw = struct.pack("<Q", len(hj)) + hj + f32[:4]
    with open(os.path.join(cli, "bad_name.safetensors"), "wb") as f:
        f.write(raw)
    # an .npy with 8 bytes after its data, and one with no rows
    with open(os.path.join(cli, "trailing.npy"), "wb") as f:
        f.write(npy("<f4", (1, 1, 8, 8), bytes(256)) + b"\x00" * 8)
    with open(os.path.join(cli, "empty_batch.npy"), "wb") as f:
        f.write(npy("<f4", (0, 1, 8, 8), b""))


if __name__ == "__main__":
    main()
