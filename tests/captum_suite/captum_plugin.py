"""pytest plugin: Captum 0.8's own unit tests run against cattr's classes (issue 31).

Loaded with `-p captum_plugin` (tests/captum_suite on PYTHONPATH) over Captum's test folders
(../shared/captum-0.8/tests/attr, tests/attr/layer, tests/attr/neuron, tests/metrics, tests/robust, tests/concept,
tests/influence). In the mode "cattr" (CATTR_CAPTUM_MODE,
the default) every attribution class of `captum.attr` that cattr implements is replaced, in `captum.attr` and in the
module that defines it, by cattr's class of the same name, and every function of `captum.metrics` and attack of
`captum.robust` that `cattr.metrics` and `cattr.robust` have, and captum.concept's TCAV, by cattr's, before any test module is imported; and the `attribute`
and `attribute_future` of Captum's own classes raise (an exception no test can catch; the test is counted as failed
even so), so that a test passes only when cattr computed its numbers (captum.influence's classes likewise, the
influence functions included).
cattr's torch-compatible random draws are switched on (`cattr.attr.set_rng("torch")`, cattr's own opt-in for Captum
code that seeds torch's generator). Nothing of a test, a tolerance or Captum's helpers is changed: a test that reaches Captum's code elsewhere (its
utilities, its models) runs it as it is. In the mode "captum" nothing is replaced: the same tests against Captum
itself, for the baseline.

One accommodation of the environment, not of a test: Debian's python3-parameterized (0.8.1) refuses the non-tuple
parameters of `@parameterized.expand([True, False])` that version 0.9 accepts (tests/attr/test_shapley.py); such a
parameter is wrapped in a tuple, as 0.9 does.

Each test's outcome goes to the JSON file named by CATTR_CAPTUM_RESULTS: {"outcomes": {nodeid: "passed" | "failed" |
"skipped"}, "messages": {nodeid: the exception line of a failure}}.
"""
import json
import os
import sys

MODE = os.environ.get("CATTR_CAPTUM_MODE", "cattr")
_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(os.path.dirname(_here))
CAPTUM_DIR = os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(_root), "shared", "captum-0.8"))

_outcomes = {}
_messages = {}
_replaced = []


def _message(report):
    """The exception line of a failure (the last 'E   ' line of its traceback)."""
    text = getattr(report, "longreprtext", "") or ""
    lines = [ln[4:].strip() for ln in text.splitlines() if ln.startswith("E   ")]
    return (lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else "")[:400]


def _parameterized_09():
    """parameterized 0.9's handling of non-tuple parameters, on 0.8."""
    try:
        import parameterized
    except ImportError:
        return
    from parameterized import param

    orig = param.from_decorator

    def from_decorator(cls, args):
        if not isinstance(args, (param, tuple, list, str, dict)) and not hasattr(args, "__iter__"):
            args = (args,)
        return orig.__func__(cls, args)

    param.from_decorator = classmethod(from_decorator)


class CaptumRan(BaseException):
    """Raised when Captum's own attribute ran: a BaseException, so that no `assertRaises(...)` or `except Exception`
    of a test can catch it (a test expecting an error must not pass because Captum's stub raised)."""


_captum_ran = set()  # the tests in which Captum's own attribute ran: failed, whatever they caught
_current = [None]


def _captum_raises(name):
    def attribute(self, *args, **kwargs):
        _captum_ran.add(_current[0])
        raise CaptumRan("captum_plugin: Captum's own %s ran (cattr must compute it)" % name)

    return attribute


