/* attack.c - `cattr attack`: Captum's FGSM and PGD (captum.robust) on an ONNX model from the command line, writing
 * the adversarial input. Each step is one pass of the library (cattr_explainer_loss_grad: the loss on the graph and
 * its gradient); the sign step, the projection into the ball (clamp for linf, per-example renorm for l2) and the
 * bounds are Captum's formulas, applied here to the inputs between passes. */
#include "cli.h"
#include "core/core.h"
#include "core/rng.h"
#include "viz/heatmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATTACK_STREAM 0x41544b0000000000ull /* "ATK": PGD's random start, + input ordinal */

static void attack_help(FILE *f) {
    fprintf(f,
        "usage: cattr attack MODEL.onnx --input FILE [--input FILE...] --target T --output ADV.npy [options]\n"
        "\n"
        "An adversarial input (Captum's captum.robust): the inputs moved to raise the loss of each example's\n"
        "label (or, with --targeted, to lower the loss of the class given).\n"
        "\n"
        "  --method M         fgsm (default): one step x + epsilon * sign(grad); pgd: --steps steps of --step-size,\n"
        "                     each projected back into the --norm ball of radius --epsilon around the input\n"
        "  --epsilon E        fgsm: the step; pgd: the ball's radius (required)\n"
        "  --step-size S      pgd: the step (default epsilon / 4)\n"
        "  --steps N          pgd: the steps (default 10)\n"
        "  --norm N           pgd: linf (default) or l2\n"
        "  --random-start     pgd: start from a uniform point of the linf ball (cattr's generator, --seed)\n"
        "  --target T         each example's label (an index), or with --targeted the class to reach\n"
        "  --targets FILE     one label per example (.npy of integers)\n"
        "  --targeted         a targeted attack (steps against the gradient)\n"
        "  --loss L           nll (default: -log of the output at the target, Captum's default for a model of\n"
        "                     probabilities) or cross-entropy (of logits: torch's CrossEntropyLoss)\n"
        "  --lower L, --upper U   bounds of the input values (default none)\n"
        "  --seed N           the random start's seed (0)\n"
        "  --device D, --dtype T  where and in what the passes run (cpu, float32)\n"
        "  --output FILE      the adversarial input (.npy; with several inputs .safetensors)\n"
        "  --png FILE         a PNG of example 0's adversarial input 0 minus the input (last two dims)\n"
        "  --quiet            print nothing but errors\n");
}

typedef struct {
    const char *model, *output, *png, *target, *targets;
    const char *inputs[CATTR_MAX_INPUTS];
    int n_in;
    bool pgd, l2, random_start, targeted, quiet;
    cattr_loss loss;
    double eps, step, lower, upper;
    long long steps, seed;
    cattr_dtype dtype;
    const char *device;
} attack_args;

