"""Forward functions cattr runs itself (python/cattr/_callback.py: a Model whose forward pass is a Python callable,
the op HostCall): the perturbation methods through functions that cannot be exported to ONNX (a `.item()` number, a
Future set by another thread after a sleep, Python control flow on the values) against Captum on the same functions;
the thread the function runs on; its exceptions, a KeyboardInterrupt and a wrong output as the call's errors; the
refusal of gradients; numpy functions without torch. The comparisons with Captum skip without torch or Captum
(CATTR_CAPTUM_DIR, default ../shared/captum-0.8 next to the repository)."""
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import cattr
from cattr import _lib
from cattr import attr as A
from cattr._callback import callback_model, is_callback_model, raised_exception

try:
    import torch
except ImportError:  # the numpy tests below run without it
    torch = None

# Captum's Lime warns that it fits one model per example of a batch: what these tests ask of it
pytestmark = pytest.mark.filterwarnings("ignore:You are providing multiple inputs")

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (Debian: python3-torch)")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CAPTUM_DIR = os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(_ROOT), "shared", "captum-0.8"))


def _captum():
    if torch is None:
        pytest.skip("torch is not installed (Debian: python3-torch)")
    if os.path.isdir(_CAPTUM_DIR) and _CAPTUM_DIR not in sys.path:
        sys.path.insert(0, _CAPTUM_DIR)
    try:
        import captum.attr as ca
    except Exception as e:  # noqa: BLE001 - any import failure means: no Captum here
        pytest.skip("Captum is not importable (%s); set CATTR_CAPTUM_DIR to a Captum 0.8 checkout" % e)
    return ca


@pytest.fixture
def torch_rng():
    """cattr draws Captum's random numbers (torch's generator) during the test, cattr's own generator after it."""
    A.set_rng("torch")
    yield
    A.set_rng("cattr")


# ---- forward functions that torch.onnx cannot export -------------------------------------------------------------

def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))


def _x():
    torch.manual_seed(1)
    return torch.randn(4, 5)


def f_item(net):
    """A Python number: the sum of the batch's outputs (Captum's aggregation mode)."""
    return lambda x: net(x)[:, 1].sum().item()


def f_future(net, delay=0.005):
    """A torch Future that another thread completes after a sleep."""
    def fn(x):
        fut = torch.futures.Future()
        y = net(x)

        def later():
            time.sleep(delay)
            fut.set_result(y)

        threading.Thread(target=later).start()
        return fut

    return fn


def f_sync(net):
    return lambda x: net(x)


def f_flow(net):
    """Python control flow on the values: each row takes one output or another by the sign of its input's sum."""
    def fn(x):
        y = net(x)
        out = torch.empty(x.shape[0])
        for i in range(x.shape[0]):
            if float(x[i].sum()) > 0:
                out[i] = y[i, 0]
            else:
                out[i] = 2 * y[i, 2] - y[i, 1]
        return out

    return fn


# (class name, attribute arguments)
_METHODS = [
    ("FeatureAblation", {}),
    ("Occlusion", {"sliding_window_shapes": (2,)}),
    ("ShapleyValueSampling", {"n_samples": 3}),
    ("Lime", {"n_samples": 24}),
    ("KernelShap", {"n_samples": 24}),
]


def _both(ca, cls, fn, x, target, kw, captum_fn=None, future=False):
    """cattr through a callback model of fn, and Captum on fn (or captum_fn), from the same seed."""
    m = callback_model(fn, (x,))
    torch.manual_seed(7)
    ours = getattr(A, cls)(m).attribute(x, target=target, **kw)
    torch.manual_seed(7)
    c = getattr(ca, cls)(captum_fn or fn)
    theirs = c.attribute_future(x, target=target, **kw).wait() if future else c.attribute(x, target=target, **kw)
    return ours, theirs