def _install():
    """Replaces Captum's attribution classes by cattr's."""
    import importlib
    import pkgutil

    import captum.attr
    import cattr.attr as ca

    # the attribution methods only: Captum's base classes (Attribution, LayerAttribution, ...) stay Captum's, for the
    # reference implementations of Captum's test helpers that derive from them
    names = {n for n in ca.__all__ if isinstance(getattr(ca, n), type) and hasattr(getattr(ca, n), "attribute") and
             n not in ("Attribution", "LayerAttribution", "NeuronAttribution")}
    modules = [captum.attr]
    for info in pkgutil.walk_packages(captum.attr.__path__, "captum.attr."):
        try:
            modules.append(importlib.import_module(info.name))
        except Exception:  # a module that needs what is not installed: Captum's own tests will say so
            pass
    originals = {}
    for mod in modules:
        for name in list(vars(mod)):
            obj = getattr(mod, name)
            if name in names and isinstance(obj, type) and obj.__module__.startswith("captum."):
                originals[id(obj)] = obj
                setattr(mod, name, getattr(ca, name))
                _replaced.append("%s.%s" % (mod.__name__, name))
    for obj in originals.values():
        for meth in ("attribute", "attribute_future"):
            if meth in vars(obj):
                setattr(obj, meth, _captum_raises(obj.__name__))
    # captum.metrics: the functions cattr.metrics has, in the package and the module that defines each (Captum's own
    # raise, as its attribute methods do)
    import captum.metrics
    import cattr.metrics as cm

    for name in cm.__all__:
        mods = [captum.metrics] + [importlib.import_module(m) for m in ("captum.metrics._core.infidelity",
                                                                         "captum.metrics._core.sensitivity")]
        for mod in mods:
            obj = vars(mod).get(name)
            if callable(obj) and getattr(obj, "__module__", "").startswith("captum."):
                setattr(mod, name, getattr(cm, name))
                _replaced.append("%s.%s" % (mod.__name__, name))
    # captum.robust: the attacks cattr.robust has, likewise (Captum's own perturb raises)
    import captum.robust
    import cattr.robust as cr

    for name in cr.__all__:
        for mod in [captum.robust] + [importlib.import_module(m) for m in (
                "captum.robust._core.fgsm", "captum.robust._core.pgd",
                "captum.robust._core.metrics.min_param_perturbation",
                "captum.robust._core.metrics.attack_comparator")]:
            obj = vars(mod).get(name)
            if isinstance(obj, type) and obj.__module__.startswith("captum."):
                for meth in ("perturb", "evaluate"):
                    if meth in vars(obj):
                        setattr(obj, meth, _captum_raises(obj.__name__))
                setattr(mod, name, getattr(cr, name))
                _replaced.append("%s.%s" % (mod.__name__, name))
    # captum.concept: cattr's TCAV and its parts (Concept, CAV, the default classifier, train_cav), in the package
    # and each module that defines or imports them; Captum's own interpret raises. Captum's Classifier (an abstract
    # interface the tests derive from) stays.
    import captum.concept
    import cattr.concept as cc

    for name in ("TCAV", "CAV", "Concept", "ConceptInterpreter", "DefaultClassifier", "train_cav"):
        for mod in [captum.concept] + [importlib.import_module(m) for m in (
                "captum.concept._core.tcav", "captum.concept._core.cav", "captum.concept._core.concept",
                "captum.concept._utils.classifier", "captum.concept._utils.common")]:
            obj = vars(mod).get(name)
            if obj is not None and getattr(obj, "__module__", "").startswith("captum."):
                if isinstance(obj, type) and "interpret" in vars(obj):
                    setattr(obj, "interpret", _captum_raises(obj.__name__))
                setattr(mod, name, getattr(cc, name))
                _replaced.append("%s.%s" % (mod.__name__, name))
    # captum.influence: cattr's TracInCP, TracInCPFast and SimilarityInfluence and the similarity functions, in the
    # package and the modules that define or import them; Captum's own methods of those classes raise
    import captum.influence
    import cattr.influence as ci

    for name in ("TracInCP", "TracInCPFast", "TracInCPFastRandProj", "SimilarityInfluence", "cosine_similarity",
                 "euclidean_distance"):
        for mod in [captum.influence] + [importlib.import_module(m) for m in (
                "captum.influence._core.tracincp", "captum.influence._core.tracincp_fast_rand_proj",
                "captum.influence._core.similarity_influence")]:
            obj = vars(mod).get(name)
            if obj is not None and getattr(obj, "__module__", "").startswith("captum."):
                if isinstance(obj, type):
                    for meth in ("influence", "self_influence", "compute_intermediate_quantities"):
                        if meth in vars(obj):
                            setattr(obj, meth, _captum_raises(obj.__name__))
                setattr(mod, name, getattr(ci, name))
                _replaced.append("%s.%s" % (mod.__name__, name))
    # the influence functions: cattr's classes in the package and the modules that define them; Captum's own methods
    # of those classes raise
    for name, where in (("NaiveInfluenceFunction", "captum.influence._core.influence_function"),
                        ("ArnoldiInfluenceFunction", "captum.influence._core.arnoldi_influence_function")):
        for mod in (captum.influence, importlib.import_module(where)):
            obj = vars(mod).get(name)
            if obj is not None and getattr(obj, "__module__", "").startswith("captum."):
                for meth in ("influence", "self_influence", "compute_intermediate_quantities", "__init__"):
                    if meth in vars(obj):
                        setattr(obj, meth, _captum_raises(obj.__name__))
                setattr(mod, name, getattr(ci, name))
                _replaced.append("%s.%s" % (mod.__name__, name))
    # Captum's tests seed torch's generator (and numpy's) and expect Captum's random draws: cattr's opt-in
    ca.set_rng("torch")


def pytest_configure(config):
    if CAPTUM_DIR not in sys.path:
        sys.path.insert(0, CAPTUM_DIR)
    _parameterized_09()
    if MODE == "cattr":
        _install()
    elif MODE != "captum":
        raise ValueError("CATTR_CAPTUM_MODE must be cattr or captum, not %r" % MODE)


def pytest_runtest_logstart(nodeid, location):
    _current[0] = nodeid


def pytest_runtest_logreport(report):
    nid = report.nodeid
    if (report.when == "setup" and report.outcome != "passed") or report.when == "call" or \
            (report.when == "teardown" and report.outcome == "failed"):
        _outcomes[nid] = report.outcome
        if report.outcome == "failed":
            _messages[nid] = _message(report)
    if nid in _captum_ran:  # Captum computed something in this test: never a pass
        _outcomes[nid] = "failed"
        _messages[nid] = "captum_plugin: Captum's own attribute ran"


def pytest_collectreport(report):
    if report.outcome == "failed":  # a module that cannot be collected: counted as one failure
        _outcomes[report.nodeid + "::<collection>"] = "failed"
        _messages[report.nodeid + "::<collection>"] = _message(report)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("CATTR_CAPTUM_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump({"mode": MODE, "replaced": len(_replaced), "outcomes": _outcomes, "messages": _messages}, f,
                      indent=0, sort_keys=True)
