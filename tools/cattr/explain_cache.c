/* cattr serve: explainers kept between requests on one worker thread (cli_explain_mem). A request whose model and
 * parameters compare equal to an earlier one's reuses its explainer: its graph, its plans, its quadrature nodes and
 * its buffers, as a program that calls the library in a loop does; a new explainer per request cost more than the
 * attribution itself on small models (bench/serve_load.py). The parameters compare field by field as bytes, the
 * strings they point to (device, layer, layers) by their text; the cancel flag is a pointer compared as such (the
 * server gives each worker one flag of its own, so every request of a worker shares it). A few entries per worker,
 * the least recently used one replaced. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4

typedef struct {
    const cattr_model *m;
    cattr_attr_params key; /* the parameters with their string pointers cleared */
    char *device, *layer;  /* the explainer's copies of the strings (its parameters point at them) */
    char **layers;
    int n_layers;
    cattr_explainer *e;
    uint64_t used;
} entry;

struct cli_explainer_cache {
    entry s[SLOTS];
    uint64_t clock;
};

cli_explainer_cache *cli_explainer_cache_new(void) { return calloc(1, sizeof(cli_explainer_cache)); }

static void entry_free(entry *x) {
    cattr_explainer_free(x->e);
    free(x->device);
    free(x->layer);
    for (int i = 0; i < x->n_layers; i++) free(x->layers[i]);
    free(x->layers);
    memset(x, 0, sizeof *x);
}

void cli_explainer_cache_free(cli_explainer_cache *c) {
    if (!c) return;
    for (int k = 0; k < SLOTS; k++) entry_free(&c->s[k]);
    free(c);
}

static cattr_attr_params key_of(const cattr_attr_params *p) {
    cattr_attr_params k;
    memcpy(&k, p, sizeof k);
    k.device = k.layer = NULL;
    k.layers = NULL;
    return k;
}

static bool same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static bool matches(const entry *x, const cattr_model *m, const cattr_attr_params *p, const cattr_attr_params *k) {
    if (!x->e || x->m != m || memcmp(&x->key, k, sizeof *k)) return false;
    if (!same_str(x->device, p->device) || !same_str(x->layer, p->layer)) return false;
    for (int i = 0; i < p->n_layers; i++)
        if (!same_str(x->layers[i], p->layers[i])) return false;
    return true;
}

static char *dup_or_null(const char *s, bool *ok) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *ok = false;
    return d;
}

cattr_status cli_explainer_get(cli_explainer_cache *c, const cattr_model *m, const cattr_attr_params *p,
                               cattr_explainer **e, bool *owned) {
    *e = NULL;
    *owned = true;
    /* no cache; a progress callback's state lives on the caller's stack; node rules are arrays not compared */
    if (!c || p->progress || p->progress_user || p->node_rules) return cattr_explainer_new(m, p, e);
    cattr_attr_params k = key_of(p);
    entry *lru = &c->s[0];
    for (int s = 0; s < SLOTS; s++) {
        entry *x = &c->s[s];
        if (matches(x, m, p, &k)) {
            x->used = ++c->clock;
            *e = x->e;
            *owned = false;
            return CATTR_OK;
        }
        if (!x->e || (lru->e && x->used < lru->used)) lru = x;
    }
    entry_free(lru);
    bool ok = true;
    lru->device = dup_or_null(p->device, &ok);
    lru->layer = dup_or_null(p->layer, &ok);
    if (p->n_layers > 0) {
        lru->layers = calloc((size_t)p->n_layers, sizeof *lru->layers);
        lru->n_layers = lru->layers ? p->n_layers : 0;
        ok = ok && lru->layers;
        for (int i = 0; i < lru->n_layers; i++) lru->layers[i] = dup_or_null(p->layers[i], &ok);
    }
    if (!ok) {
        entry_free(lru);
        return cattr_explainer_new(m, p, e); /* short of memory: one explainer for this call only */
    }
    cattr_attr_params q = *p;
    q.device = lru->device;
    q.layer = lru->layer;
    q.layers = p->n_layers > 0 ? (const char *const *)lru->layers : NULL;
    cattr_status st = cattr_explainer_new(m, &q, &lru->e);
    if (st != CATTR_OK) {
        entry_free(lru);
        return st;
    }
    lru->m = m;
    lru->key = k;
    lru->used = ++c->clock;
    *e = lru->e;
    *owned = false;
    return CATTR_OK;
}

void cli_explainer_drop(cli_explainer_cache *c, cattr_explainer *e) {
    for (int s = 0; c && s < SLOTS; s++)
        if (c->s[s].e == e) entry_free(&c->s[s]);
}
