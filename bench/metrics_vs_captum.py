#!/usr/bin/python3
"""Captum's metrics and attacks, cattr against Captum on PyTorch, in one run (issue 35's bench).

    /usr/bin/python3 bench/metrics_vs_captum.py [--size 112] [--batch 2] [--runs 3] [--json FILE]

Model: torchvision's ResNet-18 (10 classes, random weights under a fixed seed, eval mode); inputs: a seeded batch of
--batch images of --size x --size. Each side runs in a fresh process with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset,
on every core, the same code with the imports switched (`captum.*` or `cattr.*`):
  * infidelity of IntegratedGradients' attributions (--ig-steps), n_perturb_samples --samples, Gaussian
    perturbations (std 0.01, torch's generator seeded): the metric's time alone;
  * sensitivity_max of IntegratedGradients (--sens-steps steps, --sens-samples perturbations, Captum's default
    perturbation): the metric, i.e. IG on the inputs and on every perturbed input;
  * PGD, Linf, radius 0.03, step 0.01, --pgd-steps steps, from the inputs (no random start), CrossEntropyLoss;
  * TCAV with two concepts (--tcav-examples seeded random images each, in batches of 10) at layer3 and layer4, the
    default classifier (sklearn's SGDClassifier, Python's and numpy's generators seeded alike): one TCAV object, as a
    user keeps it, and an empty save_path each run: the concepts' activations, the CAVs and the scores;
  * TracInCPFast at the final layer (fc) over --tracin-rows seeded training images of 3 x 32 x 32 (batches of 100)
    and 3 checkpoints (the model's weights scaled), CrossEntropyLoss(reduction="sum"), influence() of the inputs'
    first 2 examples at 32 x 32.
Times are the median of --runs warm runs (a first run, which exports the model for cattr, is not counted). Both sides'
results are compared (the largest difference against the largest value, and the share of values that differ at all:
PGD's sign steps turn a rounding difference in a gradient near zero into a step of the other sign).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CAPTUM = os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(ROOT), "shared", "captum-0.8"))

TIMER = r"""
import json, statistics, sys, time
import numpy as np, torch, torchvision
mode, size, batch, runs, ig_steps, samples, sens_steps, sens_samples, pgd_steps, tcav_n, tr_n, out = sys.argv[1:13]
tr_n = int(tr_n)
size, batch, runs, ig_steps, samples = int(size), int(batch), int(runs), int(ig_steps), int(samples)
sens_steps, sens_samples, pgd_steps, tcav_n = int(sens_steps), int(sens_samples), int(pgd_steps), int(tcav_n)
if mode == "captum":
    from captum.attr import IntegratedGradients
    from captum.concept import TCAV, Concept
    from captum.influence import TracInCPFast
    from captum.metrics import infidelity, sensitivity_max
    from captum.robust import PGD
else:
    from cattr.attr import IntegratedGradients
    from cattr.concept import TCAV, Concept
    from cattr.influence import TracInCPFast
    from cattr.metrics import infidelity, sensitivity_max
    from cattr.robust import PGD
import os, random, tempfile, warnings
from torch.utils.data import DataLoader
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=10).eval()
x = torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(1))
attr = IntegratedGradients(model).attribute(x, target=0, n_steps=ig_steps)

def perturb(inputs):
    noise = 0.01 * torch.randn(inputs.shape, generator=torch.Generator().manual_seed(2))
    return noise, inputs - noise

def timed(fn):
    res = fn()  # warm: the first call exports the model for cattr
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        res = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), res

r = {}
t, v = timed(lambda: infidelity(model, perturb, x, attr, target=0, n_perturb_samples=samples))
r["infidelity"] = (t, np.asarray(v, dtype=np.float64).tolist())
ig = IntegratedGradients(model)
def sens():
    torch.manual_seed(3)
    return sensitivity_max(ig.attribute, x, target=0, n_perturb_samples=sens_samples, n_steps=sens_steps)
