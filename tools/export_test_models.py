#!/usr/bin/python3
"""export_test_models.py - small PyTorch models that use the ops of exported architectures (LayerNorm in its
decomposed opset-14 form and as LayerNormalization at opset 17, GELU through Erf, Hardswish / Hardsigmoid in a
squeeze-and-excitation block with a BatchNorm folded into its Conv, ELU / SELU / Softplus, Pow and Sqrt, LSTM and GRU
layers, Swin's shifted-window shape logic, ConvTranspose, Split, log_softmax over channels,
Resize, PReLU, norms, einsum, amax), exported by
torch.onnx.export with constant folding, with what PyTorch computes for them: tests/test_exported.c checks cattr's
forward pass and input gradients against these.

Run with Debian's interpreter (python3-torch, python3-numpy):  /usr/bin/python3 tools/export_test_models.py
Writes tests/data/exported/<name>.onnx and <name>.npz-like .npy files: <name>.x.npy (the input, batch 2),
<name>.y.npy (the output), <name>.g.npy (d out[b, target] / d x summed over the batch: the gradient an attribution
reads) and <name>.t.npy (the target per example). Deterministic (fixed seeds); torch is not a dependency of cattr.
"""
import os

import numpy as np
import torch
from torch import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "exported")


class GeluLnMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x))))


class MobileBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.Hardswish()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(8, 4, 1)
        self.fc2 = nn.Conv2d(4, 8, 1)
        self.gate = nn.Hardsigmoid()
        self.head = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x):
        h = self.act(self.bn(self.conv(x)))
        s = self.gate(self.fc2(torch.relu(self.fc1(self.pool(h)))))
        return self.head(torch.flatten(h * s, 1))


class ActMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.fc2 = nn.Linear(12, 12)
        self.fc3 = nn.Linear(12, 3)

    def forward(self, x):
        h = nn.functional.elu(self.fc1(x), alpha=0.7)
        h = nn.functional.selu(self.fc2(h)) + torch.sqrt(h * h + 1.0)
        return self.fc3(nn.functional.softplus(h) + h.pow(2) * 0.1)


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(6, 6), nn.Tanh())  # scopes "/block/block.1/mlp/mlp.0": block.1.mlp.0
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.mlp(x)))


class Nested(nn.Module):
    """Modules inside a Sequential inside the model: scopes "/block/block.1/fc/Gemm" -> module path block.1.fc."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 6), Inner())

    def forward(self, x):
        return self.block(x)


class ShapeOps(nn.Module):
    """Shapes computed from the input's shape (Shape, Gather, Div, Cast, Unsqueeze, Concat into Reshape; chunk into
    Slice with computed ends), as ShuffleNet's channel shuffle and a flatten by x.size(0) export them."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.head = nn.Linear(4 * 5 * 5, 3)

    def forward(self, x):
        h = self.conv(x)
        b, c, hh, ww = h.size()
        h = h.view(b, 2, c // 2, hh, ww).transpose(1, 2).contiguous().view(b, c, hh, ww)  # channel shuffle
        left, right = h.chunk(2, dim=1)
        h = torch.cat([torch.relu(left), right], dim=1)
        return self.head(h.view(h.size(0), -1))


class TokenCat(nn.Module):
    """ViT's class token: a parameter expanded to the batch (expand(n, -1, -1) exports as Shape, ConstantOfShape,
    Equal, Where and Expand), concatenated to the tokens, then a mean over the tokens."""

    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 4))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        c = self.cls.expand(x.size(0), -1, -1)
        return self.head(torch.cat([c, x], dim=1).mean(dim=1))


