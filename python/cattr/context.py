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
    """One source: its document (index), its bytes [start, end) in that document's UTF-8 text, the text, the score;
    with per_token its score for each answer token; for the proxy method whether this model rescored it (else the
    proxy's score stands)."""

    document: int
    start: int
    end: int
    text: str
    score: float
    token_scores: tuple = None
    rescored: bool = True


class ContextAttributionResult:
    """The answer, its log-probability with the whole context, the sources in the prompt's order, and the quality
    numbers when asked (top_k_drop: {1, 3, 5: the log-probability drop with the top k sources removed}; lds: the
    linear datamodeling score over 32 held-out random masks); ranking: the sources' indices, best first; ablation_rows (loo and
    surrogate): (kept, log-probability) per scored ablation, row 0 the whole context, then one per source (loo) or
    the random masks (surrogate), then the held-out ones (quality)."""

    def __init__(self, answer, answer_logprob, sources, top_k_drop, lds, ablations, held_out, seconds,
                 ranking=None, answer_tokens=None, proxy_ablations=0, ablation_rows=None):
        self.answer = answer
        self.ranking = ranking if ranking is not None else sorted(range(len(sources)), key=lambda i: -sources[i].score)
        self.answer_tokens = answer_tokens
        self.proxy_ablations = proxy_ablations
        self.ablation_rows = ablation_rows or []
        self.answer_logprob = answer_logprob
        self.sources = sources
        self.top_k_drop = top_k_drop
        self.lds = lds
        self.ablations = ablations
        self.held_out = held_out
        self.seconds = seconds

    def top(self, k=5):
        """The k first sources of the ranking: by score (for the proxy method the rescored ones first)."""
        return [self.sources[i] for i in self.ranking[:k]]

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
                  top_documents=3, per_token=False, proxy=None, proxy_top=0):
        """Scores the sources of `contexts` (a list of document texts) for the answer to `question` (given, or
        generated greedily up to max_new tokens). method: "loo", "surrogate" or "gradient" (gradient x activation
        at the embeddings summed over each source's tokens: one pass, a fast baseline) or "hierarchical"
        (AttriBoT: leave-one-out over the documents, then over the pieces of the top_documents best; the other
        documents stay whole sources) or "proxy" (AttriBoT: leave-one-out with `proxy`, a smaller checkpoint of
        the same tokenizer (an LLM or its path), over every source, then with this model over the proxy_top best;
        0: 5 or a fifth of the sources, the larger); sources: "documents", "sentences", "lines", or a list with one
        entry per document of (start, end) character spans or of strings that spell it (the text around spans forms
        sources of its own); samples, keep_prob, alpha, seed: the surrogate's masks and fit; quality: also the
        top-k drops (and the LDS); per_token: also each source's score per answer token (Source.token_scores,
        result.answer_tokens). Returns a ContextAttributionResult."""
        methods = ("loo", "surrogate", "gradient", "hierarchical", "proxy")
        if method not in methods:
            raise _lib.ArgumentError("cattr: method must be 'loo', 'surrogate', 'gradient', 'hierarchical' or 'proxy', "
                                     "not %r" % (method,))
        if isinstance(contexts, str) or not contexts:
            raise _lib.ArgumentError("cattr: contexts must be a non-empty list of document texts")
        kinds = ("documents", "sentences", "lines")
        spans = None
        if isinstance(sources, str):
            if sources not in kinds:
                raise _lib.ArgumentError("cattr: sources must be 'documents', 'sentences', 'lines' or a list of spans "
                                         "per document, not %r" % (sources,))
        else:
            spans = _byte_spans(contexts, sources)
        if (method == "proxy") != (proxy is not None):
            raise _lib.ArgumentError("cattr: method='proxy' goes with proxy= (a smaller checkpoint of the same "
                                     "tokenizer), and proxy= with method='proxy'")
        if proxy is not None:
            from .llm import LLM, load_llm

            proxy = proxy if isinstance(proxy, LLM) else load_llm(os.fspath(proxy))
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
        r.sources = 3 if spans is not None else kinds.index(sources)
        if spans is not None:
            flat = (ctypes.c_int64 * max(1, len(spans)))(*spans)
            r.spans, r.n_spans = flat, len(spans) // 3
        r.method = methods.index(method)
        r.per_token = bool(per_token)
        if proxy is not None:
            r.proxy, r.proxy_top = proxy._h, int(proxy_top)
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
            n = res.n_answer
            for s in range(res.n_sources):
                d, a, b = res.document[s], res.start[s], res.end[s]
                ts = tuple(res.token_score[s * n + q] for q in range(n)) if res.token_score else None
                srcs.append(Source(d, a, b, docs[d][a:b].decode("utf-8", "replace"), res.score[s], ts,
                                   bool(res.rescored[s]) if res.rescored else True))
            drop = {k: res.top_k_drop[i] for i, k in enumerate((1, 3, 5))} if quality else None
            order = (ctypes.c_int64 * max(1, res.n_sources))()
            _lib.check(lib.cattr_context_rank(out, order))
            toks = [self.llm.tokenizer.decode([res.answer_ids[q]]) for q in range(n)] if per_token else None
            seconds = {"generation": res.seconds_generation, "ablations": res.seconds_ablations,
                       "quality": res.seconds_quality}
            if res.rescored:
                seconds["proxy"] = res.seconds_proxy
            return ContextAttributionResult(
                ctypes.string_at(res.answer).decode("utf-8", "replace"), res.answer_logprob, srcs, drop,
                None if math.isnan(res.lds) else res.lds, res.ablations, res.held_out, seconds,
                list(order[:res.n_sources]), toks, res.proxy_ablations,
                [([res.masks[r * res.n_sources + k] != 0 for k in range(res.n_sources)], res.row_logprob[r])
                 for r in range(res.n_rows)])
        finally:
            lib.cattr_context_result_free(out)


def _byte_spans(contexts, sources):
    """A list with one entry per document of (start, end) character spans or of strings that spell the document, as
    (document, start byte, end byte) triples, flat."""
    if not isinstance(sources, (list, tuple)) or len(sources) != len(contexts):
        raise _lib.ArgumentError("cattr: sources as spans must be a list with one entry per document (%d), each a "
                                 "list of (start, end) character spans or of strings that spell it" % len(contexts))
    out = []
    for d, (text, entry) in enumerate(zip(contexts, sources)):
        entry = list(entry)
        if entry and all(isinstance(e, str) for e in entry):
            if "".join(entry) != text or not all(entry):
                raise _lib.ArgumentError("cattr: sources[%d]: the strings must be non-empty and spell document %d"
                                         % (d, d))
            at = 0
            for e in entry:
                n = len(e.encode("utf-8"))
                out += [d, at, at + n]
                at += n
            continue
        last = 0
        for e in entry:
            if isinstance(e, str) or len(e) != 2:
                raise _lib.ArgumentError("cattr: sources[%d]: give either strings or (start, end) spans" % d)
            a, b = int(e[0]), int(e[1])
            if not (0 <= a < b <= len(text)) or a < last:
                raise _lib.ArgumentError("cattr: sources[%d]: span (%d, %d) is not within the document's %d "
                                         "characters, in order, with start < end" % (d, a, b, len(text)))
            last = b
            out += [d, len(text[:a].encode("utf-8")), len(text[:b].encode("utf-8"))]
    return out
