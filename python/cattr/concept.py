"""Captum's captum.concept on cattr: TCAV (Kim et al. 2018), with Captum's classes, arguments, files and results.

    from cattr.concept import TCAV, Concept

    tcav = TCAV(model, ["conv2", "fc1"], save_path="./cav/")
    scores = tcav.interpret(inputs, experimental_sets=[[striped, random_0], [striped, random_1]], target=3)
    scores["0-1"]["conv2"]["sign_count"], scores["0-1"]["conv2"]["magnitude"]

The layer activations of the concepts' examples and the layer gradients of the inputs are computed by cattr (its
LayerActivation and LayerGradientXActivation without the multiplication, every layer of a call in one pass); the
concept activation vectors (CAVs) are the weights of a linear classifier of the activations, trained by the
`classifier` (Captum's Classifier interface: `train_and_eval(dataloader, **kwargs)`, `weights()`, `classes()`) or
by DefaultClassifier (Captum's: sklearn's SGDClassifier(alpha=0.01, max_iter=1000, tol=1e-3) on a 67/33 split
shuffled by Python's `random`; where sklearn is not installed, a linear SGD of the same loss and schedule written
here, see DefaultClassifier). Activations and CAVs are saved where Captum saves them, in Captum's formats
(`save_path/av/MODEL_ID/CONCEPT/LAYER/N.pt`, `save_path/MODEL_ID/IDS-LAYER.pkl`, torch.save), so that a second run,
Captum's or cattr's, reloads them. `significance` runs the paper's test of a concept against random concepts.
"""
import glob
import math
import os
import random
import re
import warnings
from collections import OrderedDict, defaultdict

import numpy as np

from . import _lib
from ._core import _is_torch

__all__ = ["Concept", "ConceptInterpreter", "Classifier", "DefaultClassifier", "CAV", "TCAV", "concepts_to_str",
           "train_cav", "significance", "concept_from_arrays"]


# =================================================================================================================
# Concepts
# =================================================================================================================

class Concept:
    """A concept: a unique id, a name and `data_iter`, an iterable of batches of its examples (a torch DataLoader
    or any iterable of arrays)."""

    def __init__(self, id, name, data_iter):
        self.id = id
        self.name = name
        self.data_iter = data_iter

    @property
    def identifier(self):
        return "%s-%s" % (self.name, self.id)

    def __repr__(self):
        return "Concept(%r, %r)" % (self.id, self.name)


_IMAGES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def _read_example(path, transform):
    """One example file: a .npy array, or an image (PIL, as RGB float32 [3, H, W] in [0, 1]) passed through
    transform (a function of the PIL image, e.g. torchvision's transforms) when one is given."""
    if path.lower().endswith(".npy"):
        a = np.load(path)
        return transform(a) if transform is not None else a
    try:
        from PIL import Image
    except ImportError:
        raise _lib.ArgumentError("cattr: reading the image %s needs PIL (Debian: python3-pil)" % path)
    with Image.open(path) as im:
        im = im.convert("RGB")
        if transform is not None:
            return transform(im)
        return np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255.0


def concept_from_arrays(id, name, examples, batch_size=64, transform=None):
    """A Concept over examples in memory (an array or tensor [n, ...]) or in files (a folder of them, or a list of
    paths; one example per file: .npy arrays, or images read by PIL as RGB [3, H, W] in [0, 1], each passed through
    `transform` when given, e.g. the model's resize and normalisation), in batches of batch_size."""
    if batch_size < 1:
        raise _lib.ArgumentError("cattr: batch_size must be at least 1")
    if isinstance(examples, str):
        if not os.path.isdir(examples):
            raise _lib.ArgumentError("cattr: the concept folder %s does not exist" % examples)
        paths = sorted((p for p in glob.glob(os.path.join(examples, "*"))
                        if p.lower().endswith((".npy",) + _IMAGES)), key=_natural_key)
        if not paths:
            raise _lib.ArgumentError("cattr: the concept folder %s holds no .npy or image file" % examples)
        examples = paths
    if isinstance(examples, (list, tuple)) and examples and all(isinstance(p, str) for p in examples):
        arrays = [np.asarray(_read_example(p, transform)) for p in examples]
        for p, a in zip(examples, arrays):
            if a.shape != arrays[0].shape:
                raise _lib.ArgumentError("cattr: the concept example %s has the shape %s, %s has %s"
                                         % (p, a.shape, examples[0], arrays[0].shape))
        examples = np.stack(arrays)
    if len(examples) == 0:
        raise _lib.ArgumentError("cattr: the concept %s has no examples" % name)
    return Concept(id, name, _Batches(examples, batch_size))