def _close(ours, theirs, what, tol=1e-6):
    assert tuple(ours.shape) == tuple(theirs.shape), "%s: shape %s, Captum %s" % (what, ours.shape, theirs.shape)
    err = float((ours.double() - theirs.double()).abs().max())
    scale = float(theirs.double().abs().max()) + 1e-30
    assert err <= tol * scale, "%s: max difference %g (Captum's largest value %g)" % (what, err, scale)


@needs_torch
@pytest.mark.parametrize("cls,kw", _METHODS, ids=[m[0] for m in _METHODS])
def test_item_number(cls, kw, torch_rng):
    ca = _captum()
    net, x = _net(), _x()
    with torch.no_grad():
        ours, theirs = _both(ca, cls, f_item(net), x, None, kw)
    _close(ours, theirs, "%s of a .item() number" % cls)


@needs_torch
@pytest.mark.parametrize("cls,kw", _METHODS, ids=[m[0] for m in _METHODS])
def test_python_control_flow(cls, kw, torch_rng):
    ca = _captum()
    net, x = _net(), _x()
    with torch.no_grad():
        ours, theirs = _both(ca, cls, f_flow(net), x, None, kw)
    _close(ours, theirs, "%s of a function with Python control flow" % cls)


@needs_torch
@pytest.mark.parametrize("cls,kw", _METHODS, ids=[m[0] for m in _METHODS])
def test_future_from_another_thread(cls, kw, torch_rng):
    """Captum's attribute_future takes the Future for FeatureAblation; its other classes take no Futures, so there
    the same function returning its tensor directly is Captum's reference."""
    ca = _captum()
    net, x = _net(), _x()
    future = cls == "FeatureAblation"
    with torch.no_grad():
        ours, theirs = _both(ca, cls, f_future(net), x, 2, kw, captum_fn=None if future else f_sync(net),
                             future=future)
    _close(ours, theirs, "%s of a Future completed by another thread" % cls)


@needs_torch
def test_additional_arguments_and_two_inputs(torch_rng):
    """Tensor additional arguments become model inputs, the others are passed as they are; two attributed inputs."""
    ca = _captum()
    net, x = _net(), _x()
    z = torch.randn(4, 5)
    mask = torch.tensor([True, False, True, True])

    def fn(a, b, keep, scale, mode):
        y = net(a) + scale * net(b)
        y = y * keep.unsqueeze(1).to(y.dtype)
        return y.sum().item() if mode == "sum" else y

    for mode, target in (("sum", None), ("rows", 1)):
        m = callback_model(fn, (x, z), (mask, 0.5, mode))
        assert m.input_names == ["a", "b", "keep"]
        add = (mask, 0.5, mode)
        with torch.no_grad():
            ours = A.FeatureAblation(m).attribute((x, z), target=target, additional_forward_args=add)
            theirs = ca.FeatureAblation(fn).attribute((x, z), target=target, additional_forward_args=add)
        for k in range(2):
            _close(ours[k], theirs[k], "FeatureAblation with additional arguments (%s), input %d" % (mode, k))


@needs_torch
def test_layer_feature_ablation_at_an_input():
    """LayerFeatureAblation whose layer is an input of the function: Captum's with an Identity module there."""
    ca = _captum()
    net, x = _net(), _x()
    ident = torch.nn.Identity()

    def fn(x):
        return net(ident(x)) ** 2

    m = callback_model(fn, (x,))
    with torch.no_grad():
        ours = A.LayerFeatureAblation(m, "x").attribute(x, target=1)
        theirs = ca.LayerFeatureAblation(fn, ident).attribute(x, target=1)
    _close(ours, theirs, "LayerFeatureAblation at input x")


# ---- how the function is called ----------------------------------------------------------------------------------

@needs_torch
def test_runs_on_the_calling_thread():
    net, x = _net(), _x()
    seen = []

    def fn(x):
        seen.append(threading.get_ident())
        assert torch.is_tensor(x) and not torch.is_grad_enabled()
        return net(x)

    m = callback_model(fn, (x,))
    seen.clear()
    A.FeatureAblation(m).attribute(x, target=0)
    assert seen and set(seen) == {threading.get_ident()}
    # from another thread: there
    out = {}

    def work():
        seen.clear()
        out["a"] = A.ShapleyValueSampling(m).attribute(x, target=0, n_samples=2)
        out["ident"] = threading.get_ident()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "a" in out and seen and set(seen) == {out["ident"]}


