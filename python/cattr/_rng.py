"""Opt-in torch-compatible random draws: the numbers Captum 0.8 draws, so that cattr's stochastic methods give
Captum's results for the same seed.

cattr's stochastic methods (NoiseTunnel, GradientShap and its Layer/Neuron forms, ShapleyValueSampling,
FeaturePermutation, LayerFeaturePermutation, Lime, LimeBase, KernelShap) draw from cattr's own Philox generator by
default ("cattr" mode). In "torch" mode, `captum_draws()` produces the draws Captum would consume for the same call,
in Captum's consumption order and with the roles of shared/golden/README.md section 7, from the same global
generators Captum uses:

  * torch's default CPU generator (torch.normal, torch.randperm, torch.bernoulli, torch.multinomial via
    torch.distributions.Categorical, torch.randn, Tensor.random_ of a DataLoader, the uniform_ initialisation of a
    torch.nn.Linear), and
  * numpy's global generator (np.random.choice for baseline rows, np.random.uniform for GradientShap's
    coefficients), which Captum uses there.

    import torch, numpy as np
    from cattr import _rng
    _rng.set_rng("torch")
    torch.manual_seed(0); np.random.seed(0)
    draws = _rng.captum_draws("GradientShap", (x,), (baselines,), {"n_samples": 5, "stdevs": 0.1})
    # the same numbers as captum.attr.GradientShap(model).attribute(x, baselines, n_samples=5, stdevs=0.1)
    # after torch.manual_seed(0); np.random.seed(0); both generators are left where Captum leaves them

Where torch is not importable, torch's generator is replaced by `TorchCPUGenerator`, a bit-exact numpy
reimplementation of torch 1.13's CPU generator and of the CPU kernels above (mt19937 seeded as torch.manual_seed,
the AVX2 kernel of randn/normal for 16 and more float32 values and the scalar Box-Muller below that, rand, uniform_,
randint, randperm, bernoulli, exponential_, multinomial with replacement, random_). `set_rng("torch", seed=N)`
seeds it (and torch's generator where torch is used, and numpy's global generator).
"""
import math
import threading
from fractions import Fraction

import numpy as np

__all__ = ["set_rng", "get_rng", "get_backend", "torch_generator", "captum_draws", "draws_for_call", "is_stochastic",
           "method_name", "TorchCPUGenerator", "STOCHASTIC_METHODS"]

MODES = ("cattr", "torch")
BACKENDS = ("auto", "torch", "numpy")

_lock = threading.RLock()
_mode = "cattr"
_backend = "auto"
_gen = None  # the numpy TorchCPUGenerator, made on first use

_F32, _F64 = np.float32, np.float64
_U32 = np.uint64(0xFFFFFFFF)
_MASK24 = np.uint64((1 << 24) - 1)
_MASK53 = np.uint64((1 << 53) - 1)
_TORCH_DEFAULT_SEED = 67280421310721  # at::default_rng_seed_val


# =================================================================================================================
# mode
# =================================================================================================================

def _torch():
    """torch, or None where it cannot be imported."""
    try:
        import torch
    except Exception:  # pragma: no cover - depends on the machine
        return None
    return torch


def set_rng(mode, seed=None, backend="auto"):
    """Chooses where cattr's stochastic methods get their random numbers.

    mode "cattr" (the default): cattr's own counter-based Philox generator (keyed by the `_seed=` of each call).
    mode "torch": the draws Captum 0.8 would make (captum_draws), from torch's global CPU generator and numpy's
    global generator, so that `torch.manual_seed(s); np.random.seed(s)` before a cattr call gives Captum's numbers.

    seed: where given, seeds the generators now: torch.manual_seed(seed) (or the numpy reimplementation of torch's
    generator) and np.random.seed(seed % 2**32), as Captum's tests seed both before an attribution.
    backend: "auto" (torch where importable, else the numpy reimplementation), "torch" or "numpy".
    """
    global _mode, _backend
    if mode not in MODES:
        raise ValueError("cattr: set_rng: mode '%s' is not one of %s" % (mode, ", ".join(MODES)))
    if backend not in BACKENDS:
        raise ValueError("cattr: set_rng: backend '%s' is not one of %s" % (backend, ", ".join(BACKENDS)))
    if backend == "torch" and _torch() is None:
        raise ImportError("cattr: set_rng: backend 'torch' needs torch, which is not importable")
    with _lock:
        _mode, _backend = mode, backend
        if seed is not None:
            seed = int(seed)
            if get_backend() == "torch":
                _torch().manual_seed(seed)
            else:
                torch_generator().manual_seed(seed)
            np.random.seed(seed % (1 << 32))


def get_rng():
    """The current mode: "cattr" or "torch"."""
    return _mode


def get_backend():
    """Which generator "torch" mode draws from: "torch" (torch's global CPU generator) or "numpy" (the
    reimplementation, torch_generator())."""
    if _backend == "auto":
        return "torch" if _torch() is not None else "numpy"
    return _backend


def torch_generator():
    """The numpy reimplementation of torch's default CPU generator that "torch" mode uses without torch."""
    global _gen
    with _lock:
        if _gen is None:
            _gen = TorchCPUGenerator()
        return _gen


# =================================================================================================================
# exact floating-point helpers
# =================================================================================================================

