"""Translates a golden Captum case (shared/golden/README.md) into the Captum-style Python call that produced it.

`build_call(case_dir, dtype)` returns (attribution object, kwargs for attribute(), expected). The call is Captum's
(class name, constructor arguments, attribute() keyword arguments) except for the documented cattr-specific
keywords: `_draws` (the recorded random draws), and `_node_rules` for LRP rules a Captum user would set on modules
(`model.conv2.rule = GammaRule(gamma=0.5)`), which cattr takes per ONNX node.
"""
import json
import os

import numpy as np

import cattr
from cattr import attr as A

GOLDEN_ROOT = os.environ.get("CATTR_GOLDEN") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "golden")
CAPTUM_DIR = os.path.join(GOLDEN_ROOT, "captum")
CAPTUM_SOURCE = os.path.join(os.path.dirname(GOLDEN_ROOT), "captum-0.8")  # Captum 0.8's source beside the golden data


def import_captum(module):
    """Captum's `module` (e.g. "captum.metrics") from ../shared/captum-0.8 or an installed Captum; the calling test
    is skipped when neither imports."""
    import importlib
    import sys

    import pytest

    if os.path.isdir(CAPTUM_SOURCE) and CAPTUM_SOURCE not in sys.path:
        sys.path.append(CAPTUM_SOURCE)
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means: no Captum here
        pytest.skip("Captum is not importable (%s)" % e)


class Unsupported(Exception):
    """The case needs something the Python API does not express (the test is skipped with this message)."""


def case_dirs():
    if not os.path.isdir(CAPTUM_DIR):
        return []
    return sorted(d for d in os.listdir(CAPTUM_DIR) if os.path.isfile(os.path.join(CAPTUM_DIR, d, "case.json")))


def _arg(c, key):
    for src in ("attribute_args", "attribute_defaults", "noise_tunnel_attribute_defaults"):
        d = c.get(src) or {}
        if key in d and d[key] is not None:
            return d[key]
    return None


def _tuples(v):
    if isinstance(v, list):
        return tuple(_tuples(x) for x in v)
    return v


# LRP rules Captum gives a module by default (LRP._check_and_attach_rules): what a Captum user does not set
def _is_default_lrp_rule(m):
    rule, rp = m.get("rule"), m.get("rule_params") or {}
    if rule == "lrp_passthrough_nonlinear":
        return True
    if rule == "EpsilonRule":
        return rp.get("epsilon", 1e-9) == 1e-9 and not rp.get("set_bias_to_zero")
    return False


