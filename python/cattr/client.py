"""A client of `cattr serve` (docs/serve.md): KServe V1 requests over HTTP with the standard library only.

    from cattr.client import Client
    c = Client("http://127.0.0.1:8080")
    c.models()                                   # ["digits"]
    c.predict("digits", x)                       # the model's outputs, a numpy array [instances, ...]
    r = c.explain("digits", x, method="integrated-gradients", target=3, n_steps=50)
    r["attributions"][0]                         # a numpy array, as `cattr explain`'s JSON holds it

Errors come back as cattr.client.ServeError with the server's message, its HTTP status and the CLI's exit code.
"""
import json
import urllib.error
import urllib.request

import numpy as np

__all__ = ["Client", "ServeError"]


class ServeError(RuntimeError):
    """An answer other than 200: .status (HTTP), .code (cattr's exit code), .kind, .retry_after (seconds or None)"""

    def __init__(self, status, message, code=None, kind=None, retry_after=None):
        super().__init__("HTTP %d: %s" % (status, message))
        self.status, self.message, self.code, self.kind, self.retry_after = status, message, code, kind, retry_after


def _instances(x):
    if isinstance(x, dict):  # a value per input name, the instances along their first dim
        arrs = {k: np.asarray(v) for k, v in x.items()}
        n = {a.shape[0] for a in arrs.values()}
        if len(n) != 1:
            raise ValueError("every input needs the same number of instances: %s" % {k: a.shape for k, a in arrs.items()})
        return [{k: a[i].tolist() for k, a in arrs.items()} for i in range(n.pop())]
    return np.asarray(x, dtype=np.float64).tolist()


class Client:
    """`url` of the server (http://host:port); `token` for a server started with --token-file; `timeout` seconds"""

    def __init__(self, url, token=None, timeout=600):
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        r = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            r.add_header("Content-Type", "application/json")
        if self.token:
            r.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(r, timeout=self.timeout) as resp:
                text = resp.read().decode()
                return json.loads(text) if resp.headers.get_content_type() == "application/json" else text
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                j = json.loads(text)
            except ValueError:
                j = {"error": text}
            ra = e.headers.get("Retry-After")
            raise ServeError(e.code, j.get("error", text), j.get("code"), j.get("kind"),
                             int(ra) if ra and ra.isdigit() else None) from None

    def health(self):
        return self._call("GET", "/health")

    def models(self):
        return self._call("GET", "/v1/models")["models"]

    def model(self, name):
        return self._call("GET", "/v1/models/" + name)

    def metrics(self):
        return self._call("GET", "/metrics")

    def predict(self, name, x):
        """the model's outputs for x (an array [instances, ...], or a dict of them by input name)"""
        return np.asarray(self._call("POST", "/v1/models/%s:predict" % name, {"instances": _instances(x)})["predictions"])

    def explain(self, name, x, method="integrated-gradients", **options):
        """`cattr explain`'s JSON for x, its attributions and convergence delta as numpy arrays. The options are the
        server's explanation fields (Captum's names: target, n_steps, baselines, ...; docs/serve.md)."""
        ex = dict(options, method=method)
        if "target" in ex and not isinstance(ex["target"], int) and ex["target"] is not None:
            ex["target"] = np.asarray(ex["target"]).tolist()
        for k in ("baselines", "feature_mask"):  # arrays (a one-input model's) as nested lists
            if k in ex and not isinstance(ex[k], (int, float)) and ex[k] is not None:
                ex[k] = np.asarray(ex[k]).tolist()
        r = self._call("POST", "/v1/models/%s:explain" % name, {"instances": _instances(x), "explanation": ex})
        r["attributions"] = [np.asarray(a["data"], dtype=np.float64).reshape(a["shape"]) for a in r["attributions"]]
        if r.get("convergence_delta"):
            d = r["convergence_delta"]
            r["convergence_delta"] = np.asarray(d["data"], dtype=np.float64).reshape(d["shape"])
        return r

    # ---- language-model checkpoints (`--model NAME=DIR`) ----

    def explain_llm(self, name, prompt, target=None, method="layer-ig", **options):
        """explain-llm's record for one request (corpus mode's fields: steps, n_samples, segments, max_new_tokens,
        ...): input_tokens, seq_attr, token_attr, target_logprobs, ... (without a target, the generated one's)"""
        rq = dict(options, prompt=prompt, method=method)
        if target is not None:
            rq["target"] = target
        return self._call("POST", "/v1/models/%s:explain" % name, rq)

    def explain_context(self, name, question, contexts, answer=None, method="loo", **options):
        """explain-context's record: which of the contexts (texts) the answer (or the generated one) rests on; the
        options are explain-context's (sources, samples, seed, quality, template, ...)"""
        rq = dict(options, question=question, contexts=list(contexts), method=method)
        if answer is not None:
            rq["answer"] = answer
        return self._call("POST", "/v1/models/%s:explain" % name, rq)

    def generate(self, name, prompts, max_new_tokens=16):
        """each prompt's greedy continuation: [{"text", "token_ids"}, ...] (one prompt: its dict)"""
        one = isinstance(prompts, str)
        r = self._call("POST", "/v1/models/%s:predict" % name,
                       {"instances": [prompts] if one else list(prompts), "max_new_tokens": max_new_tokens})
        return r["predictions"][0] if one else r["predictions"]