class _Batches:
    """An array's examples in batches (a re-iterable data_iter)."""

    def __init__(self, examples, batch_size):
        self.examples = examples
        self.batch_size = batch_size

    def __iter__(self):
        n = len(self.examples)
        return (self.examples[i:i + self.batch_size] for i in range(0, n, self.batch_size))

    def __len__(self):
        return (len(self.examples) + self.batch_size - 1) // self.batch_size


def concepts_to_str(concepts):
    """The key of an experimental set: its concepts' ids joined by '-' (Captum's)."""
    return "-".join(str(c.id) for c in concepts)


class ConceptInterpreter:
    """Base of the concept-based interpreters (Captum's): holds the model."""

    def __init__(self, model):
        self.model = model


# =================================================================================================================
# Files: Captum's layouts, torch.save where torch is installed
# =================================================================================================================

def _save(obj, path):
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is there wherever a PyTorch model is
        import pickle

        with open(path, "wb") as f:
            pickle.dump(obj, f)
        return
    torch.save(obj, path)


def _load(path):
    try:
        import torch
    except ImportError:  # pragma: no cover
        import pickle

        with open(path, "rb") as f:
            return pickle.load(f)
    return torch.load(path)


def _natural_key(path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


class _Activations:
    """The concepts' layer activations on disk, where Captum's AV keeps them: save_path/av/MODEL_ID/IDENTIFIER/
    LAYER/N.pt, one [n, features] tensor per batch of the concept's examples."""

    @staticmethod
    def folder(path, model_id, identifier, layer):
        return os.path.join(path, "av", model_id, identifier, layer)

    @staticmethod
    def exists(path, model_id, identifier, layer):
        return bool(glob.glob(os.path.join(_Activations.folder(path, model_id, identifier, layer), "*.pt")))

    @staticmethod
    def save(path, model_id, identifier, layer, act, num):
        d = _Activations.folder(path, model_id, identifier, layer)
        os.makedirs(d, exist_ok=True)
        _save(act, os.path.join(d, "%s.pt" % num))

    @staticmethod
    def files(path, model_id, identifier, layer):
        found = glob.glob(os.path.join(_Activations.folder(path, model_id, identifier, layer), "*.pt"))
        if not found:
            raise _lib.ArgumentError("cattr: no activations of the concept %s at the layer %s under %s (model id %s)"
                                     % (identifier, layer, path, model_id))
        return sorted(found, key=_natural_key)


class CAV:
    """A concept activation vector: the concepts of an experimental set, the layer, and `stats` ({"weights": [C, F]
    tensor, "classes": the classifier's class per row, and what train_and_eval returned, e.g. "accs"}). Saved
    as Captum saves it: save_path/MODEL_ID/IDS-LAYER.pkl (torch.save of a dict)."""

    def __init__(self, concepts, layer, stats=None, save_path="./cav/", model_id="default_model_id"):
        self.concepts = concepts
        self.layer = layer
        self.stats = stats
        self.save_path = save_path
        self.model_id = model_id

    @staticmethod
    def assemble_save_path(path, model_id, concepts, layer):
        return os.path.join(path, model_id, concepts_to_str(concepts) + "-" + layer + ".pkl")

    def save(self):
        _save({"concept_ids": [c.id for c in self.concepts], "concept_names": [c.name for c in self.concepts],
               "layer": self.layer, "stats": self.stats},
              CAV.assemble_save_path(self.save_path, self.model_id, self.concepts, self.layer))

    @staticmethod
    def create_cav_dir_if_missing(save_path, model_id):
        os.makedirs(os.path.join(save_path, model_id), exist_ok=True)

    @staticmethod
    def load(cavs_path, model_id, concepts, layer):
        """The CAV saved for these concepts and layer, or None."""
        path = CAV.assemble_save_path(cavs_path, model_id, concepts, layer)
        if not os.path.exists(path):
            return None
        d = _load(path)
        return CAV([Concept(i, n, None) for i, n in zip(d["concept_ids"], d["concept_names"])], d["layer"],
                   d["stats"])


# =================================================================================================================
# Classifiers
# =================================================================================================================

class Classifier:
    """Captum's Classifier interface: train_and_eval(dataloader, **kwargs) trains on the (activations, labels)
    batches and returns a dict of statistics or None; weights() is the [C, F] weight matrix (two rows for two
    concepts); classes() the class (concept id) of each row."""

    def train_and_eval(self, dataloader, **kwargs):
        raise NotImplementedError

    def weights(self):
        raise NotImplementedError

    def classes(self):
        raise NotImplementedError


def _split(x, y, test_split):
    """Captum's split: the examples shuffled by Python's random, the first int(test_split * n) for the test."""
    z = list(zip(x, y))
    random.shuffle(z)
    n_test = int(test_split * len(z))
    test, train = z[:n_test], z[n_test:]
    if not test or not train:
        raise _lib.ArgumentError("cattr: %d concept examples are too few for a train/test split of %g"
                                 % (len(z), test_split))
    return (np.stack([a for a, _ in train]), np.stack([a for a, _ in test]), np.array([b for _, b in train]),
            np.array([b for _, b in test]))


class _LinearSGD:
    """A linear classifier by stochastic gradient descent on the hinge loss with an L2 penalty alpha, sklearn's
    SGDClassifier form (one-vs-rest for more than two classes, the "optimal" step 1 / (alpha (t + t0)), epochs
    until the loss has not improved by tol for 5 of them or max_iter): the default classifier where sklearn is not
    installed. Its CAVs are not sklearn's bit for bit (sklearn's shuffles and averages are its own)."""

    def __init__(self, alpha=0.01, max_iter=1000, tol=1e-3, seed=0):
        self.alpha, self.max_iter, self.tol, self.seed = alpha, max_iter, tol, seed

    def fit(self, x, y):
        x = np.asarray(x, dtype=np.float64)
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise _lib.ArgumentError("cattr: the concept classifier needs examples of at least two concepts")
        rows = [self.classes_[1]] if len(self.classes_) == 2 else list(self.classes_)
        rng = np.random.RandomState(self.seed)
        # the optimal schedule's offset (Bottou's heuristic: the first step's size is the typical weight
        # 1 / sqrt(sqrt(alpha)), the hinge loss's derivative there being at most 1)
        t0 = 1.0 / (math.sqrt(1.0 / math.sqrt(self.alpha)) * self.alpha)
        w = np.zeros((len(rows), x.shape[1]))
        b = np.zeros(len(rows))
        for r, cls in enumerate(rows):
            s = np.where(y == cls, 1.0, -1.0)
            t, best, stale = 1.0, np.inf, 0
            for _ in range(self.max_iter):
                loss = 0.0
                for i in rng.permutation(len(x)):
                    eta = 1.0 / (self.alpha * (t0 + t - 1))
                    m = s[i] * (x[i] @ w[r] + b[r])
                    if m < 1.0:
                        w[r] += eta * s[i] * x[i]
                        b[r] += eta * s[i]
                        loss += 1.0 - m
                    w[r] *= max(0.0, 1.0 - eta * self.alpha)
                    t += 1
                if loss > best - self.tol * len(x):
                    stale += 1
                    if stale >= 5:
                        break
                else:
                    stale = 0
                best = min(best, loss)
        self.coef_, self.intercept_ = w, b
        return self

    def decision(self, x):
        return np.asarray(x, dtype=np.float64) @ self.coef_.T + self.intercept_


class DefaultClassifier(Classifier):
    """Captum's default CAV classifier: the examples shuffled (Python's random) and split 67/33, a linear SGD
    classifier (sklearn's SGDClassifier(alpha=0.01, max_iter=1000, tol=1e-3) when sklearn is installed, as Captum
    trains it; else cattr's linear SGD of the same loss and schedule) trained on the first part, its accuracy on
    the second as "accs". Two concepts give one hyperplane w, returned as the rows [-w, w] (Captum's). The accuracy
    counts a prediction as the class of the larger score (for two concepts: the sign of w·x + b); Captum's
    takes the argmax of the one column of a binary model, always its first class."""

    def __init__(self, **sgd_kwargs):
        warnings.warn("Using default classifier for TCAV which keeps input both train and test datasets in the "
                      "memory. Consider defining your own classifier that doesn't rely heavily on memory, for large "
                      "number of concepts, by extending `Classifer` abstract class", stacklevel=2)
        self.sgd_kwargs = dict(alpha=0.01, max_iter=1000, tol=1e-3)
        self.sgd_kwargs.update(sgd_kwargs)
        self.lm = None

    def train_and_eval(self, dataloader, test_split_ratio=0.33, **kwargs):
        xs, ys = [], []
        for x, y in dataloader:
            xs.append(_np(x))
            ys.append(_np(y))
        x_train, x_test, y_train, y_test = _split(np.concatenate(xs), np.concatenate(ys), test_split_ratio)
        try:
            from sklearn.linear_model import SGDClassifier
        except ImportError:
            SGDClassifier = None
        if SGDClassifier is not None:
            self.lm = SGDClassifier(**self.sgd_kwargs).fit(x_train, y_train)
            scores = self.lm.decision_function(x_test)
        else:
            self.lm = _LinearSGD(**self.sgd_kwargs).fit(x_train, y_train)
            scores = self.lm.decision(x_test)
        scores = np.asarray(scores)
        cls = np.asarray(self.lm.classes_)
        pred = cls[(scores > 0).astype(int)] if scores.ndim == 1 or scores.shape[1] == 1 else \
            cls[np.argmax(scores, axis=1)]
        acc = float(np.mean(pred.reshape(-1) == y_test))
        return {"accs": _as_tensor(np.float32(acc))}

    def weights(self):
        if self.lm is None:
            raise _lib.ArgumentError("cattr: the classifier has no weights before train_and_eval")
        w = np.asarray(self.lm.coef_, dtype=np.float32).reshape(-1, np.shape(self.lm.coef_)[-1])
        if w.shape[0] == 1:
            w = np.stack([-w[0], w[0]])
        return _as_tensor(w)

    def classes(self):
        return np.asarray(self.lm.classes_).astype(np.int32)


def _np(x):
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _as_tensor(a):
    """a as a torch tensor where torch is installed (Captum's classifiers return tensors), else numpy."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return a
    return torch.from_numpy(np.array(a))


# =================================================================================================================
# TCAV
# =================================================================================================================

class _Labelled:
    """The (activations, labels) batches of an experimental set at a layer: each saved activation file of each
    concept in turn, labelled by the concept's id (Captum's LabelledDataset through a DataLoader of batch size 1)."""

    def __init__(self, save_path, model_id, concepts, layer):
        self.items = [(f, c.id) for c in concepts
                      for f in _Activations.files(save_path, model_id, c.identifier, layer)]

    def __iter__(self):
        for f, label in self.items:
            act = _load(f)
            if _is_torch(act):
                import torch

                yield act, torch.full((act.shape[0],), label, dtype=torch.int64, device=act.device)
            else:
                yield act, np.full((act.shape[0],), label, dtype=np.int64)

    def __len__(self):
        return len(self.items)


def train_cav(model_id, concepts, layers, classifier, save_path, classifier_kwargs):
    """Trains and saves the CAVs of one experimental set at each layer: {concepts key: {layer: CAV}}."""
    key = concepts_to_str(concepts)
    out = {key: {}}
    for layer in [layers] if isinstance(layers, str) else layers:
        stats = classifier.train_and_eval(_Labelled(save_path, model_id, concepts, layer), **classifier_kwargs)
        weights = classifier.weights()
        classes = classifier.classes()
        if weights is None or len(weights) == 0:
            raise _lib.ArgumentError("cattr: the classifier returned no weights (layer %s, concepts %s)"
                                     % (layer, key))
        if classes is None or len(classes) == 0:
            raise _lib.ArgumentError("cattr: the classifier returned no classes (layer %s, concepts %s)"
                                     % (layer, key))
        if _is_torch(classes):
            classes = classes.detach().cpu().numpy()
        cav = CAV(concepts, layer, dict({"weights": weights, "classes": classes}, **(stats or {})), save_path,
                  model_id)
        cav.save()
        out[key][layer] = cav
    return out


class TCAV(ConceptInterpreter):
    """Captum's TCAV: `model` (a PyTorch module or a cattr Model), `layers` (module paths or value names),
    `model_id` (the folder of its saved activations and CAVs), `classifier` (default DefaultClassifier),
    `layer_attr_method` (a cattr layer method instance, default LayerGradientXActivation(model, None,
    multiply_by_inputs=False): the layer gradients), `attribute_to_layer_input`, `save_path`, and keyword arguments
    for the classifier's train_and_eval."""

    def __init__(self, model, layers, model_id="default_model_id", classifier=None, layer_attr_method=None,
                 attribute_to_layer_input=False, save_path="./cav/", **classifier_kwargs):
        ConceptInterpreter.__init__(self, model)
        self.layers = [layers] if isinstance(layers, str) else list(layers)
        if not self.layers:
            raise _lib.ArgumentError("cattr: TCAV needs at least one layer")
        if not model_id:
            raise _lib.ArgumentError("cattr: model_id cannot be empty (it names the folder of the saved "
                                     "activations and CAVs; the default is 'default_model_id')")
        self.model_id = model_id
        self.concepts = set()
        self.classifier = classifier if classifier is not None else DefaultClassifier()
        self.classifier_kwargs = classifier_kwargs
        self.cavs = defaultdict(lambda: defaultdict())
        self.layer_attr_method = layer_attr_method
        self.attribute_to_layer_input = attribute_to_layer_input
        self.save_path = save_path
        self._methods = {}  # cattr's layer methods, kept across calls (their exports and plans)
        CAV.create_cav_dir_if_missing(self.save_path, model_id)

    # --- activations ---------------------------------------------------------------------------------------------

    def generate_all_activations(self):
        for concept in self.concepts:
            self.generate_activation(self.layers, concept)

    def generate_activation(self, layers, concept):
        """The concept's activations at the layers, every layer of a batch in one cattr pass, saved per batch."""
        from .attr import LayerActivation

        layers = [layers] if isinstance(layers, str) else list(layers)
        if concept.data_iter is None:
            raise _lib.ArgumentError("cattr: the concept %s (id %s) has no data_iter" % (concept.name, concept.id))
        act = self._methods.get(("act", tuple(layers)))
        if act is None:  # one per set of layers, kept: its exports and plans serve every concept and call
            act = self._methods[("act", tuple(layers))] = LayerActivation(self.model, list(layers))
        for i, examples in enumerate(concept.data_iter):
            outs = act.attribute(examples, attribute_to_layer_input=self.attribute_to_layer_input)
            for a, layer in zip(outs, layers):
                a = _flatten_rows(a)
                _Activations.save(self.save_path, self.model_id, concept.identifier, layer, _detach(a), str(i))

    def generate_activations(self, concept_layers):
        for concept in concept_layers:
            self.generate_activation(concept_layers[concept], concept)

    # --- CAVs ------------------------------------------------------------------------------------------------------

    def load_cavs(self, concepts):
        """Loads the saved CAVs of the experimental set; returns the layers still to train and, per concept, the
        layers whose activations are missing."""
        key = concepts_to_str(concepts)
        layers, concept_layers = [], defaultdict(list)
        for layer in self.layers:
            cav = CAV.load(self.save_path, self.model_id, concepts, layer)
            if cav is not None:
                self.cavs[key][layer] = cav
            if not self.cavs.get(key, {}).get(layer):
                layers.append(layer)
                for c in concepts:
                    if not _Activations.exists(self.save_path, self.model_id, c.identifier, layer):
                        concept_layers[c].append(layer)
        return layers, concept_layers

    def compute_cavs(self, experimental_sets, force_train=False, processes=None):
        """Trains (or, unless force_train, reloads) the CAVs of the experimental sets at every layer."""
        for concepts in experimental_sets:
            self.concepts.update(concepts)
        seen = set()
        for c in self.concepts:
            # Captum raises AssertionError here; its tests expect it
            assert c.id not in seen, ("There is more than one instance of a concept with id %s defined in "
                                      "experimental sets. Please, make sure to reuse the same instance of concept"
                                      % c.id)
            seen.add(c.id)
        if force_train:
            self.generate_all_activations()
        to_train = {}
        for concepts in experimental_sets:
            key = concepts_to_str(concepts)
            if force_train:
                to_train[key] = self.layers
            else:
                layers, concept_layers = self.load_cavs(concepts)
                to_train[key] = layers
                self.generate_activations(concept_layers)
        jobs = [(self.model_id, concepts, to_train[concepts_to_str(concepts)], self.classifier, self.save_path,
                 self.classifier_kwargs) for concepts in experimental_sets]
        if processes is not None and processes > 1:
            import multiprocessing

            with multiprocessing.Pool(processes) as pool:
                results = pool.starmap(train_cav, jobs)
        else:
            results = [train_cav(*job) for job in jobs]
        for cavs in results:
            for key in cavs:
                self.cavs[key].update(cavs[key])
        return self.cavs

    # --- scores ----------------------------------------------------------------------------------------------------

    def _layer_gradients(self, inputs, target, additional_forward_args, kwargs):
        """{layer: [n, features]} attributions of the layers: the default method in one pass for every layer."""
        from .attr import LayerAttribution, LayerGradientXActivation

        m = self.layer_attr_method
        if m is None:
            m = self._methods.get("grad")
            if m is None:
                m = self._methods["grad"] = LayerGradientXActivation(self.model, list(self.layers),
                                                                     multiply_by_inputs=False)
            outs = m.attribute(inputs, target=target, additional_forward_args=additional_forward_args,
                               attribute_to_layer_input=self.attribute_to_layer_input, **kwargs)
            return {layer: _flatten_rows(a) for layer, a in zip(self.layers, outs)}
        res = {}
        for layer in self.layers:
            if isinstance(m, LayerAttribution):
                one = m._with_layer(layer)
            else:  # another library's layer method (Captum's interface): its layer set to the module
                one = m
                one.layer = _module(self.model, layer)
            a = one.attribute(inputs, target=target, additional_forward_args=additional_forward_args,
                              attribute_to_layer_input=self.attribute_to_layer_input, **kwargs)
            res[layer] = _flatten_rows(a)
        return res

    def interpret(self, inputs, experimental_sets, target=None, additional_forward_args=None, processes=None,
                  **kwargs):
        """{concepts key: {layer: {"sign_count": [C], "magnitude": [C]}}}: per concept of each experimental set
        (in the set's order), the share of the inputs whose layer attribution has a positive dot product with the
        concept's CAV, and the mean of those dot products."""
        if "attribute_to_layer_input" in kwargs:
            raise _lib.ArgumentError("cattr: set attribute_to_layer_input in TCAV's constructor (it applies to the "
                                     "activations and the attributions alike)")
        self.compute_cavs(experimental_sets, processes=processes)
        grads = self._layer_gradients(inputs, target, additional_forward_args, kwargs)
        scores = defaultdict(lambda: defaultdict())
        for layer in self.layers:
            g = grads[layer]
            for concepts in experimental_sets:
                key = concepts_to_str(concepts)
                stats = self.cavs[key][layer].stats
                w = np.asarray(_np(stats["weights"]), dtype=np.float32)
                classes = [int(c) for c in np.asarray(_np(stats["classes"])).reshape(-1)]
                order = [classes.index(c.id) for c in concepts]
                scores[key][layer] = _scores(g, w[order])
        return scores