static int parse(int argc, char **argv, attack_args *a) {
    memset(a, 0, sizeof *a);
    a->lower = -INFINITY, a->upper = INFINITY, a->steps = 10, a->step = NAN, a->eps = NAN;
    a->dtype = CATTR_FLOAT32;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool val = !strcmp(o, "--input") || !strcmp(o, "--output") || !strcmp(o, "--png") || !strcmp(o, "--target") ||
                   !strcmp(o, "--targets") || !strcmp(o, "--method") || !strcmp(o, "--epsilon") ||
                   !strcmp(o, "--step-size") || !strcmp(o, "--steps") || !strcmp(o, "--norm") || !strcmp(o, "--loss") ||
                   !strcmp(o, "--lower") || !strcmp(o, "--upper") || !strcmp(o, "--seed") || !strcmp(o, "--device") ||
                   !strcmp(o, "--dtype");
        if (val && !v) return cli_usage_error("%s needs a value (see cattr attack --help)", o);
        if (val) i++;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            attack_help(stdout);
            return -1;
        } else if (!strcmp(o, "--input")) {
            if (a->n_in >= CATTR_MAX_INPUTS) return cli_usage_error("at most %d --input", CATTR_MAX_INPUTS);
            a->inputs[a->n_in++] = v;
        } else if (!strcmp(o, "--output")) {
            a->output = v;
        } else if (!strcmp(o, "--png")) {
            a->png = v;
        } else if (!strcmp(o, "--target")) {
            a->target = v;
        } else if (!strcmp(o, "--targets")) {
            a->targets = v;
        } else if (!strcmp(o, "--method")) {
            if (strcmp(v, "fgsm") && strcmp(v, "pgd")) return cli_usage_error("--method must be fgsm or pgd, not '%s'", v);
            a->pgd = !strcmp(v, "pgd");
        } else if (!strcmp(o, "--norm")) {
            if (strcmp(v, "linf") && strcmp(v, "l2")) return cli_usage_error("--norm must be linf or l2, not '%s'", v);
            a->l2 = !strcmp(v, "l2");
        } else if (!strcmp(o, "--loss")) {
            if (strcmp(v, "nll") && strcmp(v, "cross-entropy"))
                return cli_usage_error("--loss must be nll or cross-entropy, not '%s'", v);
            a->loss = !strcmp(v, "nll") ? CATTR_LOSS_NLL_OUTPUT : CATTR_LOSS_CROSS_ENTROPY;
        } else if (!strcmp(o, "--epsilon") || !strcmp(o, "--step-size")) {
            double *d = !strcmp(o, "--epsilon") ? &a->eps : &a->step;
            if (!cli_parse_double(v, d) || !(*d > 0) || !isfinite(*d))
                return cli_usage_error("%s must be a positive number, not '%s'", o, v);
        } else if (!strcmp(o, "--lower") || !strcmp(o, "--upper")) {
            if (!cli_parse_double(v, !strcmp(o, "--lower") ? &a->lower : &a->upper))
                return cli_usage_error("%s must be a number, not '%s'", o, v);
        } else if (!strcmp(o, "--steps")) {
            if (!cli_int_arg(o, v, 1, 1000000, &a->steps)) return CLI_USAGE;
        } else if (!strcmp(o, "--seed")) {
            if (!cli_int_arg(o, v, 0, INT64_MAX, &a->seed)) return CLI_USAGE;
        } else if (!strcmp(o, "--device")) {
            if (!cli_device_arg(v)) return CLI_USAGE;
            a->device = v;
        } else if (!strcmp(o, "--dtype")) {
            if (!cli_dtype_arg(v, &a->dtype)) return CLI_USAGE;
        } else if (!strcmp(o, "--random-start")) {
            a->random_start = true;
        } else if (!strcmp(o, "--targeted")) {
            a->targeted = true;
        } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            a->quiet = true;
        } else if (o[0] == '-' && o[1]) {
            return cli_usage_error("attack: unknown option '%s' (see cattr attack --help)", o);
        } else if (!a->model) {
            a->model = o;
        } else {
            return cli_usage_error("attack: unexpected argument '%s'", o);
        }
    }
    if (!a->model) return cli_usage_error("attack: no model given (see cattr attack --help)");
    if (!a->n_in) return cli_usage_error("attack: give at least one --input");
    if (!a->output) return cli_usage_error("attack: --output FILE is required (.npy, or .safetensors)");
    size_t lo = strlen(a->output);
    bool npy = lo > 4 && !strcmp(a->output + lo - 4, ".npy"), st = lo > 12 && !strcmp(a->output + lo - 12, ".safetensors");
    if (!npy && !st) return cli_usage_error("--output must end in .npy or .safetensors: '%s'", a->output);
    if (npy && a->n_in > 1) return cli_usage_error("--output .npy holds one tensor; with %d inputs use .safetensors", a->n_in);
    if (isnan(a->eps)) return cli_usage_error("attack: --epsilon is required (fgsm's step, pgd's radius)");
    if (!a->target == !a->targets) return cli_usage_error("attack: give --target or --targets (each example's label)");
    if (!(a->lower < a->upper)) return cli_usage_error("--lower must be below --upper");
    if (isnan(a->step)) a->step = a->eps / 4;
    if (a->png && !(strlen(a->png) > 4 && !strcmp(a->png + strlen(a->png) - 4, ".png")))
        return cli_usage_error("--png must name a .png file: '%s'", a->png);
    for (int i = 0; i < a->n_in; i++)
        if (!cli_file_in(a->inputs[i], "--input")) return CLI_USAGE;
    if (a->targets && !cli_file_in(a->targets, "--targets")) return CLI_USAGE;
    if (!cli_file_out(a->output, "--output") || (a->png && !cli_file_out(a->png, "--png"))) return CLI_USAGE;
    return 0;
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* One FGSM step of size s on x (float64 copies), the gradient g in the compute dtype: where |g| > 1e-6, x + sign *
 * s * sign(g); then the bounds. */
