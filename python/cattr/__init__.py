"""cattr: Captum's attribution methods, computed by the native cattr engine (libcattr).

    import cattr
    from cattr.attr import IntegratedGradients

    model = cattr.load("model.onnx")            # or cattr.from_torch(module, example_inputs)
    attr, delta = IntegratedGradients(model).attribute(x, target=3, return_convergence_delta=True)

See docs/python.md. The library is found through the environment variable CATTR_LIB, next to this package, in a
source tree's build/ folder, or on the system's library path.
"""
from ._lib import CattrWarning, version as _version
from ._core import Model, ModuleRef, devices, from_torch, load, load_safetensors
from . import attr

__version__ = _version()


def load_llm(path, device=None):
    """Loads a Hugging Face checkpoint folder (config.json, model.safetensors, tokenizer.json): see cattr.llm."""
    from .llm import load_llm as _load_llm

    return _load_llm(path, device)


__all__ = ["Model", "ModuleRef", "load", "from_torch", "load_llm", "devices", "load_safetensors", "attr", "CattrWarning",
           "__version__"]
