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
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
from make_llm_fixtures import npy, safetensors, tokenizer, weights  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds")


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- .npy ----------------------------------------------------------------------------------------------------


write("npy", "f4_2x3.npy", npy("<f4", (2, 3), struct.pack("<6f", *range(6))))
write("npy", "f8_scalar.npy", npy("<f8", (), struct.pack("<d", 3.25)))
write("npy", "i8_0x3.npy", npy("<i8", (0, 3), b""))
write("npy", "u2_v3.npy", npy("<u2", (3,), struct.pack("<3H", 1, 2, 65535), (3, 0)))
write("npy", "b1_v2.npy", npy("|b1", (4,), b"\x00\x01\x02\x00", (2, 0)))
write("npy", "f2_1x1x2.npy", npy("<f2", (1, 1, 2), b"\x00\x3c\x00\xc0"))

# ---- .safetensors --------------------------------------------------------------------------------------------


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

# ---- segments of a prompt: [form byte] then the text (form 4: JSON, byte 0x01, text) ---------------------------------
SEG_TEXT = "The capital of France is Paris. It is big!\nNew line, and more.\n\nCafé déjà vu (à Ñandú)? Yes."
for form in range(4):
    write("segments", "form%d.bin" % form, bytes([form]) + SEG_TEXT.encode())
write("segments", "strings.bin", bytes([4]) + json.dumps(["The capital", " of France", " is Paris."]).encode() +
      b"\x01The capital of France is Paris.")
write("segments", "spans.bin", bytes([4]) + b"[[4, 11], [15, 21]]\x01" + SEG_TEXT.encode())

# ---- checkpoint folders (fuzz_checkpoint's archive: [u8 file][u32 length][bytes]...) ---------------------------

CONFIG, MODEL, INDEX, SHARD1, SHARD2, TOKCFG = range(6)


def archive(files):
    out = b""
    for kind, data in files:
        data = data if isinstance(data, bytes) else data.encode()
        out += bytes([kind]) + struct.pack("<I", len(data)) + data
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