static void fgsm_step(cattr_tensor *x, const cattr_tensor *g, double s, int dir, double lo, double hi) {
    double *xv = cattr_tensor_data(x);
    for (int64_t k = 0; k < cattr_tensor_numel(x); k++) {
        double gv = cx_tensor_get(g, k);
        if (fabs(gv) > 1e-6) xv[k] += dir * s * (gv > 0 ? 1 : -1);
        xv[k] = clampd(xv[k], lo, hi);
    }
}

/* x back into the ball of radius r around x0 (linf: clamp per element; l2: each example's difference scaled to norm
 * r when longer, as torch.renorm), then the bounds. */
static void project(cattr_tensor *x, const cattr_tensor *x0, double r, bool l2, double lo, double hi) {
    double *xv = cattr_tensor_data(x);
    const double *x0v = cattr_tensor_data_const(x0);
    int64_t n = cattr_tensor_numel(x), B = cattr_tensor_ndim(x) ? cattr_tensor_shape(x)[0] : 1, per = B ? n / B : 0;
    for (int64_t b = 0; b < B; b++) {
        double scale = 1;
        if (l2) {
            double s = 0;
            for (int64_t k = b * per; k < (b + 1) * per; k++) s += (xv[k] - x0v[k]) * (xv[k] - x0v[k]);
            s = sqrt(s);
            if (s > r) scale = r / (s + 1e-7);
        }
        for (int64_t k = b * per; k < (b + 1) * per; k++) {
            double d = (xv[k] - x0v[k]) * scale;
            if (!l2) d = clampd(d, -r, r);
            xv[k] = clampd(x0v[k] + d, lo, hi);
        }
    }
}

/* The mean of t's values (the per-example losses). */
static double mean_of(const cattr_tensor *t) {
    double s = 0;
    int64_t n = cattr_tensor_numel(t);
    for (int64_t k = 0; k < n; k++) s += cx_tensor_get(t, k);
    return n ? s / (double)n : NAN;
}

