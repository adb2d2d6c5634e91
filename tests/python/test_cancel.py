"""Ctrl-C lands within a chunk of work, not only between chunks (issue 30): the executor reads the call's cancel flag
before each node of a pass and, about every 0.1 s, calls the progress callback, so that CPython runs the package's
SIGINT handler (which sets the flag) while one long chunk runs."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import cattr
from cattr import attr as A
from cattr.llm import LLMAttribution, LLMGradientAttribution, TextTokenInput

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIGITS = os.path.join(ROOT, "models", "digits", "digits.onnx")
TINY = os.path.join(ROOT, "tests", "data", "llm", "tiny")
STEPS = 100
LATENCY = 2.5  # seconds from the signal to KeyboardInterrupt, generous for a loaded two-core machine (the code
# before the beats took 5.5 to 8 s)


def _main_thread_only():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")


def _interrupt_after(delay, fn):
    """Runs fn() in the main thread with SIGINT sent to it after `delay` seconds; returns the seconds from the
    signal to the KeyboardInterrupt (fails if fn returns)."""
    sent = []

    def fire():
        sent.append(time.monotonic())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            fn()
        caught = time.monotonic()
    finally:
        timer.cancel()
        timer.join()
    assert sent, "the call was interrupted before the signal was sent"
    return caught - sent[0]


def _ig_one_chunk(ig, x, steps=STEPS):
    # internal_batch_size: every step of every example in one chunk, so that the call is one long chunk
    return ig.attribute(x, target=3, n_steps=steps, internal_batch_size=x.shape[0] * steps)


def test_ctrl_c_lands_within_a_long_chunk():
    _main_thread_only()
    m = cattr.load(DIGITS)
    ig = A.IntegratedGradients(m)
    rng = np.random.default_rng(0)
    # size the chunk to take about 8 s (4000 examples, then more steps: at most 1,600,000 rows, an 8 GB arena of
    # which a cancelled call touches little): time 100 examples (planned first: a plan is made per shape), in one
    # chunk too, and scale (the time is linear in the rows); the chunk must outlast the signal's delay and the
    # allowed latency by a second, so that an uncancellable chunk would fail
    small = rng.uniform(size=(100, 1, 8, 8)).astype(np.float32)
    _ig_one_chunk(ig, small)
    t = time.monotonic()
    _ig_one_chunk(ig, small)
    per_100 = time.monotonic() - t
    want = int(max(1000, np.ceil(100 * 8.0 / max(per_100, 1e-3))))  # examples at STEPS steps for 8 s
    n = min(4000, want)
    steps = STEPS * min(4, int(np.ceil(want / n)))
    expected = per_100 * n / 100 * steps / STEPS
    assert expected > 0.3 + LATENCY + 1.0, ("the chunk is too quick to tell (%.1f s estimated for %d examples, %d "
                                            "steps)" % (expected, n, steps))
    x = rng.uniform(size=(n, 1, 8, 8)).astype(np.float32)
    latency = _interrupt_after(0.3, lambda: _ig_one_chunk(ig, x, steps))
    assert latency < LATENCY, ("KeyboardInterrupt %.2f s after SIGINT, during one chunk of about %.1f s"
                               % (latency, expected))
    # the explainer works after the cancelled call, with the results of a fresh one
    a = ig.attribute(small[:3], target=3, n_steps=8)
    b = A.IntegratedGradients(m).attribute(small[:3], target=3, n_steps=8)
    np.testing.assert_array_equal(a, b)
    # and a call that is not interrupted is not disturbed by the beats
    np.testing.assert_array_equal(_ig_one_chunk(ig, small[:10]), _ig_one_chunk(A.IntegratedGradients(m), small[:10]))


@pytest.mark.parametrize("method", ["LayerIntegratedGradients", "ShapleyValueSampling", "FeatureAblation"])
def test_ctrl_c_reaches_the_language_model_paths(method):
    """The language-model paths pass the cancel flag to their explainers and watch their own forward passes."""
    _main_thread_only()
    llm = cattr.load_llm(TINY)
    tok = llm.tokenizer
    ids = tok.encode("The capital of France is a city of many things and more " * 2)
    inp = TextTokenInput(ids, tok)
    if method == "LayerIntegratedGradients":
        obj = LLMGradientAttribution(A.LayerIntegratedGradients(llm, "model.embed_tokens"), tok)
        kw = dict(target=[5, 6], n_steps=4000, internal_batch_size=2000)
    elif method == "ShapleyValueSampling":
        obj = LLMAttribution(A.ShapleyValueSampling(llm), tok)
        kw = dict(target=[5, 6], n_samples=400, perturbations_per_eval=200)
    else:
        obj = LLMAttribution(A.FeatureAblation(llm), tok)
        kw = dict(target=[5] * 40)  # 82 + 40 tokens: within the context of 128
    latency = _interrupt_after(0.3, lambda: obj.attribute(inp, **kw))
    assert latency < LATENCY, "%s: KeyboardInterrupt %.2f s after SIGINT" % (method, latency)
    # the checkpoint still attributes
    r = obj.attribute(TextTokenInput(ids[:4], tok), target=[5])
    assert np.isfinite(r.seq_attr).all()


def _beats_of_a_two_chunk_call(monkeypatch):
    """The progress calls (time, done, total) of an IntegratedGradients call in two chunks with a cancel flag (as every
    call of the package has), and the call's duration."""
    from cattr import _lib

    calls = []
    # every call's progress callback (Interruptible.install makes one per explainer, calling this method)
    monkeypatch.setattr(_lib.Interruptible, "_progress",
                        lambda self, done, total, user: calls.append((time.monotonic(), done, total)))
    m = cattr.load(DIGITS)
    ig = A.IntegratedGradients(m)
    x = np.random.default_rng(1).uniform(size=(300, 1, 8, 8)).astype(np.float32)
    ibs = x.shape[0] * STEPS // 2  # two chunks
    ig.attribute(x, target=3, n_steps=STEPS, internal_batch_size=ibs)  # plans made outside the timed call
    time.sleep(0.3)  # a pause between calls: the beats' period starts anew with the next call
    del calls[:]
    t0 = time.monotonic()
    a = ig.attribute(x, target=3, n_steps=STEPS, internal_batch_size=ibs)
    elapsed = time.monotonic() - t0
    monkeypatch.undo()
    # the beats change nothing in the results
    np.testing.assert_array_equal(a, A.IntegratedGradients(m).attribute(x, target=3, n_steps=STEPS,
                                                                         internal_batch_size=ibs))
    return calls, t0, elapsed


