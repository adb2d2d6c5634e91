#!/usr/bin/python3
"""cattr on a GPU against Captum with PyTorch on the same GPU, at the same exact precision (issue: CUDA backend).

    python3 bench/gpu_bench.py --cattr CATTR [--device cuda] [--captum DIR] [--golden DIR]
        [--runs 10] [--json OUT.json] [--quick]

Work (each on both sides, float32, TF32 off in PyTorch: torch.backends.cuda.matmul.allow_tf32 = False,
torch.backends.cudnn.allow_tf32 = False, matmul precision "highest"):

* ResNet-18 (torchvision, random weights, seed 0, exported to ONNX here): IntegratedGradients 50 steps at batch 1
  and at batch 32, DeepLift, LayerGradCam (layer4), Occlusion (3x32x32 windows, stride 16).
* the golden custom CNN and MLP (their model.onnx and inputs): IntegratedGradients, Saliency, InputXGradient,
  FeatureAblation (and Occlusion on the MLP), Captum running the ONNX graph through bench/ig_vs_torch.py's
  interpreter.

Times: cattr's warm median from `cattr explain ... --runs N` ('time: first=.. warm_median=..'), and its first call as
the wall time of a fresh `cattr explain` process (start, model load, upload, attribution, output written); Captum's
warm median over N calls with torch.cuda.synchronize() around each, and (ResNet-18 IG batch 1) its first call as a
fresh Python process (imports, model, attribution). The attributions of the two sides are compared (max relative
difference) so that the timing is of the same work: on the golden models they agree to float32 rounding; on a
random ResNet-18, IG's integrand is a sum of ReLU networks' gradients at points where float32 rounding flips some
units on or off, so a few 1e-3 are expected there (cattr on the CPU against Captum on the CPU shows the same).
--device cpu with a CPU PyTorch is a dry run of the script.

Needs torch, torchvision, onnx and numpy (the GPU machine has them); Captum's pure-Python source on the path
(--captum DIR: the folder holding the captum package). Prints a table; --json writes every number.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def run_cattr(cattr, args, env=None):
    """Runs cattr; returns (wall seconds, stdout, stderr); raises on failure."""
    t = time.perf_counter()
    p = subprocess.run([cattr] + args, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"cattr {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return wall, p.stdout, p.stderr


def parse_time(text):
    for line in text.splitlines():
        if line.startswith("time: first="):
            parts = dict(kv.split("=") for kv in line[len("time: "):].split())
            return float(parts["first"]), float(parts["warm_median"])
    raise RuntimeError("no 'time:' line in cattr's output")


def rel_diff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(a.shape)
    scale = np.max(np.abs(b))
    return float(np.max(np.abs(a - b)) / scale) if scale > 0 else float(np.max(np.abs(a - b)))


class Bench:
    def __init__(self, a):
        self.a = a
        self.rows = []
        self.tmp = tempfile.mkdtemp(prefix="cattr_gpu_bench_")
        import torch
        self.torch = torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.dev = torch.device("cuda" if a.device.startswith("cuda") and torch.cuda.is_available() else "cpu")

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    def time_torch(self, fn):
        """warm median of fn() over --runs calls after one warm-up; returns (median s, last result)."""
        out = fn()
        self.sync()
        ts = []
        for _ in range(self.a.runs):
            t = time.perf_counter()
            out = fn()
            self.sync()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts), out

    def case(self, name, cattr_args, out_path, captum_fn):
        """One row: cattr warm and first call, Captum warm, their agreement."""
        row = {"work": name}
        try:
            _, so, se = run_cattr(self.a.cattr, cattr_args + ["--device", self.a.device, "--runs", str(self.a.runs),
                                                             "--output", out_path])
            row["cattr_first_in_process_s"], row["cattr_warm_s"] = parse_time(so + se)
            wall, _, _ = run_cattr(self.a.cattr, cattr_args + ["--device", self.a.device, "--output", out_path])
            row["cattr_first_call_s"] = wall  # process start to output written
            mine = np.load(out_path)
        except Exception as e:  # report and go on: one failing method must not hide the others
            row["cattr_error"] = str(e)
            mine = None
        if captum_fn is not None:
            try:
                row["captum_warm_s"], ref = self.time_torch(captum_fn)
                ref = ref.detach().cpu().numpy() if hasattr(ref, "detach") else np.asarray(ref)
                if mine is not None:
                    row["max_rel_diff"] = rel_diff(mine, ref)
            except Exception as e:
                row["captum_error"] = str(e)[-800:]
        if "cattr_warm_s" in row and "captum_warm_s" in row:
            row["speedup"] = row["captum_warm_s"] / row["cattr_warm_s"]
        self.rows.append(row)
        print(fmt_row(row), flush=True)
        return row

    # ---- ResNet-18 --------------------------------------------------------------------------------------------
    def resnet(self):
        torch = self.torch
        import torchvision
        from captum.attr import DeepLift, IntegratedGradients, LayerGradCam, Occlusion
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None).eval()
        unique_relus(torch, model)
        onnx_path = os.path.join(self.tmp, "resnet18.onnx")
        hw = 64 if self.a.quick else 224
        x1 = torch.randn(1, 3, hw, hw)
        try:
            torch.onnx.export(model, (x1,), onnx_path, opset_version=17, input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}}, dynamo=False)
        except TypeError:  # a torch without the dynamo switch
            torch.onnx.export(model, (x1,), onnx_path, opset_version=17, input_names=["x"], output_names=["logits"],
                              dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
        gm = model.to(self.dev)
        nb = 4 if self.a.quick else 32
        xb = torch.randn(nb, 3, hw, hw)
        steps = 8 if self.a.quick else 50
        for batch, x in ((1, x1), (nb, xb)):
            xp = os.path.join(self.tmp, f"r18_x{batch}.npy")
            np.save(xp, x.numpy())
            xd = x.to(self.dev)
            tgt = [int(i) for i in (torch.arange(batch) * 7 % 1000)]
            tg = torch.tensor(tgt, device=self.dev)
            ig = IntegratedGradients(gm)
            self.case(f"ResNet-18 IG {steps} steps, batch {batch}",
                      ["explain", onnx_path, "--method", "integrated-gradients", "--steps", str(steps), "--no-delta",
                       "--input", xp, "--targets", ",".join(map(str, tgt))],
                      os.path.join(self.tmp, "o.npy"),
                      lambda ig=ig, xd=xd, tg=tg: ig.attribute(xd, target=tg, n_steps=steps,
                                                              internal_batch_size=batch * steps))
            if batch != 1:
                continue
            dl = DeepLift(gm)
            self.case("ResNet-18 DeepLift, batch 1",
                      ["explain", onnx_path, "--method", "deeplift", "--no-delta", "--input", xp, "--targets",
                       ",".join(map(str, tgt))], os.path.join(self.tmp, "o.npy"),
                      lambda dl=dl, xd=xd, tg=tg: dl.attribute(xd, target=tg))
            gc = LayerGradCam(gm, gm.layer4)
            self.case("ResNet-18 LayerGradCam layer4, batch 1",
                      ["explain", onnx_path, "--method", "layer-gradcam", "--layer", "layer4", "--input", xp,
                       "--targets", ",".join(map(str, tgt))], os.path.join(self.tmp, "o.npy"),
                      lambda gc=gc, xd=xd, tg=tg: gc.attribute(xd, target=tg))
            oc = Occlusion(gm)
            win, stride = (3, 32, 32), (3, 16, 16)
            self.case("ResNet-18 Occlusion 3x32x32 stride 16, batch 1",
                      ["explain", onnx_path, "--method", "occlusion", "--sliding-window", "3,32,32", "--strides",
                       "3,16,16", "--perturbations-per-eval", "64", "--input", xp, "--targets",
                       ",".join(map(str, tgt))], os.path.join(self.tmp, "o.npy"),
                      lambda oc=oc, xd=xd, tg=tg: oc.attribute(xd, sliding_window_shapes=win, strides=stride,
                                                              target=tg, perturbations_per_eval=64))
        self.captum_first_call(onnx_path)

    def captum_first_call(self, onnx_path):
        """Captum's first call as a fresh process: python start, imports, ResNet-18 on the device, IG batch 1."""
        steps = 8 if self.a.quick else 50
        code = ("import time,torch,torchvision; t=time.perf_counter()\n"
                "torch.backends.cuda.matmul.allow_tf32=False; torch.backends.cudnn.allow_tf32=False\n"
                "from captum.attr import IntegratedGradients\n"
                f"d=torch.device('{self.dev.type}'); torch.manual_seed(0)\n"
                "m=torchvision.models.resnet18(weights=None).eval().to(d)\n"
                f"x=torch.randn(1,3,{64 if self.a.quick else 224},{64 if self.a.quick else 224},device=d)\n"
                f"a=IntegratedGradients(m).attribute(x,target=0,n_steps={steps},internal_batch_size={steps})\n"
                "a.cpu().numpy()\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.a.captum, env.get("PYTHONPATH", "")) if p)
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        row = {"work": f"Captum first call, ResNet-18 IG {steps} steps batch 1 (fresh process)"}
        if p.returncode == 0:
            row["captum_first_call_s"] = wall
        else:
            row["captum_error"] = p.stderr.strip()[-800:]
        self.rows.append(row)
        print(fmt_row(row), flush=True)

    # ---- the golden custom CNN and MLP ---------------------------------------------------------------------------
    def golden(self):
        torch = self.torch
        from captum.attr import FeatureAblation, InputXGradient, IntegratedGradients, Occlusion, Saliency
        import ig_vs_torch
        for model_name, case in (("custom_cnn", "custom_cnn__IntegratedGradients_gausslegendre"),
                                 ("custom_mlp", "custom_mlp__IntegratedGradients_gausslegendre")):
            cdir = os.path.join(self.a.golden, "captum", case)
            if not os.path.isdir(cdir):
                print(f"SKIP golden {model_name}: {cdir} not found")
                continue
            onnx_path = os.path.join(cdir, "model.onnx")
            t = ig_vs_torch.read_safetensors(os.path.join(cdir, "tensors.safetensors"))
            x = np.asarray(t["input.0"], dtype=np.float32)
            with open(os.path.join(cdir, "case.json")) as f:
                per = json.load(f)["target_per_example"]  # [[t], ...]: one target per example
            tgt = [int(v[0]) for v in per]
            xp = os.path.join(self.tmp, f"{model_name}_x.npy")
            np.save(xp, x)
            fwd, _ = ig_vs_torch.build_torch_model(onnx_path, device=self.dev)

            class M(torch.nn.Module):
                def forward(self, inp):
                    return fwd(inp)

            gm = M()
            xd = torch.from_numpy(x).to(self.dev)
            tg = torch.tensor(tgt, device=self.dev)
            targets = ["--targets", ",".join(map(str, tgt))]
            o = os.path.join(self.tmp, "g.npy")
            ig, sal, ixg, fa = IntegratedGradients(gm), Saliency(gm), InputXGradient(gm), FeatureAblation(gm)
            self.case(f"{model_name} IG 50 steps", ["explain", onnx_path, "--method", "integrated-gradients",
                                                    "--steps", "50", "--no-delta", "--input", xp] + targets, o,
                      lambda: ig.attribute(xd, target=tg, n_steps=50))
            self.case(f"{model_name} Saliency", ["explain", onnx_path, "--method", "saliency", "--input", xp] +
                      targets, o, lambda: sal.attribute(xd, target=tg))
            self.case(f"{model_name} InputXGradient", ["explain", onnx_path, "--method", "input-x-gradient",
                                                       "--input", xp] + targets, o,
                      lambda: ixg.attribute(xd, target=tg))
            self.case(f"{model_name} FeatureAblation", ["explain", onnx_path, "--method", "feature-ablation",
                                                        "--perturbations-per-eval", "1", "--input", xp] + targets, o,
                      lambda: fa.attribute(xd, target=tg))
            if model_name == "custom_mlp":
                oc = Occlusion(gm)
                win = (2,) * (x.ndim - 1)
                self.case(f"{model_name} Occlusion", ["explain", onnx_path, "--method", "occlusion",
                                                      "--sliding-window", ",".join(map(str, win)),
                                                      "--perturbations-per-eval", "1", "--input", xp] + targets, o,
                          lambda: oc.attribute(xd, sliding_window_shapes=win, target=tg))


def unique_relus(torch, model):
    """Captum's DeepLift needs each ReLU module used once and not in place; torchvision's BasicBlock calls its one
    ReLU twice. Give every block a second ReLU (the same function: the ONNX export is unchanged)."""
    import types
    for m in model.modules():
        if isinstance(m, torch.nn.ReLU):
            m.inplace = False
    for block in model.modules():
        if type(block).__name__ != "BasicBlock":
            continue
        block.relu2 = torch.nn.ReLU()

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu2(out + identity)

        block.forward = types.MethodType(forward, block)


def fmt_s(v):
    return "-" if v is None else (f"{v * 1e3:9.3f} ms" if v < 1 else f"{v:9.3f} s ")


def fmt_row(r):
    if "cattr_error" in r or "captum_error" in r:
        return f"{r['work']:<52} ERROR {r.get('cattr_error') or r.get('captum_error')}"
    sp = f"{r['speedup']:7.1f}x" if "speedup" in r else "       -"
    diff = f"{r['max_rel_diff']:.1e}" if "max_rel_diff" in r else "-"
    return (f"{r['work']:<52} cattr warm {fmt_s(r.get('cattr_warm_s'))} first {fmt_s(r.get('cattr_first_call_s'))}"
            f"  captum warm {fmt_s(r.get('captum_warm_s'))} first {fmt_s(r.get('captum_first_call_s'))}"
            f"  speedup {sp}  max_rel_diff {diff}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cattr", default=os.path.join(os.path.dirname(HERE), "build", "cattr"))
    ap.add_argument("--device", default="cuda", help="cattr's device (cuda; cpu for a dry run)")
    ap.add_argument("--captum", default="", help="the folder holding Captum's captum package")
    ap.add_argument("--golden", default=os.environ.get("CATTR_GOLDEN", os.path.join(os.path.dirname(HERE), "..",
                                                                                      "shared", "golden")))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", default="")
    ap.add_argument("--quick", action="store_true", help="small sizes (a dry run of the script)")
    ap.add_argument("--only", default="", help="resnet or golden")
    a = ap.parse_args()
    if a.runs < 2:
        ap.error("--runs must be at least 2 (the first call is not a warm one)")
    if a.captum:
        sys.path.insert(0, a.captum)
    b = Bench(a)
    info = {"device": a.device, "runs": a.runs, "torch": b.torch.__version__}
    if b.dev.type == "cuda":
        info["gpu"] = b.torch.cuda.get_device_name(0)
    print("gpu_bench:", json.dumps(info), flush=True)
    if a.only in ("", "golden"):
        b.golden()
    if a.only in ("", "resnet"):
        b.resnet()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"info": info, "rows": b.rows}, f, indent=1)
    errors = sum(1 for r in b.rows if "cattr_error" in r)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
