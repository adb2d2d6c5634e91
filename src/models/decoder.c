/* decoder.c - builds the graph of a decoder-only transformer (see decoder.h and shared/golden/llm/README.md 1, 6):
 * embeddings -> layers of [RMSNorm, q/k/v projections (+bias), q/k RMSNorm (qwen3), RoPE, causal grouped-query
 * attention, o projection, residual, RMSNorm, SiLU-gated MLP, residual] -> final RMSNorm -> LM head. */
#include "models/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cg_graph *g;
    const cg_graph *src; /* borrow the weights from this graph (else load them from w) */
    cx_hf_weights *w;
    cattr_status st;
    char name[256];
} builder;

/* A weight as a graph constant, checked against the expected shape. -1 on error (b->st set). */
static int weight(builder *b, const char *name, int nd, int64_t d0, int64_t d1) {
    if (b->st != CATTR_OK) return -1;
    if (b->src) {
        int sv = cg_find_value(b->src, name);
        if (sv < 0 || !b->src->vals[sv].data) {
            b->st = cx_fail(CATTR_ERR_INTERNAL, "no weight '%s' in the base graph", name);
            return -1;
        }
        int v = cg_add_const(b->g, name, (cattr_tensor *)b->src->vals[sv].data, false);
        if (v < 0) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        return v;
    }
    int64_t sh[2] = {d0, d1};
    cattr_tensor *t = NULL;
    /* matrices as the checkpoint stores them (bfloat16 / float16, mapped: the kernels widen them exactly as they
     * read them); vectors (norms, biases) as float32 copies */
    b->st = nd == 2 ? cx_hf_weight_stored(b->w, name, nd, sh, &t) : cx_hf_weight(b->w, name, CATTR_FLOAT32, nd, sh, &t);
    if (b->st != CATTR_OK) return -1;
    int v = cg_add_const(b->g, name, t, true);
    if (v < 0) {
        cattr_tensor_free(t);
        b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    return v;
}

static int node(builder *b, cg_op op, const char *name, const int *in, int n, const cg_attrs *a) {
    if (b->st != CATTR_OK) return -1;
    for (int i = 0; i < n; i++)
        if (in[i] < 0) { /* an input that could not be added (cg_add_input, cg_add_const fail only for memory) */
            b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory building the model");
            return -1;
        }
    int v = cg_add_node(b->g, op, name, in, n, a, name);
    if (v < 0) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    return v;
}

#define NODE(op, a, nm, ...) node(b, op, nm, (const int[]){__VA_ARGS__}, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), a)

/* y = x W^T (+ bias) over the last dim */
static int linear(builder *b, int x, const char *wname, int64_t out, int64_t in, bool bias, const char *name) {
    cg_attrs a = cg_attrs_default();
    a.trans_b = 1;
    int w = weight(b, wname, 2, out, in);
    char nm[300];
    snprintf(nm, sizeof nm, "%s/MatMul", name);
    int y = NODE(CG_MATMUL, &a, bias ? nm : name, x, w);
    if (!bias) return y;
    char bn[300];
    snprintf(bn, sizeof bn, "%.*s.bias", (int)(strlen(wname) - strlen(".weight")), wname);
    int bv = weight(b, bn, 1, out, 0);
    return NODE(CG_ADD, NULL, name, y, bv);
}

static int rmsnorm(builder *b, int x, const char *wname, int64_t dim, double eps, const char *name) {
    cg_attrs a = cg_attrs_default();
    a.alpha = eps;
    int w = weight(b, wname, 1, dim, 0);
    return NODE(CG_RMSNORM, &a, name, x, w);
}

/* v [S, L, C] at the scored position of each row, [S, 1, C]: positions[s] (the "positions" input, made on first
 * use into *pos) or the last position. Logits are computed where they are scored. */
static int scored(builder *b, const cx_decoder_opts *opts, int v, const char *name, int *pos, int last_idx) {
    if (b->st != CATTR_OK) return -1;
    if (last_idx >= 0) { /* ragged: the last token of every segment, [1, S, C] */
        cg_attrs ga = cg_attrs_default();
        ga.axis = 1;
        return NODE(CG_GATHER, &ga, name, v, last_idx);
    }
    if (opts->pos_input || opts->presence || opts->scores) {
        if (*pos < 0 && (*pos = cg_add_input(b->g, "positions")) < 0) {
            b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            return -1;
        }
        return NODE(CG_SEQ_PICK, NULL, name, v, *pos);
    }
    cg_attrs sa = cg_attrs_default();
    sa.n_ints = 4;
    sa.ints[0] = -1;
    sa.ints[1] = INT64_MAX;
    sa.ints[2] = -2;
    sa.ints[3] = 1;
    return NODE(CG_SLICE, &sa, name, v);
}

/* The layers, final norm and head into b->g; with `ragged`, the ragged prefix-continuing form (see
 * cx_decoder_build_cached). */
static void build_body(builder *b, const cx_hf_config *cfgp, const cx_decoder_opts *opts, bool ragged) {
    const cx_hf_config cfg = *cfgp;
    const int64_t H = cfg.hidden_size, nh = cfg.num_attention_heads, nkv = cfg.num_key_value_heads;
    const int64_t d = cfg.head_dim, I = cfg.intermediate_size, V = cfg.vocab_size;
    int x = -1, E = -1;
    if (b->st == CATTR_OK) {
        E = weight(b, "model.embed_tokens.weight", 2, V, H);
        if (opts->presence && !opts->scores) {
            int p = cg_add_input(b->g, "presence"), ids = cg_add_input(b->g, "input_ids");
            int bids = cg_add_input(b->g, "baseline_ids"), ctx = opts->context ? cg_add_input(b->g, "context_ids") : -2;
            cattr_tensor *one = cx_tensor_alloc(CATTR_FLOAT32, 0, NULL);
            int onev = one ? cg_add_const(b->g, "presence.one", one, true) : -1;
            if (one && onev < 0) cattr_tensor_free(one);
            if (p < 0 || ids < 0 || bids < 0 || ctx == -1 || onev < 0) {
                b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            } else {
                *(float *)one->data = 1.0f;
                cg_attrs ga = cg_attrs_default(), ua = cg_attrs_default();
                ua.n_ints = 1;
                ua.ints[0] = 2;
                int pu = NODE(CG_UNSQUEEZE, &ua, "presence.keep", p);
                int qu = NODE(CG_SUB, NULL, "presence.replace", onev, pu);
                int a = NODE(CG_GATHER, &ga, "presence.tokens", E, ids);
                int bb = NODE(CG_GATHER, &ga, "presence.baselines", E, bids);
                /* p * a + (1 - p) * b: exactly a or b for p in {0, 1} */
                int emb = NODE(CG_ADD, NULL, ctx >= 0 ? "presence.embed" : "hidden.embed",
                               NODE(CG_MUL, NULL, "presence.kept", pu, a), NODE(CG_MUL, NULL, "presence.replaced", qu, bb));
                if (ctx >= 0) {
                    cg_attrs ca = cg_attrs_default();
                    ca.axis = 1;
                    x = NODE(CG_CONCAT, &ca, "hidden.embed", emb, NODE(CG_GATHER, &ga, "context.embed", E, ctx));
                } else {
                    x = emb;
                }
            }
        } else if (opts->ids_input && !opts->scores) {
            int ids = cg_add_input(b->g, "input_ids");
            cg_attrs a = cg_attrs_default();
            x = NODE(CG_GATHER, &a, "hidden.embed", E, ids);
        } else {
            int in = cg_add_input(b->g, "inputs_embeds");
            x = NODE(CG_IDENTITY, NULL, "hidden.embed", in);
        }
    }
    /* RoPE table input: inverse frequencies as a constant */
    int invv = -1;
    if (b->st == CATTR_OK) {
        int64_t half = d / 2;
        cattr_tensor *t = cx_tensor_alloc(CATTR_FLOAT64, 1, &half);
        if (!t) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else {
            cx_hf_rope_inv_freq(&cfg, t->data);
            invv = cg_add_const(b->g, "rope.inv_freq", t, true);
            if (invv < 0) {
                cattr_tensor_free(t);
                b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            }
        }
    }
    char n1[256], n2[256];
    int pos = -1; /* the "positions" input (opts->pos_input) */
    int tok_pos = -1, segs = -1, last_idx = -1; /* ragged: per-token positions, segments, last token of each */
    if (ragged && b->st == CATTR_OK) {
        tok_pos = cg_add_input(b->g, "tok_pos");
        segs = cg_add_input(b->g, "segs");
        last_idx = cg_add_input(b->g, "last_idx");
        if (tok_pos < 0 || segs < 0 || last_idx < 0) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t l = 0; l < cfg.num_hidden_layers && b->st == CATTR_OK; l++) {
#define W(s) (snprintf(n1, sizeof n1, "model.layers.%lld." s, (long long)l), n1)
#define N(s) (snprintf(n2, sizeof n2, "model.layers.%lld." s, (long long)l), n2)
        int pk = -1, pv = -1;
        if (ragged) {
            char pn[64];
            snprintf(pn, sizeof pn, "past.%lld.k", (long long)l);
            pk = cg_add_input(b->g, pn);
            snprintf(pn, sizeof pn, "past.%lld.v", (long long)l);
            pv = cg_add_input(b->g, pn);
            if (pk < 0 || pv < 0) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        int h = rmsnorm(b, x, W("input_layernorm.weight"), H, cfg.rms_norm_eps, N("input_layernorm"));
        int q = linear(b, h, W("self_attn.q_proj.weight"), nh * d, H, cfg.qkv_bias, N("self_attn.q_proj"));
        int k = linear(b, h, W("self_attn.k_proj.weight"), nkv * d, H, cfg.qkv_bias, N("self_attn.k_proj"));
        int v = linear(b, h, W("self_attn.v_proj.weight"), nkv * d, H, cfg.qkv_bias, N("self_attn.v_proj"));
        if (cfg.qk_norm) {
            q = rmsnorm(b, q, W("self_attn.q_norm.weight"), d, cfg.rms_norm_eps, N("self_attn.q_norm"));
            k = rmsnorm(b, k, W("self_attn.k_norm.weight"), d, cfg.rms_norm_eps, N("self_attn.k_norm"));
        }
        cg_attrs ra = cg_attrs_default();
        ra.n_ints = 1;
        ra.ints[0] = d;
        if (ragged) { /* every token at its own position */
            q = NODE(CG_ROPE, &ra, N("self_attn.q_rope"), q, invv, tok_pos);
            k = NODE(CG_ROPE, &ra, N("self_attn.k_rope"), k, invv, tok_pos);
        } else {
            q = NODE(CG_ROPE, &ra, N("self_attn.q_rope"), q, invv);
            k = NODE(CG_ROPE, &ra, N("self_attn.k_rope"), k, invv);
        }
        cg_attrs aa = cg_attrs_default();
        aa.n_ints = 3;
        aa.ints[0] = nh;
        aa.ints[1] = nkv;
        aa.ints[2] = d;
        int att = ragged ? NODE(CG_ATTENTION, &aa, N("self_attn.attention"), q, k, v, pk, pv, segs)
                         : NODE(CG_ATTENTION, &aa, N("self_attn.attention"), q, k, v);
        if (!opts->all_logits && l == cfg.num_hidden_layers - 1) {
            /* only the scored position matters after the last attention: the rest of the last layer, the final norm
             * and the head run at that position alone */
            att = scored(b, opts, att, N("self_attn.scored"), &pos, last_idx);
            x = scored(b, opts, x, N("residual_scored"), &pos, last_idx);
        }
        int o = linear(b, att, W("self_attn.o_proj.weight"), H, nh * d, cfg.o_bias, N("self_attn.o_proj"));
        x = NODE(CG_ADD, NULL, N("residual_attn"), x, o);
        int h2 = rmsnorm(b, x, W("post_attention_layernorm.weight"), H, cfg.rms_norm_eps, N("post_attention_layernorm"));
        int gate = linear(b, h2, W("mlp.gate_proj.weight"), I, H, cfg.mlp_bias, N("mlp.gate_proj"));
        int up = linear(b, h2, W("mlp.up_proj.weight"), I, H, cfg.mlp_bias, N("mlp.up_proj"));
        int prod = NODE(CG_SWIGLU, NULL, N("mlp.gated"), gate, up); /* act_fn(gate) * up */
        int down = linear(b, prod, W("mlp.down_proj.weight"), H, I, cfg.mlp_bias, N("mlp.down_proj"));
        char hn[64];
        snprintf(hn, sizeof hn, "hidden.layer%lld", (long long)l);
        x = NODE(CG_ADD, NULL, hn, x, down);
#undef W
#undef N
    }
    x = rmsnorm(b, x, "model.norm.weight", H, cfg.rms_norm_eps, "hidden.final_norm");
    int head = E;
    if (b->st == CATTR_OK && !cfg.tie_word_embeddings) head = weight(b, "lm_head.weight", 2, V, H);
    if (b->st == CATTR_OK) {
        cg_attrs ma = cg_attrs_default();
        ma.trans_b = 1;
        ma.keep_precision = 1; /* the output head stays at full precision under precision "high" */
        int y;
        bool tail = opts->presence || opts->scores; /* the scored tokens and their sum */
        if (opts->all_logits && !tail) {
            y = NODE(CG_MATMUL, &ma, "logits", x, head);
        } else {
            int last = cfg.num_hidden_layers > 0 ? x : scored(b, opts, x, "last_position", &pos, last_idx);
            int lg = NODE(CG_MATMUL, &ma, "logits", last, head);
            y = NODE(CG_LOGSOFTMAX, NULL, "logprobs", lg);
        }
        if (tail && b->st == CATTR_OK) { /* [S, P, V] -> the scored tokens [S, P], their sum first */
            int si = cg_add_input(b->g, "score_index");
            if (si < 0) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            cg_attrs r3 = cg_attrs_default(), r2 = cg_attrs_default(), sa = cg_attrs_default(), ca = cg_attrs_default();
            r3.n_ints = 3;
            r3.ints[0] = 0;
            r3.ints[1] = -1;
            r3.ints[2] = 1;
            r2.n_ints = 2;
            r2.ints[0] = 0;
            r2.ints[1] = -1;
            sa.n_ints = 4; /* [:, 0:1] */
            sa.ints[0] = 0;
            sa.ints[1] = 1;
            sa.ints[2] = 1;
            sa.ints[3] = 1;
            ca.axis = 1;
            int flat = NODE(CG_RESHAPE, &r3, "score.flat", y);
            int picked = NODE(CG_RESHAPE, &r2, "score.tokens", NODE(CG_SEQ_PICK, NULL, "score.pick", flat, si));
            int total = NODE(CG_REDUCE_SUM_LIKE, NULL, "score.total", picked, NODE(CG_SLICE, &sa, "score.first", picked));
            y = NODE(CG_CONCAT, &ca, "scores", total, picked);
        }
        if (b->st == CATTR_OK && cg_add_output(b->g, y) != 0) b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
}

cattr_status cx_decoder_build_cached(const cg_graph *base, const cx_hf_config *cfg, cg_graph **out) {
    *out = NULL;
    builder bb = {cg_new(), base, NULL, CATTR_OK, ""};
    if (!bb.g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_decoder_opts o = {.ids_input = false, .all_logits = false, .pos_input = false};
    build_body(&bb, cfg, &o, true);
    if (bb.st != CATTR_OK) {
        cg_free(bb.g);
        return bb.st;
    }
    *out = bb.g;
    return CATTR_OK;
}

static cattr_model *wrap_model(cg_graph *g, const char *path, const cx_decoder_opts *opts, int64_t H) {
    int n_in = g->n_inputs;
    cattr_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->in_ndim = calloc((size_t)n_in, sizeof *m->in_ndim);
    m->in_shape = calloc((size_t)n_in, sizeof *m->in_shape);
    m->in_dtype = calloc((size_t)n_in, sizeof *m->in_dtype);
    m->path = cx_strdup(path);
    if (!m->in_ndim || !m->in_shape || !m->in_dtype || !m->path) {
        cattr_model_free(m);
        return NULL;
    }
    m->g = g;
    m->opset = 0;
    m->in_ndim[0] = opts->ids_input ? 2 : 3;
    m->in_shape[0][0] = -1;
    m->in_shape[0][1] = -1;
    m->in_shape[0][2] = H;
    m->in_dtype[0] = opts->ids_input ? CATTR_INT64 : CATTR_FLOAT32;
    if (opts->scores) { /* inputs_embeds [S, T, hidden] float, then positions and score indices int64 [S, P] */
        m->in_ndim[0] = 3;
        m->in_dtype[0] = CATTR_FLOAT32;
        for (int i = 1; i < n_in; i++) {
            m->in_ndim[i] = 2;
            m->in_shape[i][0] = m->in_shape[i][1] = -1;
            m->in_dtype[i] = CATTR_INT64;
        }
        return m;
    }
    if (opts->pos_input && !opts->presence) {
        m->in_ndim[1] = 1;
        m->in_shape[1][0] = -1;
        m->in_dtype[1] = CATTR_INT64;
    }
    if (opts->presence) /* presence [S, T] float, then int64 [S, *] ids, positions and score indices */
        for (int i = 0; i < n_in; i++) {
            m->in_ndim[i] = 2;
            m->in_shape[i][0] = m->in_shape[i][1] = -1;
            m->in_dtype[i] = i == 0 ? CATTR_FLOAT32 : CATTR_INT64;
        }
    return m;
}

cattr_status cx_decoder_rebuild(const cattr_model *base, const cx_hf_config *cfg, const cx_decoder_opts *opts,
                                cattr_model **out) {
    *out = NULL;
    builder bb = {cg_new(), base->g, NULL, CATTR_OK, ""};
    if (!bb.g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    build_body(&bb, cfg, opts, false);
    cattr_model *m = bb.st == CATTR_OK ? wrap_model(bb.g, base->path, opts, cfg->hidden_size) : NULL;
    if (bb.st == CATTR_OK && !m) bb.st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (bb.st != CATTR_OK) {
        cg_free(bb.g);
        return bb.st;
    }
    *out = m;
    return CATTR_OK;
}

cattr_status cx_decoder_load(const char *dir, const cx_decoder_opts *opts, cattr_model **out, cx_hf_config *cfg_out) {
    *out = NULL;
    cx_hf_config cfg;
    CX_CHECK(cx_hf_config_load(dir, &cfg));
    builder bb = {cg_new(), NULL, NULL, CATTR_OK, ""}, *b = &bb;
    if (!b->g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    b->st = cx_hf_weights_open(dir, &b->w);
    if (b->st == CATTR_OK && opts->mem_avail) {
        double gib = 1024.0 * 1024.0 * 1024.0, need = (double)cx_hf_weights_resident_bytes(b->w);
        if (need + (double)opts->mem_reserve > (double)opts->mem_avail)
            b->st = cx_fail(CATTR_ERR_NO_MEMORY,
                            "'%s' does not fit in this machine's memory: its weights take %.1f GiB loaded (16-bit "
                            "matrices as stored, the rest as float32) and the activations %.1f GiB, but %.1f GiB is "
                            "available (free RAM with reclaimable cache, within ulimit -v and cgroup limits); free "
                            "memory, use a smaller checkpoint, or set "
                            "CATTR_SKIP_MEMORY_CHECK=1 to load it anyway",
                            dir, need / gib, (double)opts->mem_reserve / gib, (double)opts->mem_avail / gib);
    }
    const int64_t H = cfg.hidden_size;
    build_body(b, &cfg, opts, false);
    if (b->w) cx_hf_weights_release_pages(b->w);
    cx_hf_weights_free(b->w);
    cattr_model *m = NULL;
    if (b->st == CATTR_OK) {
        m = wrap_model(b->g, dir, opts, H);
        if (m) b->g = NULL;
        else b->st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    cg_free(b->g);
    if (b->st != CATTR_OK) return b->st;
    if (cfg_out) *cfg_out = cfg;
    *out = m;
    return CATTR_OK;
}