def _fma32(a, b, c):
    """float32 fused multiply-add a*b+c with one rounding (what GCC's contraction of torch's float32 kernels
    computes), elementwise on float32 arrays, exact."""
    a, b, c = np.asarray(a, _F32), np.asarray(b, _F32), np.asarray(c, _F32)
    p = a.astype(_F64) * b.astype(_F64)  # exact: 24 + 24 bits
    c64 = c.astype(_F64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)  # TwoSum: p + c == s + err exactly
    r = s.astype(_F32)
    r64 = r.astype(_F64)
    # rounding s instead of p + c differs only when s lies exactly half-way between two float32 numbers
    maybe = (s != r64) & (err != 0) & np.isfinite(s)
    if np.any(maybe):
        other = np.nextafter(r, np.where(s > r64, np.inf, -np.inf).astype(_F32))
        tie = maybe & (s == (r64 + other.astype(_F64)) * 0.5)
        if np.any(tie):
            r = np.where(tie, np.where(err > 0, np.maximum(r, other), np.minimum(r, other)), r)
    return r


def _fma64(a, b, c):
    """float64 fused multiply-add of Python floats, exact (rational arithmetic, correctly rounded)."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    v = Fraction(a) * Fraction(b) + Fraction(c)
    return float(v) if v != 0 else (a * b + c)


# =================================================================================================================
# torch's AVX2 normal kernel (ATen/native/cpu/avx_mathfun.h, normal_fill_16_AVX2), float32, FMA-contracted as built
# =================================================================================================================

_SQRTHF = _F32(0.707106781186547524)
_LOG_P = [_F32(v) for v in (7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
                            1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
                            3.3333331174E-1)]
_LOG_Q1, _LOG_Q2 = _F32(-2.12194440e-4), _F32(0.693359375)
_DP1, _DP2, _DP3 = _F32(-0.78515625), _F32(-2.4187564849853515625e-4), _F32(-3.77489497744594108e-8)
_SIN_P = [_F32(-1.9515295891E-4), _F32(8.3321608736E-3), _F32(-1.6666654611E-1)]
_COS_P = [_F32(2.443315711809948E-005), _F32(-1.388731625493765E-003), _F32(4.166664568298827E-002)]
_FOPI = _F32(1.27323954473516)
_ONE, _HALF, _ZERO = _F32(1.0), _F32(0.5), _F32(0.0)
_TWO_PI_F = _F32(2.0 * math.pi)
_MIN_NORM = np.array(0x00800000, np.uint32).view(_F32)


def _log256(x):
    """log256_ps: Cephes' logf polynomial on 8 lanes."""
    invalid = x <= 0
    x = np.maximum(x, _MIN_NORM)
    bits = x.view(np.uint32)
    e = ((bits >> np.uint32(23)).astype(np.int32) - 127).astype(_F32) + _ONE
    x = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(_F32)  # mantissa in [0.5, 1)
    small = x < _SQRTHF
    tmp = np.where(small, x, _ZERO)
    x = x - _ONE
    e = e - np.where(small, _ONE, _ZERO)
    x = x + tmp
    z = x * x
    y = np.full_like(x, _LOG_P[0])
    for p in _LOG_P[1:]:
        y = _fma32(y, x, p)
    y = y * x
    y = _fma32(y, z, e * _LOG_Q1)
    y = y - z * _HALF
    x = _fma32(e, _LOG_Q2, x + y)
    return np.where(invalid, _F32(np.nan), x)


def _sincos256(x):
    """sincos256_ps: Cephes' sinf/cosf on 8 lanes; returns (sin, cos)."""
    sign_sin = x.view(np.uint32) & np.uint32(0x80000000)
    x = np.abs(x)
    j = (x * _FOPI).astype(np.int32)  # truncation
    j = (j + 1) & ~1
    y = j.astype(_F32)
    swap_sin = ((j & 4) << 29).astype(np.uint32)
    poly = (j & 2) == 0
    x = _fma32(y, _DP1, x)
    x = _fma32(y, _DP2, x)
    x = _fma32(y, _DP3, x)
    sign_cos = ((~(j - 2) & 4) << 29).astype(np.uint32)
    sign_sin = sign_sin ^ swap_sin
    z = x * x
    yc = _fma32(np.full_like(z, _COS_P[0]), z, _COS_P[1])
    yc = _fma32(yc, z, _COS_P[2])
    yc = yc * z
    yc = _fma32(yc, z, -(z * _HALF))
    yc = yc + _ONE
    ys = _fma32(np.full_like(z, _SIN_P[0]), z, _SIN_P[1])
    ys = _fma32(ys, z, _SIN_P[2])
    ys = ys * z
    ys = _fma32(ys, x, x)
    s1 = np.where(poly, _ZERO, yc)
    s2 = np.where(poly, ys, _ZERO)
    s = s1 + s2
    c = (yc - s1) + (ys - s2)
    return (s.view(np.uint32) ^ sign_sin).view(_F32), (c.view(np.uint32) ^ sign_cos).view(_F32)


def _normal_fill_16(u, mean, std):
    """normal_fill_16_AVX2 on rows of 16 uniforms [k, 16] (Box-Muller over the pairs (j, j+8))."""
    radius = np.sqrt(_F32(-2.0) * _log256(_ONE - u[:, :8]))
    s, c = _sincos256(_TWO_PI_F * u[:, 8:])
    out = np.empty_like(u)
    out[:, :8] = radius * c
    out[:, 8:] = radius * s
    if mean != 0.0 or std != 1.0:
        out = _fma32(out, _F32(std), _F32(mean))
    return out


# =================================================================================================================
# torch's float32 sum (ATen/native/cpu/SumKernel.cpp cascade_sum, AVX2 vectors of 8), for Categorical's normalisation
# =================================================================================================================

