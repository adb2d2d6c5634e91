#!/usr/bin/python3
"""Captum's influence functions, cattr against Captum on PyTorch, in one run (issue 35).

    /usr/bin/python3 bench/influence_functions_vs_captum.py [--hidden 64] [--rows 256] [--runs 3]

Model: an MLP (64 inputs, --hidden tanh units, 10 classes; seeded), --rows seeded training examples in batches of 64
(the Hessian's data too), CrossEntropyLoss(reduction="sum"). Each side runs in a fresh process with
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset, the same code with the import switched (`captum.influence` or
`cattr.influence`):
  * ArnoldiInfluenceFunction over every parameter (arnoldi_dim 30, projection_dim 10): construction (the Arnoldi
    iteration: one Hessian-vector product per step and batch) and influence() of 8 test examples;
  * NaiveInfluenceFunction over the last layer (its Hessian formed whole: one product per parameter and batch), the
    same two timings.
Times are medians of --runs (a first run, which exports the model for cattr, is not counted); both sides' influence
scores are compared (the largest difference against the largest score).
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
import json, os, statistics, sys, tempfile, time, warnings
import numpy as np, torch
warnings.simplefilter("ignore")
mode, hidden, rows, runs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if mode == "captum":
    from captum.influence._core.arnoldi_influence_function import ArnoldiInfluenceFunction
    from captum.influence._core.influence_function import NaiveInfluenceFunction
else:
    from cattr.influence import ArnoldiInfluenceFunction, NaiveInfluenceFunction
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 10))
d = tempfile.mkdtemp()
path = os.path.join(d, "model.pt")
torch.save(net.state_dict(), path)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(rows, 64, generator=g), torch.randint(0, 10, (rows,), generator=g)
test = (x[:8], y[:8])
data = torch.utils.data.TensorDataset(x, y)
loss = torch.nn.CrossEntropyLoss(reduction="sum")
res = {}
for name, cls, kw in (("arnoldi", ArnoldiInfluenceFunction, dict(arnoldi_dim=30, projection_dim=10)),
                      ("naive", NaiveInfluenceFunction, dict(layers=["2"], projection_dim=10))):
    t_init, t_inf = [], []
    for r in range(runs + 1):
        t0 = time.perf_counter()
        inf = cls(net, data, path, loss_fn=loss, batch_size=64, sample_wise_grads_per_batch=True, **kw)
        t1 = time.perf_counter()
        scores = inf.influence(test)
        t2 = time.perf_counter()
        if r:
            t_init.append(t1 - t0)
            t_inf.append(t2 - t1)
    res[name] = {"init": statistics.median(t_init), "influence": statistics.median(t_inf),
                 "scores": scores.detach().numpy().tolist()}
json.dump(res, open(out, "w"))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), CAPTUM] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    got = {}
    for mode in ("captum", "cattr"):
        out = "/tmp/cattr_bench_if_%s.json" % mode
        subprocess.run([sys.executable, "-c", TIMER, mode, str(a.hidden), str(a.rows), str(a.runs), out], env=env,
                       check=True)
        got[mode] = json.load(open(out))
    import numpy as np

    print("influence functions, MLP 64-%d-10, %d training rows (batches of 64), median of %d runs" %
          (a.hidden, a.rows, a.runs))
    for name in ("arnoldi", "naive"):
        c, m = got["captum"][name], got["cattr"][name]
        sc, sm = np.array(c["scores"]), np.array(m["scores"])
        print("  %-8s construction: Captum %.3f s, cattr %.3f s (%.2fx); influence: Captum %.3f s, cattr %.3f s "
              "(%.2fx); scores differ by %.1e of the largest" % (
                  name, c["init"], m["init"], c["init"] / m["init"], c["influence"], m["influence"],
                  c["influence"] / m["influence"], np.abs(sc - sm).max() / max(np.abs(sc).max(), 1e-30)))


if __name__ == "__main__":
    main()