int cmd_attack(int argc, char **argv) {
    attack_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? CLI_OK : rc;
    cattr_model *m = NULL;
    cattr_explainer *e = NULL;
    cattr_tensor *x0[CATTR_MAX_INPUTS] = {0}, *x[CATTR_MAX_INPUTS] = {0}, *tt = NULL, *tgt64 = NULL;
    cattr_dtype in_dt[CATTR_MAX_INPUTS]; /* each input's dtype: the adversarial input keeps it (float64, else float32) */
    int64_t *idx = NULL;
    cattr_status st = cattr_model_load_onnx(a.model, &m);
    if (st == CATTR_OK && a.device) st = cattr_model_set_device(m, a.device);
    if (st != CATTR_OK) return cli_error(st, "cannot load model");
    for (int i = 0; i < a.n_in && st == CATTR_OK; i++) {
        cattr_tensor *t = NULL;
        st = cli_load_tensor(a.inputs[i], &t);
        if (st == CATTR_OK) in_dt[i] = cattr_tensor_dtype(t) == CATTR_FLOAT64 ? CATTR_FLOAT64 : CATTR_FLOAT32;
        if (st == CATTR_OK) st = cattr_tensor_convert(t, CATTR_FLOAT64, &x0[i]);
        if (st == CATTR_OK) st = cattr_tensor_convert(t, CATTR_FLOAT64, &x[i]);
        cattr_tensor_free(t);
        if (st != CATTR_OK) rc = cli_error(st, "cannot read --input");
    }
    int64_t B = rc == CLI_OK && cattr_tensor_ndim(x0[0]) ? cattr_tensor_shape(x0[0])[0] : 1;
    cattr_target target = {CATTR_TARGET_INDEX, 1, 0, NULL};
    if (rc == CLI_OK && a.target) {
        long long t;
        if (!cli_int_arg("--target", a.target, 0, INT64_MAX, &t)) rc = CLI_USAGE;
        else if (!(idx = malloc(sizeof *idx))) rc = cli_usage_error("out of memory");
        else {
            idx[0] = t;
            target.idx = idx;
        }
    } else if (rc == CLI_OK) {
        st = cli_load_tensor(a.targets, &tt);
        if (st == CATTR_OK) st = cattr_tensor_convert(tt, CATTR_INT64, &tgt64);
        if (st != CATTR_OK) rc = cli_error(st, "cannot read --targets");
        else if (cattr_tensor_numel(tgt64) != B)
            rc = cli_usage_error("--targets holds %lld labels for %lld examples", (long long)cattr_tensor_numel(tgt64),
                                 (long long)B);
        else target = (cattr_target){CATTR_TARGET_PER_EXAMPLE, 1, B, cattr_tensor_data_const(tgt64)};
    }
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.dtype = a.dtype;
    p.device = a.device;
    if (rc == CLI_OK && (st = cattr_explainer_new(m, &p, &e)) != CATTR_OK) rc = cli_error(st, "bad parameters");
    if (rc == CLI_OK && a.pgd && a.random_start) { /* a uniform point of the linf ball, bounded */
        for (int i = 0; i < a.n_in; i++) {
            cx_rng g;
            cx_rng_init(&g, (uint64_t)a.seed, ATTACK_STREAM + (uint64_t)i);
            double *v = cattr_tensor_data(x[i]);
            for (int64_t k = 0; k < cattr_tensor_numel(x[i]); k++)
                v[k] = clampd(v[k] + a.eps * (2 * cx_rng_uniform(&g) - 1), a.lower, a.upper);
        }
    }
    long long steps = a.pgd ? a.steps : 1;
    double first_loss = NAN, last_loss = NAN;
    for (long long s = 0; s < steps && rc == CLI_OK; s++) {
        cattr_tensor *grads[CATTR_MAX_INPUTS] = {0}, *loss = NULL;
        cattr_call call = {(const cattr_tensor *const *)x, a.n_in, NULL, &target, NULL, 0, NULL, NULL, NULL, 0,
                           NULL, 0, NULL};
        st = cattr_explainer_loss_grad(e, &call, a.loss, grads, &loss);
        if (st != CATTR_OK) {
            rc = cli_error(st, "the loss's gradient failed");
            break;
        }
        if (s == 0) first_loss = mean_of(loss);
        for (int i = 0; i < a.n_in; i++) {
            fgsm_step(x[i], grads[i], a.pgd ? a.step : a.eps, a.targeted ? -1 : 1, a.lower, a.upper);
            if (a.pgd) project(x[i], x0[i], a.eps, a.l2, a.lower, a.upper);
            cattr_tensor_free(grads[i]);
        }
        cattr_tensor_free(loss);
    }
    if (rc == CLI_OK) { /* the loss at the adversarial input */
        cattr_tensor *grads[CATTR_MAX_INPUTS] = {0}, *loss = NULL;
        cattr_call call = {(const cattr_tensor *const *)x, a.n_in, NULL, &target, NULL, 0, NULL, NULL, NULL, 0,
                           NULL, 0, NULL};
        st = cattr_explainer_loss_grad(e, &call, a.loss, grads, &loss);
        if (st != CATTR_OK) rc = cli_error(st, "the loss at the adversarial input failed");
        else last_loss = mean_of(loss);
        for (int i = 0; i < a.n_in; i++) cattr_tensor_free(grads[i]);
        cattr_tensor_free(loss);
    }
    cattr_tensor *outs[CATTR_MAX_INPUTS] = {0};
    for (int i = 0; i < a.n_in && rc == CLI_OK; i++)
        if ((st = cattr_tensor_convert(x[i], in_dt[i], &outs[i])) != CATTR_OK)
            rc = cli_error(st, "cannot convert the adversarial input");
    if (rc == CLI_OK && a.png) { /* example 0's change to input 0 over its last two dims */
        int nd = cattr_tensor_ndim(x[0]);
        int64_t h = nd >= 2 ? cattr_tensor_shape(x[0])[nd - 2] : 1, w = nd >= 1 ? cattr_tensor_shape(x[0])[nd - 1] : 1;
        int64_t per = B ? cattr_tensor_numel(x[0]) / B : 0, planes = h * w > 0 ? per / (h * w) : 0;
        double *map = calloc((size_t)(h * w > 0 ? h * w : 1), sizeof *map), mx = 0;
        const double *xv = cattr_tensor_data_const(x[0]), *x0v = cattr_tensor_data_const(x0[0]);
        for (int64_t c = 0; map && c < planes; c++)
            for (int64_t k = 0; k < h * w; k++) map[k] += xv[c * h * w + k] - x0v[c * h * w + k];
        for (int64_t k = 0; map && k < h * w; k++) mx = fmax(mx, fabs(map[k]));
        for (int64_t k = 0; map && k < h * w && mx > 0; k++) map[k] /= mx;
        st = map ? cx_png_heatmap(a.png, map, (int)h, (int)w, h * w <= 256 ? 32 : h * w <= 4096 ? 8 : 2)
                 : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        free(map);
        if (st != CATTR_OK) rc = cli_error(st, "cannot write the PNG");
    }
    if (rc == CLI_OK) {
        size_t lo = strlen(a.output);
        if (lo > 4 && !strcmp(a.output + lo - 4, ".npy")) {
            st = cattr_tensor_save_npy(outs[0], a.output);
        } else {
            cattr_tensor_set *s = NULL;
            st = cattr_tensor_set_new(&s);
            char name[32];
            for (int i = 0; i < a.n_in && st == CATTR_OK; i++) {
                snprintf(name, sizeof name, "adv.%d", i);
                st = cattr_tensor_set_add(s, name, outs[i]);
            }
            if (st == CATTR_OK) st = cattr_tensor_set_save(s, a.output);
            cattr_tensor_set_free(s);
        }
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot write the output");
            if (a.png) remove(a.png);
        }
    }
    if (rc == CLI_OK && !a.quiet) {
        printf("%s, %s loss: mean %.6g at the start, %.6g at the adversarial input (%s)\n",
               a.pgd ? "pgd" : "fgsm", a.loss == CATTR_LOSS_NLL_OUTPUT ? "nll" : "cross-entropy", first_loss, last_loss,
               a.targeted ? "targeted: lower is closer to the target" : "untargeted: higher moves away from the label");
        printf("wrote %s\n", a.output);
        if (a.png) printf("wrote %s\n", a.png);
    }
    for (int i = 0; i < CATTR_MAX_INPUTS; i++) {
        cattr_tensor_free(x0[i]);
        cattr_tensor_free(x[i]);
        cattr_tensor_free(outs[i]);
    }
    cattr_tensor_free(tt);
    cattr_tensor_free(tgt64);
    free(idx);
    cattr_explainer_free(e);
    cattr_model_free(m);
    return rc;
}