class Recurrent(nn.Module):
    """A two-layer bidirectional LSTM (or GRU) over [batch, time, features], its initial states computed from the
    input (so the gradient flows into them too), read through all three of its outputs: the last step's output, the
    final hidden states and (LSTM) the final cell states."""

    def __init__(self, cell):
        super().__init__()
        self.lstm = cell is nn.LSTM
        self.rnn = cell(5, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.init = nn.Linear(5, 6)
        self.head = nn.Linear(12 + 6 + (6 if self.lstm else 0), 3)

    def forward(self, x):
        h0 = torch.tanh(self.init(x.mean(1))).unsqueeze(0).repeat(4, 1, 1)
        if self.lstm:
            o, (h, c) = self.rnn(x, (h0, 0.5 * h0))
            return self.head(torch.cat([o[:, -1], h[-1], c[0]], 1))
        o, h = self.rnn(x, h0)
        return self.head(torch.cat([o[:, -1], h[-2]], 1))


class ShiftWindow(nn.Module):
    """Swin's shape logic in small: padding to a multiple of the window computed from the input's shape (Mod), a
    cyclic shift (torch.roll), a region mask written slice by slice (ScatterND) and a position ramp (Range)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(2 * 8 * 8, 3)

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        x = nn.functional.pad(x, (0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4))
        x = torch.roll(x, shifts=(-1, -1), dims=(2, 3))
        mask = x.new_zeros((x.shape[2], x.shape[3]))
        cnt = 0
        for hs in (slice(0, -2), slice(-2, None)):
            for ws in (slice(0, -2), slice(-2, None)):
                mask[hs, ws] = cnt
                cnt += 1
        ramp = torch.arange(x.shape[2]).view(1, 1, -1, 1).to(x.dtype)
        y = x * (mask + 1) + 0.1 * ramp
        return self.head(y.flatten(1))


class Upsampler(nn.Module):
    """A decoder's ops: transposed convolutions (stride 2 with output_padding, grouped and dilated), a split into
    equal chunks and one of given sizes, log_softmax over the channels, then a classifier."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.up2 = nn.ConvTranspose2d(4, 4, 2, stride=1, groups=2, dilation=2, bias=False)
        self.head = nn.Linear(2 * 10 * 10 + 1 * 10 * 10, 3)

    def forward(self, x):
        h = self.up2(torch.tanh(self.up(x)))
        a, b = torch.chunk(h, 2, dim=1)
        c, _ = torch.split(h, [1, 3], dim=1)
        z = torch.log_softmax(a * b, dim=1)
        return self.head(torch.cat([z.flatten(1), c.flatten(1)], 1))


class Interp(nn.Module):
    """Resize as PyTorch exports F.interpolate: nearest by 2, bilinear by 2 (half-pixel), bilinear to a size with
    align_corners, nearest to a size computed from the input's shape, and linear over one dim."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(3 * (8 * 8 + 8 * 8 + 7 * 9 + 6 * 10) + 3 * 4 * 7, 3)

    def forward(self, x):
        f = nn.functional.interpolate
        a = f(x, scale_factor=2, mode="nearest")
        b = f(x, scale_factor=2, mode="bilinear", align_corners=False)
        c = f(x, size=(7, 9), mode="bilinear", align_corners=True)
        d = f(x, size=(x.shape[2] + 2, 10), mode="nearest")
        e = f(x.flatten(2, 3)[:, :, :12].reshape(x.shape[0], 3 * 4, 3), size=7, mode="linear", align_corners=False)
        return self.head(torch.cat([t.flatten(1) for t in (a, b, c, d, e)], 1))


class Misc(nn.Module):
    """PReLU (a slope per channel), a norm over a dim (ReduceL2), einsum against a weight and between activations,
    amax (ReduceMax), and a comparison used as a mask."""

    def __init__(self):
        super().__init__()
        self.act = nn.PReLU(3, init=0.2)
        self.w = nn.Parameter(torch.randn(5, 4))
        self.head = nn.Linear(3 * 4 + 3 * 3 + 3 + 3, 3)

    def forward(self, x):
        h = self.act(x)                                   # [B, 3, 5]
        n = h.norm(dim=2)                                 # [B, 3]
        p = torch.einsum("bcl,lk->bck", h, self.w)        # [B, 3, 4]
        q = torch.einsum("bcl,bdl->bcd", h, x)            # [B, 3, 3]
        m = h.amax(dim=2) * (x.mean(2) > 0).to(x.dtype)   # [B, 3]
        return self.head(torch.cat([p.flatten(1), q.flatten(1), n, m], 1))


class ScriptedIf(nn.Module):
    """Control flow on the batch size, exported from TorchScript as If nodes: one example takes a path through a
    Reshape to [6] that only a batch of one can take; both paths compute the same function. A second If on the width
    always takes its then branch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        h = self.fc(x)
        if x.size(0) == 1:
            h = torch.relu(h.view(6)).view(1, 6)
        else:
            h = torch.relu(h)
        if h.size(1) > 4:
            h = torch.tanh(h) * 2.0
        else:
            h = h * 0.0
        return self.head(h)


def export(name, model, x, target, opset):
    torch.manual_seed(0)
    model.eval()
    path = os.path.join(OUT, name + ".onnx")
    torch.onnx.export(model, (x,), path, opset_version=opset, do_constant_folding=True, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    xg = x.clone().requires_grad_(True)
    y = model(xg)
    sel = y[torch.arange(x.shape[0]), torch.as_tensor(target)]
    (g,) = torch.autograd.grad(sel.sum(), xg)
    np.save(os.path.join(OUT, name + ".x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(OUT, name + ".y.npy"), y.detach().numpy().astype(np.float32))
    np.save(os.path.join(OUT, name + ".g.npy"), g.numpy().astype(np.float32))
    np.save(os.path.join(OUT, name + ".t.npy"), np.asarray(target, np.int64))
    print("wrote", path)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(1)
    m = GeluLnMlp()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
        m.norm.bias.uniform_(-0.2, 0.2)
    x = torch.randn(2, 8)
    export("gelu_ln_mlp_op14", m, x, [1, 3], 14)
    export("gelu_ln_mlp_op17", m, x, [1, 3], 17)
    torch.manual_seed(2)
    mb = MobileBlock()
    with torch.no_grad():  # a BatchNorm with statistics, folded into the Conv by the export
        mb.bn.running_mean.uniform_(-0.3, 0.3)
        mb.bn.running_var.uniform_(0.5, 2.0)
        mb.bn.weight.uniform_(0.5, 1.5)
    export("mobile_block_op14", mb, torch.randn(2, 3, 6, 6), [0, 4], 14)
    torch.manual_seed(3)
    export("act_mlp_op14", ActMlp(), torch.randn(2, 6), [2, 0], 14)
    torch.manual_seed(4)
    export("nested_op14", Nested(), torch.randn(2, 4), [1, 2], 14)
    torch.manual_seed(5)
    export("shape_ops_op14", ShapeOps(), torch.randn(2, 2, 5, 5), [0, 2], 14)
    torch.manual_seed(6)
    export("token_cat_op14", TokenCat(), torch.randn(2, 3, 4), [1, 0], 14)
    torch.manual_seed(7)
    export("lstm_op14", Recurrent(nn.LSTM), torch.randn(2, 7, 5), [2, 1], 14)
    torch.manual_seed(8)
    export("gru_op14", Recurrent(nn.GRU), torch.randn(2, 7, 5), [0, 2], 14)
    torch.manual_seed(9)
    export("shift_window_op14", ShiftWindow(), torch.randn(2, 2, 6, 6), [1, 2], 14)
    torch.manual_seed(10)
    export("upsampler_op14", Upsampler(), torch.randn(2, 3, 4, 4), [2, 0], 14)
    torch.manual_seed(11)
    export("interp_op14", Interp(), torch.randn(2, 3, 4, 4), [0, 1], 14)
    torch.manual_seed(12)
    export("misc_op14", Misc(), torch.randn(2, 3, 5), [2, 1], 14)
    torch.manual_seed(13)
    export("scripted_if_op14", torch.jit.script(ScriptedIf()), torch.randn(2, 5), [1, 2], 14)


if __name__ == "__main__":
    main()