def _scores(g, w):
    """sign_count and magnitude of the attributions g [n, F] against the CAV rows w [C, F], in float32 (Captum's
    float matmul), as torch tensors where g is one."""
    if _is_torch(g):
        import torch

        s = torch.matmul(g.detach().float(), torch.from_numpy(np.ascontiguousarray(w)).to(g.device).t())
        return {"sign_count": torch.mean((s > 0.0).float(), dim=0), "magnitude": torch.mean(s, dim=0)}
    s = np.asarray(g, dtype=np.float32) @ w.T
    return {"sign_count": np.mean(s > 0.0, axis=0, dtype=np.float32),
            "magnitude": np.mean(s, axis=0, dtype=np.float32)}


def _flatten_rows(a):
    """A layer result [n, ...] (or a tuple of them, concatenated) as [n, features]."""
    if isinstance(a, tuple):
        parts = [_flatten_rows(x) for x in a]
        if _is_torch(parts[0]):
            import torch

            return torch.cat(parts, dim=1)
        return np.concatenate(parts, axis=1)
    return a.reshape(a.shape[0], -1)


def _detach(a):
    return a.detach() if _is_torch(a) else a


def _module(model, path):
    m = model
    for part in path.split("."):
        m = getattr(m, part)
    return m


# =================================================================================================================
# Significance (the paper's test against random concepts)
# =================================================================================================================

