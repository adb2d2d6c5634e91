#!/usr/bin/python3
"""make_seeds.py - writes the seed corpora of the libFuzzer harnesses into tests/fuzz/seeds/<harness>/.

Plain Python (no numpy): run with any python3, `python3 tests/fuzz/make_seeds.py`. The outputs are committed. The
harnesses also read the repository's other small fixtures as seeds (tests/fuzz/run.sh lists them): tests/data/onnx,
models/digits, tests/data/io and tests/data/cli.
"""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds")


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- .npy ----------------------------------------------------------------------------------------------------


def npy(descr, shape, payload, version=(1, 0)):
    shp = "(" + "".join("%d, " % d for d in shape).rstrip(" ") + ")" if len(shape) != 1 else "(%d,)" % shape[0]
    if not shape:
        shp = "()"
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shp)
    pre = 10 if version[0] == 1 else 12
    pad = (64 - (pre + len(head) + 1) % 64) % 64
    head = head + " " * pad + "\n"
    hl = struct.pack("<H", len(head)) if version[0] == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes(version) + hl + head.encode() + payload


write("npy", "f4_2x3.npy", npy("<f4", (2, 3), struct.pack("<6f", *range(6))))
write("npy", "f8_scalar.npy", npy("<f8", (), struct.pack("<d", 3.25)))
write("npy", "i8_0x3.npy", npy("<i8", (0, 3), b""))
write("npy", "u2_v3.npy", npy("<u2", (3,), struct.pack("<3H", 1, 2, 65535), (3, 0)))
write("npy", "b1_v2.npy", npy("|b1", (4,), b"\x00\x01\x02\x00", (2, 0)))
write("npy", "f2_1x1x2.npy", npy("<f2", (1, 1, 2), b"\x00\x3c\x00\xc0"))

# ---- .safetensors --------------------------------------------------------------------------------------------


def safetensors(entries, meta=None, align=1, pad_header=8):
    """entries: (name, dtype, shape, payload bytes)."""
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


write("safetensors", "mixed.safetensors", safetensors([
    ("a", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
    ("b", "BF16", [3], b"\x80\x3f\x00\x40\x40\xc0"),
    ("c", "I64", [], struct.pack("<q", -7)),
    ("d", "F16", [1, 0], b""),
    ("e", "U8", [2], b"\x07\xff"),
], meta={"format": "pt"}))
write("safetensors", "aligned.safetensors", safetensors([
    ("x", "I32", [1], struct.pack("<i", 5)),
    ("y", "F64", [2], struct.pack("<2d", 0.5, -1.0)),
    ("z", "BOOL", [3], b"\x01\x00\x01"),
], align=8))
write("safetensors", "empty.safetensors", safetensors([]))

# ---- config.json ---------------------------------------------------------------------------------------------

QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "bos_token_id": 3, "eos_token_id": 4,
         "head_dim": 4, "hidden_act": "silu", "hidden_size": 8, "intermediate_size": 12,
         "max_position_embeddings": 64, "model_type": "qwen3", "num_attention_heads": 2, "num_hidden_layers": 1,
         "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
         "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 16}
LLAMA = dict(QWEN3, model_type="llama", architectures=["LlamaForCausalLM"], tie_word_embeddings=False,
             attention_bias=True, mlp_bias=True, eos_token_id=[4, 5], rope_theta=500000.0,
             rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 32, "rope_type": "llama3"})
del LLAMA["head_dim"]
QWEN2 = dict(QWEN3, model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=False)
del QWEN2["head_dim"]
MISTRAL = dict(QWEN2, model_type="mistral", sliding_window=4096)
for name, cfg in [("qwen3", QWEN3), ("llama", LLAMA), ("qwen2", QWEN2), ("mistral", MISTRAL)]:
    write("hf_config", name + ".json", json.dumps(cfg, indent=2))

# ---- tokenizer.json ------------------------------------------------------------------------------------------