def build_call(name, dtype):
    d = os.path.join(CAPTUM_DIR, name)
    with open(os.path.join(d, "case.json")) as f:
        c = json.load(f)
    T = cattr.load_safetensors(os.path.join(d, "tensors.safetensors"))
    npdt = np.float64 if dtype == "float64" else np.float32
    method = c["method"]
    model = cattr.load(os.path.join(d, "model.onnx"))

    def ten(n):
        return T[n]

    def fl(n):
        a = T[n]
        return a.astype(npdt) if a.dtype.kind == "f" else a

    ctor_all = c["constructor"]
    ctor = ctor_all
    inner = None
    if method == "NoiseTunnel":
        inner = c["inner_method"]
        ctor = ctor_all["args"]["attribution_method"]
    if method == "DataLoaderAttribution":
        inner_cls = getattr(A, ctor_all["args"]["attr_method"]["class"])
        obj = A.DataLoaderAttribution(inner_cls(model))
        aa = c["attribute_args"]
        dl = aa["dataloader"]
        data = [fl(n) for n in dl["dataset"]]
        bs = dl["batch_size"]
        loader = [tuple(d[i:i + bs] for d in data) for i in range(0, data[0].shape[0], bs)]
        kw = {"dataloader": loader}
        if aa.get("feature_mask"):
            ms = [ten(n) for n in aa["feature_mask"]["tensors"]]
            kw["feature_mask"] = tuple(ms) if aa["feature_mask"]["is_tuple"] else ms[0]
        if "perturbations_per_pass" in aa:
            kw["perturbations_per_pass"] = aa["perturbations_per_pass"]
        extra = set(aa) - {"dataloader", "feature_mask", "perturbations_per_pass"}
        if extra:
            raise Unsupported("DataLoaderAttribution arguments %s" % sorted(extra))
        return c, T, obj, kw
    cls_name = inner or method
    cls = getattr(A, cls_name)
    cargs = dict(ctor.get("args") or {})
    kwargs_ctor = {}
    for k in ("multiply_by_inputs", "eps"):
        if k in cargs:
            kwargs_ctor[k] = cargs[k]
    layer = c.get("layer")
    args = []
    if layer:
        to_input = bool(_arg(c, "attribute_to_layer_input") or _arg(c, "attribute_to_neuron_input"))
        names = []
        for lo in layer["onnx"]:
            tensors = lo["input_tensors" if to_input else "output_tensors"]
            if lo.get("module_returns_tuple") and not to_input:
                # one module with several output tensors: given as a tuple of their value names
                names.append(tuple(tensors))
            else:
                names.append(lo["module"])
        if layer["is_list"]:
            lay = list(names)
        else:
            lay = names[0]
        args.append(lay)
    if method in ("Lime", "LimeBase"):
        im, sf = cargs.get("interpretable_model"), cargs.get("similarity_func")
        if im:
            if not im["class"].endswith("SkLearnLasso"):
                raise Unsupported("interpretable model %s" % im["class"])
            kwargs_ctor["interpretable_model"] = A.SkLearnLasso(**im.get("args", {}))
        if sf:
            kwargs_ctor["similarity_func"] = A.get_exp_kernel_similarity_function(**sf.get("args", {}))
        if method == "LimeBase":
            kwargs_ctor.update(perturb_func=A.default_perturb_func, perturb_interpretable_space=True,
                               from_interp_rep_transform=A.default_from_interp_rep_transform,
                               to_interp_rep_transform=None)
    obj = cls(model, *args, **kwargs_ctor)
    if inner:
        obj = A.NoiseTunnel(obj)

    aa = c["attribute_args"]
    kw = {}
    ins = aa["inputs"]
    xs = [fl(n) for n in ins["tensors"]]
    kw["inputs"] = tuple(xs) if ins["is_tuple"] else xs[0]
    bl = aa.get("baselines")
    if bl:
        per = []
        for i, b in enumerate(bl["per_input"]):
            if "tensor" in b and b["tensor"]:
                per.append(fl(b["tensor"]))
            else:
                per.append(b["scalar"])
        kw["baselines"] = tuple(per) if bl["is_tuple"] else per[0]
    tg = c["target"]
    kind = tg["kind"]
    if kind == "int":
        kw["target"] = int(tg["value"])
    elif kind == "tuple":
        kw["target"] = tuple(int(v) for v in tg["value"])
    elif kind == "list":
        kw["target"] = [int(v) for v in tg["value"]]
    elif kind == "list_of_tuples":
        kw["target"] = [tuple(int(x) for x in v) for v in tg["value"]]
    elif kind == "tensor":
        kw["target"] = ten(tg.get("tensor") or "target").astype(np.int64)
    af = aa.get("additional_forward_args")
    if af:
        items = []
        for it in af["items"]:
            if it.get("tensor"):
                items.append(fl(it["tensor"]))
            else:
                items.append(it.get("constant_baked_into_onnx"))
        kw["additional_forward_args"] = tuple(items) if af.get("was_tuple") else items[0]
    for key in ("feature_mask", "layer_mask"):
        fm = aa.get(key)
        if fm:
            ms = [None if n is None else ten(n) for n in fm["tensors"]]
            kw[key] = tuple(ms) if fm["is_tuple"] else ms[0]
    lb = aa.get("layer_baselines")
    if lb:
        kw["layer_baselines"] = fl(lb["tensor"]) if lb.get("tensor") else lb["scalar"]
    ns = aa.get("neuron_selector")
    if ns:
        if ns["kind"] == "function":
            if ns.get("function") != "sum":
                raise Unsupported("neuron_selector function %s" % ns.get("function"))
            kw["neuron_selector"] = A.neuron_sum(*ns["dims"])
        elif ns["kind"] == "slices":
            sel = []
            for v in ns["index"]:
                if isinstance(v, dict):
                    s = v["slice"]
                    sel.append(slice(s[0], s[1], s[2]))
                else:
                    sel.append(int(v))
            kw["neuron_selector"] = tuple(sel)
        else:
            idx = [int(v) for v in ns["index"]]
            kw["neuron_selector"] = idx[0] if len(idx) == 1 else tuple(idx)
    verbatim = ("n_steps", "method", "internal_batch_size", "perturbations_per_eval", "n_samples", "stdevs",
                "nt_type", "nt_samples", "nt_samples_batch_size", "draw_baseline_from_distrib", "abs",
                "relu_attributions", "attribute_to_layer_input", "attribute_to_neuron_input",
                "enable_cross_tensor_attribution", "return_input_shape", "attr_dim_summation",
                "num_interp_features")
    for k in verbatim:
        if k in aa:
            v = aa[k]
            if k in ("method",) and isinstance(v, str):
                kw[k] = v
            else:
                kw[k] = _tuples(v)
    if "sliding_window_shapes" in aa:
        kw["sliding_window_shapes"] = _tuples(aa["sliding_window_shapes"])
    if "strides" in aa:
        kw["strides"] = _tuples(aa["strides"])
    extra = set(aa) - set(verbatim) - {"inputs", "baselines", "additional_forward_args", "feature_mask",
                                       "layer_mask", "layer_baselines", "neuron_selector", "sliding_window_shapes",
                                       "strides"}
    if extra:
        raise Unsupported("attribute() arguments %s" % sorted(extra))
    if c.get("return_convergence_delta"):
        kw["return_convergence_delta"] = True
    rd = c.get("random_draws")
    if rd:
        same = rd.get("f32_run_uses_same_draws")
        fmt, seq, n = "draw.%04d", rd["sequence"], rd["count"]
        if dtype == "float32" and not same:
            fmt = "f32.draw.%04d"
            n = rd.get("f32_count", n)
            seq = rd.get("f32_sequence") or seq
        kw["_draws"] = [(seq[k], T[fmt % k]) for k in range(n)]
    if method in ("LRP", "LayerLRP") or cls_name in ("LRP", "LayerLRP"):
        mods = c.get("modules") or []
        if any(m.get("rule") and m["onnx_nodes"] and not _is_default_lrp_rule(m) for m in mods):
            rules = []
            for m in mods:
                if not m.get("rule"):
                    continue
                rp = m.get("rule_params") or {}
                for node in m["onnx_nodes"]:
                    rules.append(A.NodeRule(node, m["rule"], rp.get("epsilon", 1e-9), rp.get("gamma", 0.25),
                                            bool(rp.get("set_bias_to_zero"))))
            kw["_node_rules"] = rules
    return c, T, obj, kw