def _betacf(a, b, x):
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _ibeta(a, b, x):
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lb = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lb) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lb) * _betacf(b, a, 1.0 - x) / b


def _ttest(a, b):
    """Two-sided Welch t-test of the means of a and b: (t, p)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = len(a), len(b)
    va, vb = a.var(ddof=1) / na, b.var(ddof=1) / nb
    if va + vb == 0.0:
        return (0.0, 1.0) if a.mean() == b.mean() else (math.copysign(math.inf, a.mean() - b.mean()), 0.0)
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    return t, _ibeta(df / 2.0, 0.5, df / (df + t * t))


def significance(tcav, inputs, concept, random_concepts, target=None, additional_forward_args=None,
                 score="sign_count", alpha=0.05, **kwargs):
    """The TCAV paper's test of a concept: its score against each random concept ([concept, random_i]) is
    compared with a random concept's score against the others ([random_0, random_i], i > 0) by a two-sided Welch
    t-test, per layer. Returns {layer: {"p_value", "significant" (p < alpha), "mean", "std", "random_mean",
    "random_std", "scores", "random_scores"}}. Needs at least three random concepts."""
    if len(random_concepts) < 3:
        raise _lib.ArgumentError("cattr: significance needs at least 3 random concepts (got %d)"
                                 % len(random_concepts))
    if score not in ("sign_count", "magnitude"):
        raise _lib.ArgumentError("cattr: score must be 'sign_count' or 'magnitude', not %r" % (score,))
    sets = [[concept, r] for r in random_concepts] + [[random_concepts[0], r] for r in random_concepts[1:]]
    res = tcav.interpret(inputs, sets, target=target, additional_forward_args=additional_forward_args, **kwargs)
    out = OrderedDict()
    nc = len(random_concepts)
    for layer in tcav.layers:
        vals = [float(_np(res[concepts_to_str(s)][layer][score])[0]) for s in sets]
        mine, rand = vals[:nc], vals[nc:]
        _, p = _ttest(mine, rand)
        out[layer] = {"p_value": p, "significant": bool(p < alpha), "mean": float(np.mean(mine)),
                      "std": float(np.std(mine)), "random_mean": float(np.mean(rand)), "random_std": float(np.std(rand)),
                      "scores": mine, "random_scores": rand}
    return out