def byte_cp(b):
    if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE:
        return b
    return 256 + sum(1 for x in range(b) if not (0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE))


def tokenizer(pre, normalizer=None, post=None, added=(), merges=(), extra=()):
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
BL_NR = dict(BL, use_regex=False)
QWEN_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
write("tokenizer_json", "bytelevel.json", tokenizer(BL, extra=["ab", "bc"], merges=["a b", ["b", "c"]]))
write("tokenizer_json", "qwen_like.json", tokenizer(
    {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": QWEN_RE}, "behavior": "Isolated",
                                            "invert": False}, BL_NR]},
    normalizer={"type": "NFC"}, post=BL_NR,
    added=[(300, "<|im_start|>", False, False, False, False, True), (301, "<think>", False, False, False, False, False)],
    extra=["\u0120t", "he"], merges=["\u0120 t", "h e"]))
write("tokenizer_json", "template.json", tokenizer(
    {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": " "}, "behavior": "Removed",
                                            "invert": False}]},
    normalizer={"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
    post={"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                    {"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [300], "tokens": ["<s>"]}}},
    added=[(300, "<s>", False, True, True, False, True), (301, "tok", True, False, False, True, False)]))

# ---- text for the real tokenizer -------------------------------------------------------------------------------

for i, t in enumerate(["The capital of France is", " Paris", "Hello, world! 123 4567",
                       "<|im_start|>user\nWhat's 2+2?<|im_end|>\n<think>\n\n</think>",
                       "caf\u00e9 e\u0301 \u4e2d\u6587 \U0001F600 \t\r\n  x", "I'll've don't WE'RE"]):
    write("tokenize", "text%d.txt" % i, t)
write("tokenize", "ids.bin", struct.pack("<8i", 785, 6722, 315, 9625, 374, 151643, 151667, -1))

# ---- checkpoint folders (fuzz_checkpoint's archive: [u8 file][u32 length][bytes]...) ---------------------------

CONFIG, MODEL, INDEX, SHARD1, SHARD2, TOKCFG = range(6)


def archive(files):
    out = b""
    for kind, data in files:
        data = data if isinstance(data, bytes) else data.encode()
        out += bytes([kind]) + struct.pack("<I", len(data)) + data
    return out


def bf16(values):
    out = b""
    for v in values:
        out += struct.pack("<f", v)[2:]
    return out


def weights(cfg, rng, dtype="BF16"):
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
    out = []
    for name, shape in sorted(shapes.items()):
        n = 1
        for s in shape:
            n *= s
        norm = name.endswith("norm.weight")
        vals = [(1.0 if norm else 0.0) + rng.gauss(0, 0.1 if norm else 0.02) for _ in range(n)]
        raw = bf16(vals) if dtype == "BF16" else struct.pack("<%df" % n, *vals)
        out.append((name, dtype, shape, raw))
    return out


rng = random.Random(7)
for name, cfg, dt in [("qwen3", QWEN3, "BF16"), ("llama", LLAMA, "F32"), ("qwen2", QWEN2, "BF16")]:
    w = weights(cfg, rng, dt)
    write("checkpoint", name + ".ckpt", archive([(CONFIG, json.dumps(cfg)), (MODEL, safetensors(w))]))
w = weights(MISTRAL, rng)
half = len(w) // 2
index = {"metadata": {"total_size": 0},
         "weight_map": {e[0]: ("model-00001-of-00002.safetensors" if i < half else "model-00002-of-00002.safetensors")
                        for i, e in enumerate(w)}}
write("checkpoint", "mistral_sharded.ckpt", archive([
    (CONFIG, json.dumps(MISTRAL)), (INDEX, json.dumps(index)), (SHARD1, safetensors(w[:half])),
    (SHARD2, safetensors(w[half:])), (TOKCFG, json.dumps({"eos_token": "<e>", "add_bos_token": False}))]))