def test_numpy_function_without_torch():
    """A numpy function of numpy examples gets numpy arrays viewing the engine's memory (not copies) on cpu, and
    host copies on cpu-check; FeatureAblation of an additive function is each feature's term."""
    w = np.array([0.5, -1.0, 2.0, 0.25])
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    kinds = []

    def fn(a):
        kinds.append((type(a), a.flags.owndata, a.dtype))
        return (w * a * a).sum(axis=1)

    for dev in ("cpu", "cpu-check"):
        m = callback_model(fn, (x,), device=dev)
        assert is_callback_model(m) and m.device == dev
        kinds.clear()
        a = A.FeatureAblation(m).attribute(x)
        assert isinstance(a, np.ndarray)
        np.testing.assert_allclose(a, w * x * x, rtol=0, atol=1e-12)
        assert kinds and all(k[0] is np.ndarray and k[2] == np.float64 for k in kinds)
        if dev == "cpu":  # views of the engine's buffers
            assert not any(k[1] for k in kinds)
    assert "a host function" in m.describe()
    np.testing.assert_allclose(m(x), (w * x * x).sum(axis=1))


def test_aggregate_and_int_outputs_numpy():
    """An aggregate (one number for the batch) keeps its shape at any rows; an integer output is converted."""
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    m = callback_model(lambda a: int(a.sum()), (x,))
    a = A.FeatureAblation(m).attribute(x)
    assert a.shape == (1, 4)  # Captum's aggregation mode: one row
    np.testing.assert_allclose(a[0], x.sum(axis=0))


# ---- failures ----------------------------------------------------------------------------------------------------

class Boom(ValueError):
    pass


def _failing(exc, after=1):
    calls = [0]

    def fn(a):
        calls[0] += 1
        if calls[0] > after:
            raise exc
        return a.sum(axis=1)

    return fn


def test_exception_is_the_calls_error():
    x = np.ones((2, 3))
    m = callback_model(_failing(Boom("the forward is broken")), (x,), name="broken")
    with pytest.raises(Exception) as ei:
        A.FeatureAblation(m).attribute(x)
    e = ei.value
    assert "host function 'broken' failed" in str(e) or isinstance(e, Boom)
    assert "the forward is broken" in str(e)


def test_exception_reraised_with_the_package_hook(monkeypatch):
    """With the package's hook (_lib.error asks raised_exception), the function's own exception comes out."""
    orig = _lib.error

    def error(status, what=None):
        msg = (_lib.lib.cattr_last_error() or b"").decode("utf-8", "replace")
        exc = raised_exception(status, msg)
        return exc if exc is not None else orig(status, what)

    monkeypatch.setattr(_lib, "error", error)
    x = np.ones((2, 3))
    boom = Boom("the forward is broken")
    m = callback_model(_failing(boom), (x,))
    with pytest.raises(Boom) as ei:
        A.Occlusion(m).attribute(x, sliding_window_shapes=(1,))
    assert ei.value is boom
    m = callback_model(_failing(KeyboardInterrupt()), (x,))
    with pytest.raises(KeyboardInterrupt):
        A.FeatureAblation(m).attribute(x)
    # taken once: a later failure of another kind is the library's own error
    assert raised_exception(_lib.ERR_SHAPE, "anything") is None