def flatten(result):
    if isinstance(result, (tuple, list)):
        out = []
        for r in result:
            out.extend(flatten(r))
        return out
    return [result]


def structure(result):
    """The case.json output_structure of a result."""
    if isinstance(result, list):
        return {"kind": "list_per_layer",
                "items": ["tuple(%d)" % len(r) if isinstance(r, tuple) else "tensor" for r in result]}
    if isinstance(result, tuple):
        return {"kind": "tuple", "length": len(result)}
    return {"kind": "tensor"}


def compare(c, T, result, delta, dtype):
    """Checks every expected tensor (and the delta) with the case's tolerances; returns a list of failures."""
    f32 = dtype == "float32"
    tolkey = "vs_f32_reference" if f32 else "vs_f64_reference"
    attrs = flatten(result)
    fails = []
    for ordinal, ex in enumerate(c["expected"]):
        en = ex["f32_name" if f32 else "name"]
        tol = ex["tolerance"][tolkey]
        idx = ex.get("input_index", ordinal)
        if idx is None:
            idx = ordinal
        if idx >= len(attrs):
            fails.append("%s: missing (got %d results)" % (en, len(attrs)))
            continue
        a = np.asarray(attrs[idx], dtype=np.float64)
        e = np.asarray(T[en], dtype=np.float64)
        if a.size != e.size:
            fails.append("%s: shape %s, expected %s" % (en, a.shape, e.shape))
            continue
        if a.shape != e.shape and tuple(ex.get("shape") or ()) == e.shape:
            fails.append("%s: shape %s, expected %s" % (en, a.shape, e.shape))
            continue
        err = float(np.max(np.abs(a.reshape(-1) - e.reshape(-1)))) if a.size else 0.0
        allowed = tol["rtol"] * (float(np.max(np.abs(e))) if e.size else 0.0) + tol["atol"]
        if not err <= allowed:
            fails.append("%s: err %.3e > allowed %.3e" % (en, err, allowed))
    dj = c.get("delta")
    if c.get("return_convergence_delta") and dj:
        dn = dj["f32_name" if f32 else "name"]
        atol = dj["tolerance"][tolkey]["atol"]
        if delta is None:
            fails.append("delta missing")
        else:
            a = np.asarray(delta, dtype=np.float64).reshape(-1)
            e = np.asarray(T[dn], dtype=np.float64).reshape(-1)
            if a.size != e.size:
                fails.append("delta: %d values, expected %d" % (a.size, e.size))
            else:
                err = float(np.max(np.abs(a - e))) if a.size else 0.0
                if not err <= atol:
                    fails.append("delta: err %.3e > allowed %.3e" % (err, atol))
    return fails