def _multi_row_sum(rows):
    size = rows.shape[0]
    lp = max(4, (int(size - 1).bit_length() if size > 1 else 0) // 4)
    step, mask = 1 << lp, (1 << lp) - 1
    acc = [np.zeros(rows.shape[1:], _F32) for _ in range(4)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            acc[0] = acc[0] + rows[i]
            i += 1
        for j in range(1, 4):
            acc[j] = acc[j] + acc[j - 1]
            acc[j - 1] = np.zeros(rows.shape[1:], _F32)
            if i & (mask << (j * lp)):
                break
    while i < size:
        acc[0] = acc[0] + rows[i]
        i += 1
    for j in range(1, 4):
        acc[0] = acc[0] + acc[j]
    return acc[0]


def _row_sum(items):
    size = items.shape[0]
    ilp = size // 4
    part = _multi_row_sum(items[:ilp * 4].reshape((ilp, 4) + items.shape[1:]))
    part = [part[k] for k in range(4)]
    for i in range(ilp * 4, size):
        part[0] = part[0] + items[i]
    for k in range(1, 4):
        part[0] = part[0] + part[k]
    return part[0]


def _torch_sum_f32(x):
    """torch.sum of a contiguous float32 vector on the CPU, bit for bit."""
    x = np.ascontiguousarray(x, _F32).reshape(-1)
    n = x.size
    if n >= 8:
        nv = n // 8
        lanes = _row_sum(x[:nv * 8].reshape(nv, 8))
        acc = _F32(0)
        for k in range(nv * 8, n):
            acc = _F32(acc + x[k])
        for k in range(8):
            acc = _F32(acc + lanes[k])
        return _F32(_F32(0) + acc)
    return _F32(_F32(0) + _F32(_row_sum(x)))


# =================================================================================================================
# torch's CPU generator in numpy
# =================================================================================================================

def _mt_key(seed):
    key = np.empty(624, np.uint32)
    s = seed & 0xFFFFFFFF
    key[0] = s
    for j in range(1, 624):
        s = (1812433253 * (s ^ (s >> 30)) + j) & 0xFFFFFFFF
        key[j] = s
    return key


def _numel(size):
    n = 1
    for d in size:
        n *= int(d)
    return n


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(d) for d in size)


class TorchCPUGenerator:
    """A bit-exact numpy reimplementation of torch 1.13's default CPU generator (at::CPUGeneratorImpl: mt19937
    seeded as torch.manual_seed, 32-bit draws, 64-bit draws as (first << 32) | second, the cached second
    Box-Muller value) and of the CPU kernels that draw from it, as built for CPUs with AVX2 (torch's reported
    "CPU capability usage: AVX2"). Methods return numpy arrays; sizes are given as torch's (`randn(2, 3)` or
    `randn((2, 3))`)."""

    def __init__(self, seed=_TORCH_DEFAULT_SEED):
        self._bg = np.random.MT19937(0)
        self.manual_seed(seed)

    # -- state ------------------------------------------------------------------------------------------------
    def manual_seed(self, seed):
        """torch.manual_seed(seed): mt19937 initialised from the low 32 bits; the cached normal value dropped."""
        seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        self._seed = seed
        self._bg.state = {"bit_generator": "MT19937", "state": {"key": _mt_key(seed), "pos": 624}}
        self._next_double_normal = None
        return self

    def initial_seed(self):
        return self._seed

    def get_state(self):
        st = self._bg.state["state"]
        return {"seed": self._seed, "key": st["key"].copy(), "pos": int(st["pos"]),
                "next_double_normal": self._next_double_normal}

    def set_state(self, state):
        self._seed = state["seed"]
        self._bg.state = {"bit_generator": "MT19937", "state": {"key": np.asarray(state["key"], np.uint32),
                                                               "pos": int(state["pos"])}}
        self._next_double_normal = state["next_double_normal"]

    # -- raw draws --------------------------------------------------------------------------------------------
    def random32(self, n):
        """n 32-bit draws (CPUGeneratorImpl::random), as uint64."""
        if n <= 0:
            return np.zeros(0, np.uint64)
        return self._bg.random_raw(int(n)).astype(np.uint64) & _U32

    def random64(self, n):
        """n 64-bit draws (CPUGeneratorImpl::random64: two 32-bit draws, the first in the high half)."""
        r = self.random32(2 * n).reshape(-1, 2)
        return (r[:, 0] << np.uint64(32)) | r[:, 1]

    def _u24(self, n):  # uniform_real_distribution<float>(0, 1)
        return ((self.random32(n) & _MASK24).astype(_F64) * 2.0 ** -24).astype(_F32)

    def _u53(self, n):  # uniform_real_distribution<double>(0, 1)
        return (self.random64(n) & _MASK53).astype(_F64) * 2.0 ** -53

    def _normal_double(self, mean, std):
        """at::normal_distribution<double>: Box-Muller on two 53-bit uniforms, the sine kept for the next call."""
        if self._next_double_normal is not None:
            ret, self._next_double_normal = self._next_double_normal, None
        else:
            u1, u2 = self._u53(2)
            r = math.sqrt(-2.0 * math.log(1.0 - u2))
            theta = 2.0 * math.pi * u1
            self._next_double_normal = r * math.sin(theta)
            ret = r * math.cos(theta)
        if mean == 0.0 and std == 1.0:
            return ret
        return _fma64(ret, std, mean)

    # -- distributions ----------------------------------------------------------------------------------------
    def normal_(self, size, mean=0.0, std=1.0, dtype=np.float32):
        """Tensor.normal_(mean, std) of a new contiguous tensor of `size` (torch.randn for mean 0, std 1)."""
        size, dt = tuple(size), np.dtype(dtype)
        n = _numel(size)
        mean, std = float(mean), float(std)
        if dt == _F32 and n >= 16:  # normal_fill_AVX2
            out = self._u24(n)
            k = n // 16
            if k:
                out[:k * 16] = _normal_fill_16(out[:k * 16].reshape(k, 16), mean, std).reshape(-1)
            if n % 16:  # the last 16 values are drawn again and recomputed
                out[n - 16:] = _normal_fill_16(self._u24(16).reshape(1, 16), mean, std).reshape(-1)
            return out.reshape(size)
        if dt == _F64 and n >= 16:  # normal_fill<double>: libm on the host, as torch
            u = self._u53(n)
            out = u.copy()

            def fill(src, dst, at):
                for j in range(8):
                    radius = math.sqrt(-2.0 * math.log(1.0 - src[j]))
                    theta = 2.0 * math.pi * src[j + 8]
                    a, b = radius * math.cos(theta), radius * math.sin(theta)
                    if mean != 0.0 or std != 1.0:
                        a, b = _fma64(a, std, mean), _fma64(b, std, mean)
                    dst[at + j], dst[at + j + 8] = a, b

            for i in range(0, n - 15, 16):
                fill(u[i:i + 16], out, i)
            if n % 16:
                fill(self._u53(16), out, n - 16)
            return out.reshape(size)
        vals = [self._normal_double(mean, std) for _ in range(n)]
        return np.array(vals, _F64).astype(dt).reshape(size)

    def randn(self, *size, dtype=np.float32):
        return self.normal_(_size(size), 0.0, 1.0, dtype)

    def normal(self, mean, std):
        """torch.normal(mean: float, std: Tensor): normal_(0, 1) of std's shape, times std, plus mean."""
        std = np.asarray(std)
        out = self.normal_(std.shape, 0.0, 1.0, std.dtype)
        return (out * std + std.dtype.type(mean)).astype(std.dtype)

    def uniform_(self, size, low=0.0, high=1.0, dtype=np.float32):
        """Tensor.uniform_(low, high): x * (high - low) + low per element, fused as torch's AVX2 build."""
        size, dt = tuple(size), np.dtype(dtype)
        n = _numel(size)
        if dt == _F32:
            lo, hi = _F32(low), _F32(high)
            u = self._u24(n)
            if lo == 0 and hi == 1:
                return u.reshape(size)
            return _fma32(u, _F32(hi - lo), lo).reshape(size)
        if dt == _F64:
            u = self._u53(n)
            lo, hi = float(low), float(high)
            if lo == 0.0 and hi == 1.0:
                return u.reshape(size)
            return np.array([_fma64(float(x), hi - lo, lo) for x in u], _F64).reshape(size)
        raise TypeError("uniform_: dtype %s is not float32 or float64" % dt)

    def rand(self, *size, dtype=np.float32):
        return self.uniform_(_size(size), 0.0, 1.0, dtype)

    def randint(self, low, high=None, size=(), dtype=np.int64):
        """torch.randint(low, high, size): (draw % range) + low, 64-bit draws where the range is 2^32 or more."""
        if high is None:
            low, high = 0, low
        rng = int(high) - int(low)
        if rng <= 0:
            raise ValueError("randint: empty range [%d, %d)" % (low, high))
        n = _numel(size)
        raw = self.random64(n) if rng >= (1 << 32) else self.random32(n)
        vals = [(int(v) % rng) + int(low) for v in raw]
        return np.array(vals, np.int64).astype(dtype).reshape(tuple(size))

    def random_(self, size=(), dtype=np.int64):
        """Tensor.random_() of an int64 tensor (the seed a DataLoader iterator draws): draw64 % 2^63."""
        n = _numel(size)
        vals = [int(v) % (1 << 63) for v in self.random64(n)]
        return np.array(vals, np.int64).astype(dtype).reshape(tuple(size))

    def randperm(self, n):
        """torch.randperm(n) (int64): Fisher-Yates with swaps (i, i + draw32 % (n - i))."""
        n = int(n)
        r = list(range(n))
        raw = self.random32(n - 1) if n > 1 else []
        for i, v in enumerate(raw):
            z = i + int(v) % (n - i)
            r[i], r[z] = r[z], r[i]
        return np.array(r, np.int64)

    def bernoulli(self, p):
        """torch.bernoulli(p) for a float tensor p: 1 where a uniform draw (24 bits for float32, 53 for float64)
        is below p; the result has p's dtype."""
        p = np.ascontiguousarray(p)
        n = p.size
        u = self._u53(n) if p.dtype == _F64 else self._u24(n)
        return (u.reshape(p.shape) < p).astype(p.dtype)

    def exponential_(self, size, lambd=1.0, dtype=np.float32):
        """Tensor.exponential_(lambd): -1/lambd * log(1 - u) in double per element (u: 53 bits), cast."""
        n = _numel(size)
        u = self._u53(n)
        c = -1.0 / float(lambd)
        return np.array([c * math.log(1.0 - float(x)) for x in u], _F64).astype(dtype).reshape(tuple(size))

    def multinomial(self, probs, num_samples=1, replacement=True):
        """torch.multinomial(probs, num_samples, replacement=True) for [k] or [rows, k] float probabilities:
        per row the cumulative sums in probs' dtype divided by their total (the last set to 1), then per sample a
        53-bit uniform located by binary search (the first bucket not below it)."""
        if not replacement:
            raise NotImplementedError("multinomial: only sampling with replacement is reimplemented")
        p = np.ascontiguousarray(probs)
        rows = p.reshape(-1, p.shape[-1]) if p.ndim > 1 else p.reshape(1, -1)
        out = np.stack([self._sample_cdf(_cdf(r), int(num_samples)) for r in rows])
        return out if p.ndim > 1 else out.reshape(-1)

    def _sample_cdf(self, cdf, n):
        return np.searchsorted(cdf, self._u53(n), side="left").astype(np.int64)


def _cdf(p):
    """multinomial's normalised cumulative distribution of one row (sequential sums and division in p's dtype, the
    last bucket set to 1), as float64."""
    if not (np.all(p >= 0) and np.all(np.isfinite(p))):
        raise ValueError("multinomial: invalid probabilities")
    cum = np.cumsum(p, dtype=p.dtype)  # numpy's accumulate adds in order, in p's dtype
    total = cum[-1]
    if not total > 0:
        raise ValueError("multinomial: the probabilities sum to 0")
    cum = (cum / total).astype(p.dtype).astype(_F64)
    cum[-1] = 1.0
    return cum


# =================================================================================================================
# the calls Captum makes, on either generator
# =================================================================================================================

class _TorchOps:
    """Captum's calls on torch itself."""

    def __init__(self):
        self.torch = _torch()

    def nt_noise(self, shape, stdev):  # NoiseTunnel._add_noise_to_input
        t = self.torch
        return t.normal(0, t.tensor(float(stdev)).repeat(tuple(shape))).numpy()

    def randperm(self, n):
        return self.torch.randperm(int(n)).numpy()

    def lime_sample(self, m):  # lime.default_perturb_func (returns the float draw before .long())
        t = self.torch
        return t.bernoulli(t.ones(1, m) * 0.5).numpy()

    def ks_sampler(self, m):  # KernelShap.attribute: the Categorical of the number of selected features
        t = self.torch
        from torch.distributions import Categorical
        num_features_list = t.arange(m, dtype=t.float)
        denom = num_features_list * (m - num_features_list)
        probs = t.tensor((m - 1)) / denom
        probs[0] = 0.0
        cat = Categorical(probs)
        return lambda: cat.sample().reshape(1, 1).numpy()  # torch.multinomial(probs [1, m], 1, True)

    def randn(self, *size):
        return self.torch.randn(*size).numpy()

    def dataloader_seed(self):  # torch.utils.data DataLoader iterator: _base_seed
        t = self.torch
        return t.empty((), dtype=t.int64).random_().numpy()

    def linear_init(self, m):  # torch.nn.Linear(m, 1) made by the trained LinearModel
        lin = self.torch.nn.Linear(m, 1)
        return lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy()


class _NumpyOps:
    """Captum's calls on the numpy reimplementation of torch's generator."""

    def __init__(self, gen):
        self.g = gen

    def nt_noise(self, shape, stdev):
        return self.g.normal(0.0, np.full(tuple(shape), float(stdev), _F32))

    def randperm(self, n):
        return self.g.randperm(n)

    def lime_sample(self, m):
        return self.g.bernoulli(np.full((1, m), 0.5, _F32))

    def ks_sampler(self, m):
        k = np.arange(m, dtype=_F32)
        denom = k * (_F32(m) - k)
        with np.errstate(divide="ignore", invalid="ignore"):
            probs = (_F32(m - 1) / denom).astype(_F32)
        probs[0] = 0.0
        s = _torch_sum_f32(probs)
        if not (s > 0 and math.isfinite(float(s))):
            raise ValueError("cattr: KernelShap needs at least 2 interpretable features (Captum's Categorical "
                             "fails with %d)" % m)
        cdf = _cdf((probs / s).astype(_F32))
        return lambda: self.g._sample_cdf(cdf, 1).reshape(1, 1)  # Categorical.sample(): multinomial(probs, 1)

    def randn(self, *size):
        return self.g.randn(*size)

    def dataloader_seed(self):
        return self.g.random_(())

    def linear_init(self, m):
        gain = math.sqrt(2.0 / (1 + math.sqrt(5) ** 2))  # init.calculate_gain("leaky_relu", sqrt(5))
        std = gain / math.sqrt(m)
        bound = math.sqrt(3.0) * std
        w = self.g.uniform_((1, m), -bound, bound)
        b_bound = 1 / math.sqrt(m) if m > 0 else 0
        b = self.g.uniform_((1,), -b_bound, b_bound)
        return w, b


def _ops():
    return _TorchOps() if get_backend() == "torch" else _NumpyOps(torch_generator())


# =================================================================================================================
# arguments
# =================================================================================================================

STOCHASTIC_METHODS = ("NoiseTunnel", "GradientShap", "LayerGradientShap", "NeuronGradientShap",
                      "ShapleyValueSampling", "FeaturePermutation", "LayerFeaturePermutation", "Lime", "LimeBase",
                      "KernelShap")

_LIME_SAMPLES = {"Lime": 25, "LimeBase": 50, "KernelShap": 25}  # Captum 0.8's n_samples defaults


def is_stochastic(method):
    """Does a call of this method (Captum class name, or "NoiseTunnel+Inner") consume random draws?"""
    outer, inner = _split(method)
    return outer in STOCHASTIC_METHODS or (inner is not None and is_stochastic(inner))


def method_name(obj):
    """The captum_draws method name of an attribution object (cattr.attr or captum.attr): its class's Captum name
    (the first Captum class in its MRO), "NoiseTunnel+<inner>" for a NoiseTunnel."""
    inner = getattr(obj, "attribution_method", None)
    if inner is not None and any(c.__name__ == "NoiseTunnel" for c in type(obj).__mro__):
        return "NoiseTunnel+" + method_name(inner)
    for c in type(obj).__mro__:
        if c.__name__ in STOCHASTIC_METHODS:
            return c.__name__
    return getattr(obj, "_captum_name", None) or type(obj).__name__


def _split(method):
    if not isinstance(method, str):
        raise TypeError("cattr: captum_draws: method must be a Captum class name (str)")
    if "+" in method:
        outer, inner = method.split("+", 1)
        if outer != "NoiseTunnel":
            raise ValueError("cattr: captum_draws: '%s': only NoiseTunnel+<method> wraps a method" % method)
        return outer, inner
    return method, None


def _shape(x, what):
    s = getattr(x, "shape", None)
    if s is None:
        s = np.shape(x)
    s = tuple(int(d) for d in s)
    if not s:
        raise ValueError("cattr: captum_draws: %s: a 0-d tensor has no batch dimension" % what)
    return s


def _get(params, key, default):
    v = params.get(key)
    return default if v is None else v


def _as_tuple(v):
    if isinstance(v, (tuple, list)):
        return tuple(v)
    return (v,)


def _baseline_rows(baselines, shapes):
    """Per input: the rows of a tensor baseline (Captum draws rows only from tensors), or None."""
    n = len(shapes)
    if baselines is None:
        return [None] * n
    bs = _as_tuple(baselines)
    if len(bs) == 1 and n > 1 and np.ndim(bs[0]) == 0:
        bs = bs * n
    if len(bs) != n:
        raise ValueError("cattr: captum_draws: %d baselines for %d inputs" % (len(bs), n))
    rows = []
    for b, s in zip(bs, shapes):
        if b is None or isinstance(b, (int, float, np.number)) or np.ndim(b) == 0:
            rows.append(None)
        else:
            bsh = _shape(b, "baselines")
            rows.append(bsh[0] if len(bsh) == len(s) else None)
    return rows


def _masks(mask, what, shapes=None, shift=False):
    """The feature ids of each tensor from a mask argument (None: no mask). A None entry among given masks (a
    cattr extension: Captum takes a mask for every tensor or none) numbers its tensor's elements consecutively after
    the largest given id, as cattr's engine does; `shift`: the given ids are first shifted to start at 0 (Lime)."""
    if mask is None:
        return None
    ms = list(_as_tuple(mask))
    if shapes is not None and len(ms) != len(shapes):
        raise ValueError("cattr: captum_draws: %d %s tensors for %d tensors" % (len(ms), what, len(shapes)))
    for i, m in enumerate(ms):
        if m is not None:
            if hasattr(m, "detach"):
                m = m.detach().cpu().numpy()
            ms[i] = np.asarray(m).astype(np.int64)
    given = [m for m in ms if m is not None and m.size]
    if shift and given:
        lo = min(int(m.min()) for m in given)
        ms = [None if m is None else m - lo for m in ms]
        given = [m for m in ms if m is not None and m.size]
    nxt = max(int(m.max()) for m in given) + 1 if given else 0
    for i, m in enumerate(ms):
        if m is None:
            if shapes is None:
                raise ValueError("cattr: captum_draws: %s %d is None" % (what, i))
            per = _numel(shapes[i][1:])
            ms[i] = np.arange(nxt, nxt + per, dtype=np.int64)
            nxt += per
    return ms


def _default_ids(shapes):
    """Captum's default feature mask: the elements of tensor 0 numbered 0..n0-1, of tensor 1 n0.., ..."""
    out, start = [], 0
    for s in shapes:
        k = _numel(s[1:])
        out.append(np.arange(start, start + k, dtype=np.int64))
        start += k
    return out


# =================================================================================================================
# the draws of each method
# =================================================================================================================

def _noise_tunnel(ops, inner, shapes, brows, p, out):
    """NoiseTunnel.attribute: baseline rows (draw_baseline_from_distrib) for the full partitions, then per
    partition the noise of every input and the inner method's draws; the remainder redraws the baseline rows after
    its noise."""
    n_samples = int(_get(p, "nt_samples", 5))
    bs = _get(p, "nt_samples_batch_size", None)
    bs = n_samples if bs is None else min(n_samples, int(bs))
    if n_samples < 1 or bs < 1:
        raise ValueError("cattr: captum_draws: nt_samples and nt_samples_batch_size must be at least 1")
    stdevs = _get(p, "stdevs", 1.0)
    stdevs = tuple(stdevs) if isinstance(stdevs, (tuple, list)) else (stdevs,) * len(shapes)
    if len(stdevs) != len(shapes):
        raise ValueError("cattr: captum_draws: %d stdevs for %d inputs" % (len(stdevs), len(shapes)))
    distrib = bool(_get(p, "draw_baseline_from_distrib", False))
    B = shapes[0][0]
    inner_p = {k: v for k, v in p.items() if k not in ("nt_samples", "nt_samples_batch_size", "stdevs",
                                                       "draw_baseline_from_distrib", "nt_type")}
    inner_p.update(p.get("inner_params") or {})

    def expand(m):  # _expand_and_update_baselines: the inner method's baseline rows (and the draws when distrib)
        rows = []
        for i, r in enumerate(brows):
            if r is None:
                rows.append(None)
            elif distrib:
                out.append(("nt_baseline_index.input%d" % i, np.asarray(np.random.choice(r, m * B), np.int64)))
                rows.append(m * B)
            else:
                rows.append(r * m if (r == B and r > 1) else r)
        return rows

    def partition(m, rows):
        xs = [(B * m,) + s[1:] for s in shapes]
        for i, s in enumerate(xs):
            out.append(("nt_noise.input%d" % i, np.asarray(ops.nt_noise(s, stdevs[i]))))
        if inner is not None:
            _draws(ops, inner, xs, rows, inner_p, out)

    rows = expand(bs)
    for _ in range(n_samples // bs):
        partition(bs, rows)
    rem = n_samples - (n_samples // bs) * bs
    if rem > 0:
        xs = [(B * rem,) + s[1:] for s in shapes]
        for i, s in enumerate(xs):
            out.append(("nt_noise.input%d" % i, np.asarray(ops.nt_noise(s, stdevs[i]))))
        rows = expand(rem)
        if inner is not None:
            _draws(ops, inner, xs, rows, inner_p, out)


def _gradient_shap(ops, shapes, brows, p, out):
    """GradientShap (and its Layer/Neuron forms): NoiseTunnel(smoothgrad, n_samples, draw_baseline_from_distrib)
    around InputBaselineXGradient, which draws np.random.uniform(0, 1, B * n_samples)."""
    # Captum asserts that the baselines of input 0 are a tensor; inputs with scalar baselines get no row draws
    n = int(_get(p, "n_samples", 5))
    nt = {"nt_samples": n, "nt_samples_batch_size": None, "stdevs": _get(p, "stdevs", 0.0),
          "draw_baseline_from_distrib": True}
    _noise_tunnel(ops, None, shapes, brows, nt, out)
    out.append(("gradshap_coeff", np.asarray(np.random.uniform(0.0, 1.0, shapes[0][0] * n), np.float64)))


def _shapley_value_sampling(ops, shapes, p, out):
    masks = _masks(p.get("feature_mask"), "feature_mask", shapes)
    ids = masks if masks is not None else _default_ids(shapes)
    nonempty = [m for m in ids if m.size]
    if not nonempty:
        raise ValueError("cattr: captum_draws: ShapleyValueSampling: no feature")
    F = int(max(int(m.max()) for m in nonempty)) + 1
    for _ in range(int(_get(p, "n_samples", 25))):
        out.append(("svs_permutation", np.asarray(ops.randperm(F), np.int64)))


def _feature_permutation(ops, shapes, masks, p, out):
    """FeatureAblation's loop with FeaturePermutation's perm_func: features in order of first appearance (each
    mask's unique ids ascending), in chunks of perturbations_per_eval; per chunk, for every tensor holding one of
    its features (tensor order), one torch.randperm(batch) per feature of the chunk, redrawn while the identity."""
    ids = masks if masks is not None else _default_ids(shapes)
    order, holders = [], {}
    for i, m in enumerate(ids):
        for f in np.unique(m).tolist():
            if f not in holders:
                holders[f] = []
                order.append(f)
            holders[f].append(i)
    ppe = int(_get(p, "perturbations_per_eval", 1))
    if ppe < 1:
        raise ValueError("cattr: captum_draws: perturbations_per_eval must be at least 1")
    for q0 in range(0, len(order), ppe):
        chunk = order[q0:q0 + ppe]
        tensors = sorted({i for f in chunk for i in holders[f]})
        if any(shapes[i][0] < 2 for i in tensors):  # FeaturePermutation skips groups of batches below 2
            continue
        if all(_numel(shapes[i]) == 0 for i in tensors):
            continue
        for i in tensors:
            n = shapes[i][0]
            ident = np.arange(n)
            for _ in chunk:
                while True:
                    perm = np.asarray(ops.randperm(n), np.int64)
                    out.append(("fp_batch_permutation", perm))
                    if not np.array_equal(perm, ident):
                        break


def _interp_features(method, shapes, p):
    """Captum's num_interp_features: LimeBase takes it as an argument; Lime and KernelShap count the feature ids
    (shifted to start at 0) or, without a mask, the elements of one example of every input."""
    nif = p.get("num_interp_features")
    if method == "LimeBase" and nif is not None:
        return int(nif)
    masks = _masks(p.get("feature_mask"), "feature_mask", shapes, shift=True)
    if masks is None:
        return sum(_numel(s[1:]) for s in shapes)
    nonempty = [x for x in masks if x.size]
    if not nonempty:
        raise ValueError("cattr: captum_draws: %s: the feature masks are empty" % method)
    return max(int(x.max()) for x in nonempty) + 1


def _lime(ops, method, shapes, p, out):
    """Lime/LimeBase/KernelShap: per interpretable-model fit, the samples' draws, then the fit's DataLoader seed
    and the torch Linear's initial weight and bias (both unused). Lime and KernelShap fit one model per example
    when the batch has several examples and the model one output per example."""
    m = _interp_features(method, shapes, p)
    n_samples = int(_get(p, "n_samples", _LIME_SAMPLES[method]))
    B = shapes[0][0]
    fits = 1
    if method != "LimeBase" and B > 1:
        numel = p.get("output_numel")
        if numel is None or int(numel) == B:
            fits = B
        elif int(numel) != 1:
            raise ValueError("cattr: captum_draws: %s: the model gives %d values for %d examples (Captum needs one "
                             "per example or one per batch)" % (method, int(numel), B))
    sampler = ops.ks_sampler(m) if method == "KernelShap" else None
    for _ in range(fits):
        for s in range(n_samples):
            if method == "KernelShap":
                if s < 2:  # the all-ones and all-zeros samples
                    continue
                out.append(("ks_num_selected", np.asarray(sampler(), np.int64).reshape(1, 1)))
                out.append(("ks_scores", np.asarray(ops.randn(1, m))))
            else:
                out.append(("lime_sample", np.asarray(ops.lime_sample(m))))
        # a 0-d draw, stored with shape [1] as in the golden files
        out.append(("dataloader_base_seed", np.asarray(ops.dataloader_seed(), np.int64).reshape(1)))
        if method != "KernelShap":
            # scikit-learn's Lasso (Captum's SkLearnLasso) seeds its coordinate descent with one
            # np.random.randint(0, RAND_R_MAX) from numpy's global generator even for cyclic selection; it
            # influences nothing and is not a draw of the golden files, but leaves numpy's generator as Captum does
            np.random.randint(0, 0x7FFFFFFF)
        w, b = ops.linear_init(m)
        out.append(("linear_model_init_unused", np.asarray(w)))
        out.append(("linear_model_init_unused", np.asarray(b)))


def _draws(ops, method, shapes, brows, p, out):
    outer, inner = _split(method)
    if outer == "NoiseTunnel":
        if inner is None:
            inner = p.get("attribution_method")
        _noise_tunnel(ops, inner, shapes, brows, p, out)
    elif outer in ("GradientShap", "LayerGradientShap", "NeuronGradientShap"):
        _gradient_shap(ops, shapes, brows, p, out)
    elif outer == "ShapleyValueSampling":
        _shapley_value_sampling(ops, shapes, p, out)
    elif outer == "FeaturePermutation":
        _feature_permutation(ops, shapes, _masks(p.get("feature_mask"), "feature_mask", shapes), p, out)
    elif outer == "LayerFeaturePermutation":
        layer_shapes, lm = p.get("layer_shapes"), p.get("layer_mask")
        need = lm is None or any(m is None for m in _as_tuple(lm))
        if callable(layer_shapes):
            layer_shapes = layer_shapes() if need else None
        if layer_shapes is None:
            if need:
                raise ValueError("cattr: captum_draws: LayerFeaturePermutation without a layer_mask for every layer "
                                 "tensor needs layer_shapes (the shapes of the layer's tensors)")
            layer_shapes = [(shapes[0][0],) + tuple(np.shape(m)[1:]) for m in _as_tuple(lm)]
        layer_shapes = [tuple(int(d) for d in s) for s in layer_shapes]
        _feature_permutation(ops, layer_shapes, _masks(lm, "layer_mask", layer_shapes), p, out)
    elif outer in ("Lime", "LimeBase", "KernelShap"):
        _lime(ops, outer, shapes, p, out)
    # every other method is deterministic


def draws_for_call(obj, inputs, fields, baselines=None, feature_mask=None, layer_mask=None, noise_tunnel=False,
                   layer_shapes=None):
    """For cattr.attr's Attribution._run in "torch" mode: the `_draws` of this call of `obj` (a cattr.attr object),
    or None where the mode is "cattr" or the method draws nothing. `fields`: the call's parameter fields (Captum's
    names; the NoiseTunnel fields merged in when `noise_tunnel`); `layer_shapes`: LayerFeaturePermutation without a
    layer_mask, the layer tensors' shapes or a function returning them."""
    if _mode != "torch":
        return None
    method = method_name(obj)
    if noise_tunnel:
        method = "NoiseTunnel+" + method
    if not is_stochastic(method):
        return None
    params = dict(fields)
    params.update(feature_mask=feature_mask, layer_mask=layer_mask, layer_shapes=layer_shapes)
    return captum_draws(method, inputs, baselines, params)


def captum_draws(method, inputs, baselines=None, params=None, **kwargs):
    """The `_draws` list Captum 0.8 would consume for this call: [(role, numpy array), ...] in consumption order,
    with the roles of shared/golden/README.md section 7, drawn now from torch's global CPU generator (or its numpy
    reimplementation, see get_backend) and numpy's global generator, in Captum's order, with Captum's functions,
    shapes and dtypes, so that both generators are left where Captum leaves them.

    method: Captum class name ("GradientShap", "LayerGradientShap", "NeuronGradientShap", "ShapleyValueSampling",
      "FeaturePermutation", "LayerFeaturePermutation", "Lime", "LimeBase", "KernelShap"), or "NoiseTunnel+<Inner>"
      for a NoiseTunnel around <Inner> (e.g. "NoiseTunnel+IntegratedGradients"). Deterministic methods give [].
    inputs: the attributed input tensor or tuple of tensors (numpy arrays or torch tensors: only shapes are read).
    baselines: None, a scalar, a tensor, or a tuple of them (per input), as given to attribute().
    params / kwargs: attribute()'s keyword arguments as Captum names them (missing or None: Captum's default):
      n_samples, stdevs, feature_mask, perturbations_per_eval, nt_samples, nt_samples_batch_size,
      draw_baseline_from_distrib, num_interp_features, layer_mask; and, beyond Captum's arguments,
      layer_shapes (LayerFeaturePermutation without layer_mask: the shapes of the layer's tensors, or a function
      returning them, called only when needed) and
      output_numel (Lime/KernelShap with a batch: the number of target-selected model outputs; default one per
      example); inner_params (NoiseTunnel: arguments for the inner method only). Other keys are ignored.
    """
    p = dict(params or {})
    p.update(kwargs)
    xs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    if not xs:
        raise ValueError("cattr: captum_draws: no input")
    shapes = [_shape(x, "input %d" % i) for i, x in enumerate(xs)]
    brows = _baseline_rows(baselines, shapes)
    out = []
    if not is_stochastic(method):
        return out
    with _lock:
        _draws(_ops(), method, shapes, brows, p, out)
    return out