def test_keyboard_interrupt_inside_cancels():
    x = np.ones((2, 3))
    m = callback_model(_failing(KeyboardInterrupt()), (x,))
    with pytest.raises(BaseException) as ei:
        A.FeatureAblation(m).attribute(x)
    e = ei.value
    assert isinstance(e, KeyboardInterrupt) or (getattr(e, "status", None) == _lib.ERR_CANCELLED and
                                                "KeyboardInterrupt" in str(e))


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_ctrl_c_during_the_function_cancels():
    """SIGINT while the function runs (the package's handler is on during a call): the call stops after it returns,
    with KeyboardInterrupt, and the function is not called again."""
    x = np.ones((4, 3))
    calls = [0]

    def fn(a):
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        return a.sum(axis=1)

    m = callback_model(fn, (x,))
    calls[0] = 0
    with pytest.raises(KeyboardInterrupt):
        A.FeatureAblation(m).attribute(x, perturbations_per_eval=1)
    assert calls[0] == 2


def test_wrong_output_shape():
    x = np.ones((3, 4))
    calls = [0]

    def fn(a):
        calls[0] += 1
        return a.sum(axis=1) if calls[0] == 1 else a.sum()

    m = callback_model(fn, (x,), name="shifty")
    with pytest.raises(ValueError) as ei:
        A.FeatureAblation(m).attribute(x)
    msg = str(ei.value)
    assert "host function 'shifty' returned an output of shape []" in msg and "gave [3]" in msg


def test_unsupported_returns():
    x = np.ones((2, 3))
    with pytest.raises(TypeError, match="returned a dict"):
        callback_model(lambda a: {"y": a}, (x,))
    m = callback_model(lambda a: a.sum(axis=1) if a.shape[0] == 2 else {"y": 1}, (x,))
    with pytest.raises(Exception, match="returned a dict"):
        A.FeatureAblation(m).attribute(np.ones((3, 3)))
    with pytest.raises(ValueError, match="batch_output=True"):
        callback_model(lambda a: a.sum(), (x,), batch_output=True)


@pytest.mark.parametrize("cls", ["Saliency", "IntegratedGradients", "InputXGradient"])
def test_gradient_methods_are_refused(cls):
    x = np.ones((2, 3))
    m = callback_model(lambda a: a.sum(axis=1), (x,), name="plain")
    with pytest.raises(RuntimeError, match=r"runs a host function \('plain'\) has no gradient: use a perturbation "
                                           r"method, or a forward function cattr can export"):
        getattr(A, cls)(m).attribute(x)


def test_cuda_device_when_built():
    if "cuda" not in cattr.devices() or _lib.lib.cattr_device_check(b"cuda") != _lib.OK:
        pytest.skip("no cuda device in this build or on this machine")
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    m = callback_model(lambda a: (a * a).sum(axis=1), (x,), device="cuda")
    np.testing.assert_allclose(A.FeatureAblation(m).attribute(x), x * x, rtol=0, atol=1e-12)


# ---- the choice between the ONNX export and the callback -----------------------------------------------------------

@needs_torch
def test_export_or_callback():
    """An exportable function keeps its export; one whose export fails, or whose trace converted a value to a Python
    number (the branch of the example frozen into the export), runs as a callback where a class allows it."""
    net, x = _net(), _x()

    class Wrap(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.net, self.fn = net, fn

        def forward(self, x):
            return self.fn(x)

    from cattr._callback import export_or_callback

    m, why = export_or_callback(lambda: cattr.from_torch(net, (x,)), net, (x,))
    assert why is None and not is_callback_model(m)
    for fn in (f_item(net), f_flow(net)):
        m, why = export_or_callback(lambda: cattr.from_torch(Wrap(fn), (x,)), fn, (x,))
        assert is_callback_model(m) and why is not None
        with torch.no_grad():
            np.testing.assert_allclose(np.asarray(m(x)), np.asarray(fn(x)), rtol=1e-6)
    fn = f_item(net)
    with pytest.raises(RuntimeError):
        export_or_callback(lambda: cattr.from_torch(Wrap(fn), (x,)), fn, (x,), allow=False)
    fn = f_flow(net)
    with pytest.warns(torch.jit.TracerWarning):  # refused the callback: the export, its warnings shown
        m, why = export_or_callback(lambda: cattr.from_torch(Wrap(fn), (x,)), fn, (x,), allow=False)
    assert why is None and not is_callback_model(m)
