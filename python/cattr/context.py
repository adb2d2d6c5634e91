"""Context attribution for retrieval-augmented answers: which documents, or sentences, of a retrieved context an
answer is built on (cattr's library, the same as `cattr explain-context`).

    import cattr
    from cattr.context import ContextAttribution

    llm = cattr.load_llm("Qwen3-0.6B")
    ca = ContextAttribution(llm)
    res = ca.attribute("What colour is the sky?", ["The sky is green today. Birds fly low.", "The sea is blue."],
                       answer="The sky is green.", sources="sentences")
    for s in res.top(3):
        print(s.score, s.text)

Each source is scored by the answer's total log-probability with sources removed from the token sequence (not
masked), the unchanged prefix computed once: "loo" leaves one source out (its score: the log-probability it holds
up), "surrogate" is ContextCite's (random keep/drop masks, a Lasso fit; its score: the source's weight), "gradient"
gradient x activation summed over each source's tokens (one pass). The prompt is
the checkpoint's chat template around the documents and the question (ChatML, Llama 3, Mistral), or `template` with
"{context}" and "{question}". docs/CLI.md (`cattr explain-context`) describes the methods and the quality numbers.
"""
import ctypes
import math
import os
from typing import List, NamedTuple

from . import _lib
from ._lib import lib
from . import attr as A

__all__ = ["ContextAttribution", "ContextAttributionResult", "Source"]


class Source(NamedTuple):
    """One source: its document (index), its bytes [start, end) in that document's UTF-8 text, the text, the score."""

    document: int
    start: int
    end: int
    text: str
    score: float


class ContextAttributionResult:
    """The answer, its log-probability with the whole context, the sources in the prompt's order, and the quality
    numbers when asked (top_k_drop: {1, 3, 5: the log-probability drop with the top k sources removed}; lds: the
    surrogate's linear datamodeling score)."""

    def __init__(self, answer, answer_logprob, sources, top_k_drop, lds, ablations, held_out, seconds):
        self.answer = answer
        self.answer_logprob = answer_logprob
        self.sources = sources
        self.top_k_drop = top_k_drop
        self.lds = lds
        self.ablations = ablations
        self.held_out = held_out
        self.seconds = seconds

    def top(self, k=5):
        """The k sources of the highest score."""
        return sorted(self.sources, key=lambda s: -s.score)[:k]

    def __repr__(self):
        return "ContextAttributionResult(answer=%r, %d sources, top=%r)" % (
            self.answer, len(self.sources), [round(s.score, 4) for s in self.top(3)])


class ContextAttribution:
    """Context attribution over a checkpoint loaded by cattr (`cattr.load_llm(path)`, or its path)."""

    def __init__(self, llm):
        from .llm import LLM, load_llm

        self.llm = llm if isinstance(llm, LLM) else load_llm(os.fspath(llm))

    def attribute(self, question, contexts, answer=None, method="loo", sources="documents", samples=64,
                  keep_prob=0.5, alpha=0.01, seed=0, quality=False, template=None, separator="\n\n", max_new=64,
                  top_documents=3):
        """Scores the sources of `contexts` (a list of document texts) for the answer to `question` (given, or
        generated greedily up to max_new tokens). method: "loo", "surrogate" or "gradient" (gradient x activation
        at the embeddings summed over each source's tokens: one pass, a fast baseline) or "hierarchical"
        (AttriBoT: leave-one-out over the documents, then over the sentences of the top_documents best; the other
        documents stay whole sources); sources: "documents" or "sentences";
        samples, keep_prob, alpha, seed: the surrogate's masks and fit; quality: also the top-k drops (and the LDS).
        Returns a ContextAttributionResult."""
        if method not in ("loo", "surrogate", "gradient", "hierarchical"):
            raise _lib.ArgumentError("cattr: method must be 'loo', 'surrogate', 'gradient' or 'hierarchical', not %r"
                                     % (method,))
        if sources not in ("documents", "sentences"):
            raise _lib.ArgumentError("cattr: sources must be 'documents' or 'sentences', not %r" % (sources,))
        if isinstance(contexts, str) or not contexts:
            raise _lib.ArgumentError("cattr: contexts must be a non-empty list of document texts")
        docs = [c.encode("utf-8") for c in contexts]
        if template is not None:
            if "{context}" not in template or "{question}" not in template:
                raise _lib.ArgumentError("cattr: template must hold {context} and {question}")
            c, q = template.index("{context}"), template.index("{question}")
            if q < c:
                raise _lib.ArgumentError("cattr: template: {question} must come after {context}")
            prefix = template[:c].encode("utf-8")
            suffix = (template[c + 9:q] + question + template[q + 10:]).encode("utf-8")
        else:
            pre, post = ctypes.c_void_p(), ctypes.c_void_p()
            _lib.check(lib.cattr_llm_chat_frame(os.fsencode(self.llm.path), question.encode("utf-8"),
                                                ctypes.byref(pre), ctypes.byref(post)))
            try:
                prefix, suffix = ctypes.string_at(pre.value), ctypes.string_at(post.value)
            finally:
                _lib.c_free(pre.value)
                _lib.c_free(post.value)
        arr = (ctypes.c_char_p * len(docs))(*docs)
        r = _lib.ContextRequest()
        r.prefix, r.suffix, r.documents, r.n_documents = prefix, suffix, arr, len(docs)
        r.separator = separator.encode("utf-8")
        r.answer = answer.encode("utf-8") if answer is not None else None
        r.max_new = int(max_new)
        r.sentences = sources == "sentences"
        r.method = {"loo": 0, "surrogate": 1, "gradient": 2, "hierarchical": 3}[method]
        r.top_documents = int(top_documents)
        r.samples, r.keep_prob, r.alpha, r.seed, r.quality = int(samples), float(keep_prob), float(alpha), int(seed), \
            bool(quality)
        p = A._defaults("FeatureAblation")
        p.dtype = self.llm.dtype
        out = ctypes.POINTER(_lib.ContextResult)()
        self.llm._intr.run(lib.cattr_llm_explain_context, self.llm._h, ctypes.byref(p), ctypes.byref(r),
                           ctypes.byref(out))
        try:
            res = out.contents
            srcs: List[Source] = []
            for s in range(res.n_sources):
                d, a, b = res.document[s], res.start[s], res.end[s]
                srcs.append(Source(d, a, b, docs[d][a:b].decode("utf-8", "replace"), res.score[s]))
            drop = {k: res.top_k_drop[i] for i, k in enumerate((1, 3, 5))} if quality else None
            return ContextAttributionResult(
                ctypes.string_at(res.answer).decode("utf-8", "replace"), res.answer_logprob, srcs, drop,
                None if math.isnan(res.lds) else res.lds, res.ablations, res.held_out,
                {"generation": res.seconds_generation, "ablations": res.seconds_ablations})
        finally:
            lib.cattr_context_result_free(out)