def test_beats_during_a_chunk(monkeypatch):
    """While a call with a cancel flag runs, the progress callback is also called between the nodes of its passes,
    about every 0.1 s (what lets Python run its SIGINT handler during a chunk)."""
    calls, t0, elapsed = _beats_of_a_two_chunk_call(monkeypatch)
    assert calls and calls[-1][1:] == (STEPS, STEPS)
    chunks = [c for c in calls if c[1] > 0 and c[1:] not in [d[1:] for d in calls[:calls.index(c)]]]
    assert [c[1] for c in chunks] == [STEPS // 2, STEPS], calls
    beats = [c for c in calls if c not in chunks]
    if elapsed > 0.5:
        assert beats, "no beat in a call of %.2f s: %s" % (elapsed, calls)
    # at most one call per period (the coarse clock ticks in milliseconds), none at the start of the call
    assert len(beats) <= elapsed / 0.09 + 1, (elapsed, calls)
    assert calls[0] in chunks or calls[0][0] - t0 >= 0.08, (t0, calls)
    # never counts ahead of the work: 0 of 0 or those of a finished chunk
    for c in beats:
        assert c[1:] == (0, 0) or any(d[1:] == c[1:] and d[0] <= c[0] for d in chunks), calls


def test_beats_repeat_the_last_counts(monkeypatch):
    calls, _, _ = _beats_of_a_two_chunk_call(monkeypatch)
    last = (0, 0)
    for _, d, t in calls:  # each call reports a chunk's new counts or repeats the last ones
        assert (d, t) == last or d > last[0], calls
        last = (d, t)