t, v = timed(sens)
r["sensitivity_max"] = (t, np.asarray(v, dtype=np.float64).tolist())
pgd = PGD(model, torch.nn.CrossEntropyLoss(reduction="none"))
t, v = timed(lambda: pgd.perturb(x, 0.03, 0.01, pgd_steps, torch.zeros(batch, dtype=torch.long)))
r["pgd"] = (t, np.asarray(v, dtype=np.float64).ravel()[:4096].tolist())
gen = torch.Generator().manual_seed(4)
concepts = [torch.rand(tcav_n, 3, size, size, generator=gen) for _ in range(2)]
concepts[0][:, :, ::4] = 1.0  # stripes
warnings.simplefilter("ignore")
tcav_obj = TCAV(model, ["layer3", "layer4"], save_path=tempfile.mkdtemp())
def tcav():  # one TCAV object (as a user keeps it), an empty save_path each run: activations, CAVs and scores
    random.seed(0)
    np.random.seed(0)
    with tempfile.TemporaryDirectory() as d:
        tcav_obj.save_path = d
        tcav_obj.cavs.clear()
        tcav_obj.concepts = set()
        os.makedirs(os.path.join(d, tcav_obj.model_id))
        cs = [Concept(i, name, DataLoader(c, batch_size=10)) for i, (name, c) in enumerate(zip(("striped", "random"),
                                                                                               concepts))]
        s = tcav_obj.interpret(x, [cs], target=0)
        return [float(v) for layer in ("layer3", "layer4") for k in ("sign_count", "magnitude")
                for v in s["0-1"][layer][k]]
t, v = timed(tcav)
r["tcav"] = (t, v)
ckdir = tempfile.mkdtemp()
for c, scale in enumerate((1.0, 0.9, 0.8)):
    torch.save({k: v * scale if v.is_floating_point() else v for k, v in model.state_dict().items()},
               os.path.join(ckdir, "ckpt-%d.pt" % c))
def load(net, path):
    net.load_state_dict(torch.load(path))
    return 0.1
gen = torch.Generator().manual_seed(5)
train = torch.utils.data.TensorDataset(torch.rand(tr_n, 3, 32, 32, generator=gen), torch.randint(0, 10, (tr_n,), generator=gen))
xt = (torch.rand(2, 3, 32, 32, generator=gen), torch.tensor([0, 1]))
tracin = TracInCPFast(model, model.fc, train, ckdir, load, loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
                      batch_size=100)
t, v = timed(lambda: tracin.influence(xt))
r["tracin_fast"] = (t, np.asarray(v, dtype=np.float64).ravel().tolist())
json.dump(r, open(out, "w"))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ig-steps", type=int, default=32)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--sens-steps", type=int, default=8)
    ap.add_argument("--sens-samples", type=int, default=5)
    ap.add_argument("--pgd-steps", type=int, default=10)
    ap.add_argument("--tcav-examples", type=int, default=20)
    ap.add_argument("--tracin-rows", type=int, default=1000)
    ap.add_argument("--json")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), CAPTUM] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("CATTR_LIB", os.path.join(ROOT, "build", "libcattr.so"))
    res = {}
    for mode in ("captum", "cattr"):
        out = "/tmp/cattr-metrics-bench-%s-%d.json" % (mode, os.getpid())
        args = [str(v) for v in (mode, a.size, a.batch, a.runs, a.ig_steps, a.samples, a.sens_steps, a.sens_samples,
                                 a.pgd_steps, a.tcav_examples, a.tracin_rows, out)]
        p = subprocess.run([sys.executable, "-c", TIMER] + args, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
            return 1
        with open(out) as f:
            res[mode] = json.load(f)
        os.unlink(out)
    rows = {}
    print("ResNet-18 (random weights), batch %d of 3x%dx%d, %d threads, median of %d warm runs" %
          (a.batch, a.size, a.size, os.cpu_count() or 1, a.runs))
    for k in ("infidelity", "sensitivity_max", "pgd", "tcav", "tracin_fast"):
        tc, vc = res["captum"][k]
        tx, vx = res["cattr"][k]
        scale = max((abs(q) for q in vc), default=0.0) or 1.0
        diff = max((abs(p - q) for p, q in zip(vx, vc)), default=0.0) / scale
        moved = sum(1 for p, q in zip(vx, vc) if p != q) / max(len(vc), 1)
        rows[k] = {"captum_s": tc, "cattr_s": tx, "ratio": tc / tx, "max_diff_of_max": diff, "share_differing": moved}
        print("%-16s Captum %8.3f s   cattr %8.3f s   %.2fx   (largest difference %.2e of the largest value; "
              "%.1f%% of the values differ)" % (k, tc, tx, tc / tx, diff, 100 * moved))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
