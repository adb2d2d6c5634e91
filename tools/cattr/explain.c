/* explain.c - `cattr explain`: attribute a model's prediction to its inputs and write the attributions. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "mpi_driver.h"

#include "core/core.h"
#include "io/fileutil.h"
#include "io/rows.h"
#include "viz/heatmap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXT 16

static void explain_help(FILE *f) {
    fprintf(f,
        "usage: cattr explain MODEL.onnx --input FILE [--input FILE...] --output FILE [options]\n"
        "\n"
        "Attributes the model's output to its inputs (Captum semantics). Inputs are .npy files or\n"
        ".safetensors (FILE.safetensors:NAME to pick a tensor), batch first, in the model's input order.\n"
        "\n"
        "method:\n"
        "  --method M              integrated-gradients (default) | saliency | input-x-gradient | deeplift |\n"
        "                          deeplift-shap | guided-backprop | deconvolution | lrp | gradient-shap |\n"
        "                          feature-ablation | feature-permutation | occlusion | shapley-value-sampling |\n"
        "                          shapley-values | lime | kernel-shap | guided-gradcam, the layer methods\n"
        "                          layer-activation | layer-gradient-x-activation | layer-gradcam | internal-influence |\n"
        "                          layer-conductance | layer-integrated-gradients | layer-deeplift | ... and the\n"
        "                          neuron methods neuron-gradient | neuron-integrated-gradients | ... (docs/CLI.md)\n"
        "  --steps N|auto          IG integration steps (default 50); auto (integrated-gradients, layer-integrated-\n"
        "                          gradients): 8, 16, 32, ... until |delta| <= --delta-tol x sum |attribution|\n"
        "  --delta-tol X           --steps auto's tolerance, relative to each example's sum |attribution| (1e-3)\n"
        "  --max-steps N           --steps auto's most steps (default 512)\n"
        "  --quadrature Q          gausslegendre (default) | riemann_left | riemann_right | riemann_middle |\n"
        "                          riemann_trapezoid\n"
        "  --baseline B            per input, in order: a number or a FILE (input's shape or batch 1); one\n"
        "                          --baseline applies to every input; default 0\n"
        "  --no-multiply-by-inputs IG: return the integrated gradient without multiplying by (input - baseline)\n"
        "  --signed                saliency: signed gradient instead of its absolute value\n"
        "  --no-delta              skip the convergence delta\n"
        "  --eps X                 DeepLift: threshold on |input difference| (default 1e-10)\n"
        "  --layer NAME            layer and neuron methods, GuidedGradCam: the layer (PyTorch module path such as\n"
        "                          conv2, or an ONNX value;\n"
        "                          `cattr info` lists them)\n"
        "  --layer-input           use the layer's input instead of its output\n"
        "  --neuron I,J,...        neuron methods: the neuron of the layer (indices without the batch dim)\n"
        "  --feature-mask FILE     perturbation methods, Lime, KernelShap: int64 feature ids per input (repeat\n"
        "                          per input; default: every element its own feature)\n"
        "  --perturbations-per-eval N  perturbations per forward pass (default: from --max-memory)\n"
        "  --n-samples N           ShapleyValueSampling, Lime, KernelShap (25), GradientShap (5)\n"
        "  --sliding-window D,D..  Occlusion: window shape per input (repeat per input)\n"
        "  --strides D,D..         Occlusion: strides per input (repeat per input; default 1)\n"
        "  --stdevs X              GradientShap / NoiseTunnel noise standard deviation\n"
        "  --noise-tunnel T        wrap the method: smoothgrad | smoothgrad_sq | vargrad\n"
        "  --nt-samples N          NoiseTunnel samples (default 5)\n"
        "  --nt-samples-batch-size N  NoiseTunnel samples per batch (default all)\n"
        "  --draw-baseline-from-distrib  NoiseTunnel: draw one baseline row per sample\n"
        "  --seed N                seed of the counter-based generator of stochastic methods (default 0)\n"
        "target (default: the predicted class of each example when the output has one row of scores):\n"
        "  --target T              an index (3) or a tuple (1,0,0) used for every example\n"
        "  --targets LIST          one per example: 2,0,1 or tuples 1,0,0;0,1,1\n"
        "  --target-file FILE      a tensor of targets: one element (all examples) or one per example\n"
        "model inputs beyond the attributed ones:\n"
        "  --additional FILE       a tensor for the next model input (expanded with the inputs)\n"
        "  --additional NAME=FILE  a tensor for the model input called NAME; the inputs not named are the attributed\n"
        "                          ones (--input, in model order): any input can be attributed\n"
        "execution:\n"
        "  --dtype D               float32 (default) | float64 (exact reference mode)\n"
        "  --internal-batch-size N rows per chunk of the IG path, as in Captum (default: from --max-memory)\n"
        "  --max-memory SIZE       memory budget for the IG path, e.g. 512M, 2G (default: 1/4 of the available memory)\n"
        "  --device NAME           cpu (default) | cpu-check (reference kernels, protected memory) | cuda[:N]\n"
        "  --executor E            planned (default) | eager (op by op, for debugging)\n"
        "  --precision P           highest (default) | high: bfloat16 inputs, float32 sums in the products by\n"
        "                          constant weights (MatMul, Gemm); float32 and a device with bfloat16 products\n"
        "  --precision-error       also run at the other precision; print the error of high against highest\n"
        "  --runs N                run the attribution N times; print 'time: first=<s> warm_median=<s>'\n"
        "  --batch-size N          attribute the examples N at a time (a dataset that does not fit in memory at\n"
        "                          once; examples are independent, so only float rounding can differ); with an\n"
        "                          .npy or .safetensors --output the inputs are read and the results written batch\n"
        "                          by batch (OUTPUT.part, resumed by rerunning the command; mpirun spreads the\n"
        "                          batches over ranks: docs/CLI.md)\n"
        "  --split steps|features|samples\n"
        "                          under mpirun: one attribution's work over the ranks, combined on rank 0 into\n"
        "                          one process's numbers: steps (integrated-gradients, layer-integrated-\n"
        "                          gradients, layer-conductance, internal-influence, the neuron ig forms),\n"
        "                          features (the\n"
        "                          perturbations of feature-ablation, feature-permutation, occlusion), samples\n"
        "                          (the permutations, coalitions or samples of shapley-value-sampling,\n"
        "                          shapley-values, lime, kernel-shap, gradient-shap, and of a --noise-tunnel)\n"
        "                          (docs/CLI.md)\n"
        "output:\n"
        "  --output FILE           .npy (one input), .safetensors (attr.<i>, delta) or .json\n"
        "  --png FILE              heatmap PNG of example 0's attribution (last two dims, channels summed)\n"
        "  --heatmap               print that heatmap in the terminal (ANSI colours on a terminal)\n"
        "  --overlay               --png: blend the map over the input image (a layer map, e.g. layer-gradcam's,\n"
        "                          is first upsampled to the input by nearest neighbour)\n"
        "  --sign S                --png with --overlay: all | positive | negative | absolute_value (default)\n"
        "  --outlier-perc P        --png with --overlay: clip at the top P%% of |values| by cumulative sum (2)\n"
        "  --metrics LIST          Captum's metrics of the attributions, comma-separated: infidelity (Gaussian\n"
        "                          perturbations I, F(x) - F(x - I) against I . attribution) and sensitivity\n"
        "                          (sensitivity_max: the method rerun at inputs with uniform noise added, the\n"
        "                          largest relative Frobenius change); printed, and in a .json --output\n"
        "  --metric-samples N      perturbations per example (10)\n"
        "  --metric-noise S        infidelity: the perturbations' standard deviation (0.003)\n"
        "  --metric-radius R       sensitivity: the noise's L-infinity radius (0.02)\n"
        "  --metric-normalize      infidelity with Captum's normalize=True (the attribution's best scale)\n"
        "                          Beyond Captum: deletion and insertion (the model's output at the target as the\n"
        "                          most attributed features, the --feature-mask groups or every element, are\n"
        "                          replaced by the baseline, or put back into it), their areas printed, the curves\n"
        "                          in a .json --output\n"
        "  --curve-steps N         deletion / insertion: points of the curve after the first (20)\n"
        "  --curve-softmax         deletion / insertion: score the softmax of a [batch, classes] output\n"
        "  --curve-png FILE        deletion / insertion: plot the curves (the examples light, their mean dark; x from\n"
        "                          0 to 1 of the features; deletion blue, insertion red)\n"
        "                          randomization: the model-randomisation check (Adebayo et al. 2018): the method\n"
        "                          rerun on copies of the model whose weights are drawn anew, module by module from\n"
        "                          the output down; Spearman rank correlation with the attributions per module\n"
        "  --randomize-modules L   randomization: the modules, comma-separated, output first (default: every module\n"
        "                          with weights; `cattr info MODEL` lists them)\n"
        "  --randomize-independent randomization: each module alone instead of cascading\n"
        "  --quiet                 print nothing but errors and timing\n"
        "  --progress              a progress bar on stderr from the start, also when it is not a terminal, in\n"
        "                          Captum's words (show_progress): 'Feature Ablation attribution:  50%%|##...| 2/4'\n");
}

typedef struct {
    const char *model, *output, *png;
    const char *inputs[MAXT], *additional[MAXT], *baselines[MAXT], *masks[MAXT];
    int n_in, n_add, n_base, n_masks;
    char add_name[MAXT][256]; /* --additional NAME=FILE: the model input's name ("" when given by position) */
    const char *target, *targets, *target_file;
    cattr_attr_params p;
    int runs;
    int64_t batch_size;
    const char *split; /* --split steps: one attribution's work over the MPI ranks */
    int steps_used;    /* IG's steps (--steps auto: the most any batch reached) */
    bool heatmap, quiet, no_delta, overlay, precision_error, progress;
    const char *sign;
    double outlier_perc;
    cli_metric_opts metrics; /* --metrics: Captum's infidelity / sensitivity_max of the attributions */
    bool evaluate;           /* cattr evaluate: the metrics are the point, --output optional */
    /* cli_explain_mem (cattr serve): the served model (borrowed, never changed), the inputs, and where the JSON goes */
    const cattr_model *mem_model;
    const cattr_tensor *const *mem_inputs;
    char **mem_json;
    cli_explainer_cache *mem_cache; /* the worker's explainers (NULL: one per call) */
    const cattr_tensor *const *mem_side; /* the tensors "@S<k>" names in --baseline and --feature-mask */
    int n_mem_side;
} explain_args;

static bool ends_with(const char *s, const char *suf) {
    if (!s) return false;
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Parses "1,0,0" into ints; returns the count or -1. */
static int parse_ints(const char *s, int64_t *out, int max) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || n >= max || errno == ERANGE) return -1;
        out[n++] = v;
        while (*end == ' ') end++;
        if (*end == ',') end++;
        else if (*end) return -1;
        p = end;
    }
    return n;
}

static int parse_args(int argc, char **argv, explain_args *a, bool evaluate, bool mem) {
    memset(a, 0, sizeof *a);
    a->evaluate = evaluate;
    a->p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
    a->outlier_perc = 2;
    cli_metric_defaults(&a->metrics);
    int method = CATTR_METHOD_INTEGRATED_GRADIENTS;
    bool signed_sal = false, no_mul = false;
    cattr_attr_params x = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS); /* method-specific flags */
    bool have_n_samples = false, have_stdevs = false;
    int n_windows = 0, n_strides = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                                                   \
    do {                                                                                                               \
        if (!v) return cli_usage_error("%s needs a value (see cattr explain --help)", o);                              \
        i++;                                                                                                           \
    } while (0)
        long long n;
        int took = cli_attr_option("explain", o, v, &i, &a->p, &x, &have_n_samples);
        if (took < 0) return CLI_USAGE;
        if (took) continue;
        if ((took = cli_metric_option(o, v, &i, &a->metrics)) < 0) return CLI_USAGE;
        if (took) continue;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            explain_help(stdout);
            return -1;
        } else if (!strcmp(o, "--method")) {
            NEED_VALUE();
            method = cattr_method_from_name(v);
            if (method < 0) return cli_usage_error("unknown method '%s' (see cattr explain --help)", v);
        } else if (!strcmp(o, "--input")) {
            NEED_VALUE();
            if (a->n_in >= CATTR_MAX_INPUTS) return cli_usage_error("at most %d --input", CATTR_MAX_INPUTS);
            a->inputs[a->n_in++] = v;
        } else if (!strcmp(o, "--additional")) {
            NEED_VALUE();
            if (a->n_add >= MAXT - 1) return cli_usage_error("too many --additional");
            const char *eq = strchr(v, '=');
            struct stat sb;
            if (eq && eq > v && stat(v, &sb) != 0) { /* NAME=FILE (a file called so is a file) */
                size_t len = (size_t)(eq - v);
                if (len >= sizeof a->add_name[0]) return cli_usage_error("--additional %s: the input name is too long", v);
                memcpy(a->add_name[a->n_add], v, len);
                a->add_name[a->n_add][len] = '\0';
                v = eq + 1;
            }
            a->additional[a->n_add++] = v;
        } else if (!strcmp(o, "--baseline")) {
            NEED_VALUE();
            if (a->n_base >= MAXT - 1) return cli_usage_error("too many --baseline");
            a->baselines[a->n_base++] = v;
        } else if (!strcmp(o, "--target")) {
            NEED_VALUE();
            a->target = v;
        } else if (!strcmp(o, "--targets")) {
            NEED_VALUE();
            a->targets = v;
        } else if (!strcmp(o, "--target-file")) {
            NEED_VALUE();
            a->target_file = v;
        } else if (!strcmp(o, "--precision-error")) {
            a->precision_error = true;
        } else if (!strcmp(o, "--executor")) {
            NEED_VALUE();
            if (!strcmp(v, "planned")) a->p.executor = CATTR_EXEC_PLANNED;
            else if (!strcmp(v, "eager")) a->p.executor = CATTR_EXEC_EAGER;
            else return cli_usage_error("--executor must be planned or eager, not '%s'", v);
        } else if (!strcmp(o, "--runs")) {
            NEED_VALUE();
            if (!cli_int_arg(o, v, 1, 1000000, &n)) return CLI_USAGE;
            a->runs = (int)n;
        } else if (!strcmp(o, "--output") || !strcmp(o, "-o")) {
            NEED_VALUE();
            a->output = v;
        } else if (!strcmp(o, "--png")) {
            NEED_VALUE();
            a->png = v;
        } else if (!strcmp(o, "--split")) {
            NEED_VALUE();
            a->split = v;
        } else if (!strcmp(o, "--batch-size")) {
            NEED_VALUE();
            if (!cli_int_arg(o, v, 1, 2147483647, &n)) return CLI_USAGE;
            a->batch_size = n;
        } else if (!strcmp(o, "--layer")) {
            NEED_VALUE();
            x.layer = v;
        } else if (!strcmp(o, "--neuron")) {
            NEED_VALUE();
            int nd = parse_ints(v, x.neuron_index, CATTR_MAX_DIMS);
            if (nd < 1) return cli_usage_error("--neuron needs the neuron's indices without the batch dim, e.g. 3,1,1");
            x.neuron_kind = CATTR_NEURON_INDEX;
            x.neuron_ndim = nd;
        } else if (!strcmp(o, "--layer-input")) {
            x.attribute_to_layer_input = 1;
        } else if (!strcmp(o, "--eps")) {
            NEED_VALUE();
            if (!cli_parse_double(v, &x.eps) || !(x.eps >= 0) || !isfinite(x.eps))
                return cli_usage_error("--eps needs a finite number >= 0, not '%s'", v);
        } else if (!strcmp(o, "--feature-mask")) {
            NEED_VALUE();
            if (a->n_masks >= MAXT - 1) return cli_usage_error("too many --feature-mask");
            a->masks[a->n_masks++] = v;
        } else if (!strcmp(o, "--sliding-window") || !strcmp(o, "--strides")) {
            NEED_VALUE();
            bool win = !strcmp(o, "--sliding-window");
            int *cnt = win ? &n_windows : &n_strides;
            if (*cnt >= CATTR_MAX_INPUTS) return cli_usage_error("too many %s", o);
            int64_t dims[CATTR_MAX_DIMS];
            int nd = parse_ints(v, dims, CATTR_MAX_DIMS);
            if (nd < 1) return cli_usage_error("%s needs sizes such as 1,3,3: '%s'", o, v);
            for (int d = 0; d < nd; d++)
                if (dims[d] < 1) return cli_usage_error("%s sizes must be positive: '%s'", o, v);
            memcpy(win ? x.sliding_window[*cnt] : x.strides[*cnt], dims, (size_t)nd * sizeof(int64_t));
            (win ? x.sliding_window_ndim : x.strides_ndim)[*cnt] = nd;
            (*cnt)++;
        } else if (!strcmp(o, "--stdevs")) {
            NEED_VALUE();
            if (!cli_parse_double(v, &x.stdevs) || !(x.stdevs >= 0) || !isfinite(x.stdevs))
                return cli_usage_error("--stdevs needs a finite number >= 0, not '%s'", v);
            have_stdevs = true;
        } else if (!strcmp(o, "--noise-tunnel")) {
            NEED_VALUE();
            if (!strcmp(v, "smoothgrad")) x.nt_type = CATTR_NT_SMOOTHGRAD;
            else if (!strcmp(v, "smoothgrad_sq") || !strcmp(v, "smoothgrad-sq")) x.nt_type = CATTR_NT_SMOOTHGRAD_SQ;
            else if (!strcmp(v, "vargrad")) x.nt_type = CATTR_NT_VARGRAD;
            else return cli_usage_error("--noise-tunnel must be smoothgrad, smoothgrad_sq or vargrad, not '%s'", v);
        } else if (!strcmp(o, "--nt-samples")) {
            NEED_VALUE();
            if (!cli_int_arg(o, v, 1, 1000000, &n)) return CLI_USAGE;
            x.nt_samples = (int)n;
        } else if (!strcmp(o, "--nt-samples-batch-size")) {
            NEED_VALUE();
            if (!cli_int_arg(o, v, 1, 1000000, &n)) return CLI_USAGE;
            x.nt_samples_batch_size = (int)n;
        } else if (!strcmp(o, "--draw-baseline-from-distrib")) {
            x.draw_baseline_from_distrib = 1;
        } else if (!strcmp(o, "--overlay")) {
            a->overlay = true;
        } else if (!strcmp(o, "--sign")) {
            NEED_VALUE();
            if (strcmp(v, "all") && strcmp(v, "positive") && strcmp(v, "negative") && strcmp(v, "absolute_value"))
                return cli_usage_error("--sign must be all, positive, negative or absolute_value");
            a->sign = v;
        } else if (!strcmp(o, "--outlier-perc")) {
            NEED_VALUE();
            if (!cli_parse_double(v, &a->outlier_perc) || a->outlier_perc < 0 || a->outlier_perc >= 100)
                return cli_usage_error("--outlier-perc must be a number in [0, 100), not '%s'", v);
        } else if (!strcmp(o, "--heatmap")) {
            a->heatmap = true;
        } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            a->quiet = true;
        } else if (!strcmp(o, "--progress")) {
            a->progress = true;
        } else if (!strcmp(o, "--signed")) {
            signed_sal = true;
        } else if (!strcmp(o, "--no-multiply-by-inputs")) {
            no_mul = true;
        } else if (!strcmp(o, "--no-delta")) {
            a->no_delta = true;
        } else if (o[0] == '-' && o[1]) {
            return cli_usage_error("explain: unknown option '%s' (see cattr explain --help)", o);
        } else if (!a->model) {
            a->model = o;
        } else {
            return cli_usage_error("explain: unexpected argument '%s'", o);
        }
#undef NEED_VALUE
    }
    cattr_attr_params def = cattr_attr_default_params((cattr_method)method);
    def.dtype = a->p.dtype;
    def.n_steps = a->p.n_steps;
    def.delta_tol = a->p.delta_tol;
    def.max_steps = a->p.max_steps;
    def.quadrature = a->p.quadrature;
    def.internal_batch_size = a->p.internal_batch_size;
    def.max_memory = a->p.max_memory;
    def.executor = a->p.executor;
    def.device = a->p.device;
    def.precision = a->p.precision;
    def.abs = !signed_sal;
    def.multiply_by_inputs = !no_mul;
    def.return_convergence_delta = !a->no_delta;
    def.eps = x.eps;
    def.layer = x.layer;
    def.neuron_kind = x.neuron_kind;
    def.neuron_ndim = x.neuron_ndim;
    memcpy(def.neuron_index, x.neuron_index, sizeof def.neuron_index);
    def.attribute_to_layer_input = x.attribute_to_layer_input;
    def.perturbations_per_eval = x.perturbations_per_eval;
    if (have_n_samples) def.n_samples = x.n_samples;
    if (have_stdevs) def.stdevs = x.stdevs;
    def.nt_type = x.nt_type;
    def.nt_samples = x.nt_samples;
    def.nt_samples_batch_size = x.nt_samples_batch_size;
    def.draw_baseline_from_distrib = x.draw_baseline_from_distrib;
    def.seed = x.seed;
    memcpy(def.sliding_window, x.sliding_window, sizeof def.sliding_window);
    memcpy(def.sliding_window_ndim, x.sliding_window_ndim, sizeof def.sliding_window_ndim);
    memcpy(def.strides, x.strides, sizeof def.strides);
    memcpy(def.strides_ndim, x.strides_ndim, sizeof def.strides_ndim);
    a->p = def;
    if (!a->model) return cli_usage_error("explain: no model given (see cattr explain --help)");
    if (!a->n_in) return cli_usage_error("explain: give at least one --input");
    if (evaluate && !cli_metrics_any(&a->metrics))
        return cli_usage_error("evaluate: give --metric LIST (infidelity, sensitivity, deletion, insertion, "
                               "randomization)");
    if (evaluate && (a->batch_size || a->split))
        return cli_usage_error("evaluate: --batch-size and --split are explain's (the metrics need the whole call)");
    if (evaluate && a->output && !ends_with(a->output, ".json"))
        return cli_usage_error("evaluate: --output must be a .json file (the attributions and the metrics): '%s'",
                               a->output);
    if (!a->output && !evaluate && !mem)
        return cli_usage_error("explain: --output FILE is required (.npy, .safetensors or .json)");
    if (a->output && !ends_with(a->output, ".npy") && !ends_with(a->output, ".safetensors") &&
        !ends_with(a->output, ".json"))
        return cli_usage_error("--output must end in .npy, .safetensors or .json: '%s'", a->output);
    if (ends_with(a->output, ".npy") && a->n_in > 1)
        return cli_usage_error("--output .npy holds one tensor; with %d inputs use .safetensors or .json", a->n_in);
    if (a->n_base > 1 && a->n_base != a->n_in)
        return cli_usage_error("give one --baseline for all inputs or one per input (%d inputs, %d baselines)", a->n_in,
                               a->n_base);
    if (!!a->target + !!a->targets + !!a->target_file > 1)
        return cli_usage_error("use only one of --target, --targets and --target-file");
    if ((a->target || a->targets || a->target_file) && !cattr_method_takes_target(a->p.method))
        return cli_usage_error("%s takes no target (it attributes a %s's value, not a model output): leave out "
                               "--target, --targets and --target-file", cattr_method_name(a->p.method),
                               a->p.method == CATTR_METHOD_LAYER_ACTIVATION ? "layer" : "neuron");
    cattr_attr_params dflt = cattr_attr_default_params(a->p.method);
    if (a->p.n_steps != CATTR_STEPS_AUTO && (a->p.delta_tol != dflt.delta_tol || a->p.max_steps != dflt.max_steps))
        return cli_usage_error("--delta-tol and --max-steps go with --steps auto");
    if (a->split && a->p.n_steps == CATTR_STEPS_AUTO)
        return cli_usage_error("--split steps needs a number of --steps, not auto (every part cuts the same steps)");
    if (a->split) {
        cattr_method mk = a->p.method;
        bool nt = a->p.nt_type != CATTR_NT_NONE;
        const char *kind = cattr_split_kind(&a->p);
        if (strcmp(a->split, "steps") != 0 && strcmp(a->split, "features") != 0 && strcmp(a->split, "samples") != 0)
            return cli_usage_error("--split %s: give steps, features or samples", a->split);
        if (!kind)
            return cli_usage_error("--split splits integrated-gradients and the layer and neuron path methods "
                                   "(steps), feature-ablation, feature-permutation, "
                                   "occlusion (features), shapley-value-sampling, shapley-values, lime, kernel-shap, "
                                   "gradient-shap and a --noise-tunnel around saliency, input-x-gradient, "
                                   "guided-backprop, deconvolution, integrated-gradients, deeplift, feature-ablation, "
                                   "occlusion, shapley-value-sampling, lime or kernel-shap (samples); not %s%s",
                                   cattr_method_name(mk),
                                   nt ? " with --noise-tunnel" : "");
        if (strcmp(a->split, kind) != 0)
            return cli_usage_error("--split %s does not apply to %s: its work is split with --split %s", a->split,
                                   cattr_method_name(mk), kind);
    }
    if (a->split && (a->batch_size || a->runs || a->precision_error))
        return cli_usage_error("--split cannot be combined with --batch-size, --runs or --precision-error");
    if (a->batch_size && a->p.method == CATTR_METHOD_FEATURE_PERMUTATION)
        return cli_usage_error("--batch-size cannot split feature-permutation, which permutes across the batch");
    if (a->n_masks && a->n_masks != a->n_in)
        return cli_usage_error("give one --feature-mask per input (%d inputs, %d masks)", a->n_in, a->n_masks);
    if (a->png && !ends_with(a->png, ".png")) return cli_usage_error("--png must name a .png file: '%s'", a->png);
    return 0;
}

typedef struct {
    cattr_target t;
    int64_t *idx;
} target_buf;

static int build_target(const explain_args *a, const cattr_tensor *out, int64_t B, target_buf *tb, bool *auto_pred) {
    tb->idx = NULL;
    tb->t = (cattr_target){CATTR_TARGET_NONE, 0, 0, NULL};
    *auto_pred = false;
    if (a->target) {
        tb->idx = malloc(CATTR_MAX_DIMS * sizeof(int64_t));
        int n = tb->idx ? parse_ints(a->target, tb->idx, CATTR_MAX_DIMS) : -1;
        if (n < 1) return cli_usage_error("--target must be an index or a tuple such as 1,0,0: '%s'", a->target);
        tb->t = (cattr_target){CATTR_TARGET_INDEX, n, 0, tb->idx};
        return 0;
    }
    if (a->targets) {
        size_t cap = strlen(a->targets) + 1;
        tb->idx = malloc(cap * sizeof(int64_t));
        char *copy = strdup(a->targets);
        if (!tb->idx || !copy) return cli_usage_error("out of memory");
        int k = -1, rows = 0, total = 0;
        char *save = NULL;
        bool tuples = strchr(copy, ';') != NULL;
        if (!tuples) {
            total = parse_ints(copy, tb->idx, (int)cap);
            k = 1;
            rows = total;
        } else {
            for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
                int n = parse_ints(tok, tb->idx + total, (int)cap - total);
                if (n < 1 || (k >= 0 && n != k)) {
                    free(copy);
                    return cli_usage_error("--targets: every tuple needs the same length: '%s'", a->targets);
                }
                k = n;
                total += n;
                rows++;
            }
        }
        free(copy);
        if (total < 1 || rows < 1) return cli_usage_error("--targets: cannot parse '%s'", a->targets);
        if (rows != B) return cli_usage_error("--targets gives %d targets for a batch of %lld", rows, (long long)B);
        tb->t = (cattr_target){CATTR_TARGET_PER_EXAMPLE, k, rows, tb->idx};
        return 0;
    }
    if (a->target_file) {
        cattr_tensor *t = NULL, *ti = NULL;
        cattr_status st = cli_load_tensor(a->target_file, &t);
        if (st != CATTR_OK) return cli_error(st, "cannot read --target-file");
        st = cattr_tensor_convert(t, CATTR_INT64, &ti);
        cattr_tensor_free(t);
        if (st != CATTR_OK) return cli_error(st, "--target-file");
        int64_t n = cattr_tensor_numel(ti);
        tb->idx = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        if (tb->idx) memcpy(tb->idx, cattr_tensor_data(ti), (size_t)n * sizeof(int64_t));
        cattr_tensor_free(ti);
        if (n == 1) tb->t = (cattr_target){CATTR_TARGET_INDEX, 1, 0, tb->idx};
        else if (n == B) tb->t = (cattr_target){CATTR_TARGET_PER_EXAMPLE, 1, n, tb->idx};
        else return cli_usage_error("--target-file holds %lld targets for a batch of %lld", (long long)n, (long long)B);
        return 0;
    }
    /* default: the predicted class when the output is [B, C] with C > 1 */
    int ond = cattr_tensor_ndim(out);
    const int64_t *osh = cattr_tensor_shape(out);
    int64_t per = B ? cattr_tensor_numel(out) / B : 0;
    if (per <= 1) return 0;
    if (ond != 2) return cli_usage_error("the output has %d dims, so there is no predicted class to explain: give --target or --targets", ond);
    tb->idx = malloc((size_t)B * sizeof(int64_t));
    if (!tb->idx) return cli_usage_error("out of memory");
    cattr_tensor *od = NULL;
    cattr_tensor_convert(out, CATTR_FLOAT64, &od);
    const double *v = cattr_tensor_data_const(od);
    for (int64_t b = 0; b < B; b++) {
        int64_t best = 0;
        for (int64_t c = 1; c < osh[1]; c++)
            if (v[b * osh[1] + c] > v[b * osh[1] + best]) best = c;
        tb->idx[b] = best;
    }
    cattr_tensor_free(od);
    tb->t = (cattr_target){CATTR_TARGET_PER_EXAMPLE, 1, B, tb->idx};
    *auto_pred = true;
    return 0;
}

/* ---- writers ---------------------------------------------------------------------------------------------- */

typedef struct {
    const char *text;
} text_ctx;

static cattr_status write_text(FILE *f, void *ctx) {
    const char *s = ((text_ctx *)ctx)->text;
    return fputs(s, f) < 0 ? CATTR_ERR_IO : CATTR_OK;
}

static cJSON *tensor_json(const cattr_tensor *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; d < cattr_tensor_ndim(t); d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)cattr_tensor_shape(t)[d]));
    cJSON_AddStringToObject(o, "dtype", cattr_dtype_name(cattr_tensor_dtype(t)));
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cattr_tensor *d = NULL;
    cattr_tensor_convert(t, CATTR_FLOAT64, &d);
    const double *v = cattr_tensor_data_const(d);
    for (int64_t i = 0; i < cattr_tensor_numel(t); i++) cJSON_AddItemToArray(data, cJSON_CreateNumber(v[i]));
    cattr_tensor_free(d);
    return o;
}

static int write_output(const explain_args *a, cattr_tensor **attr, int n, const cattr_tensor *delta,
                        const cattr_target *tg, cJSON *metrics) {
    if (!a->output && !a->mem_json) return CLI_OK; /* evaluate without --output: the metrics are printed */
    cattr_status st;
    if (ends_with(a->output, ".npy")) {
        st = cattr_tensor_save_npy(attr[0], a->output);
    } else if (ends_with(a->output, ".safetensors")) {
        cattr_tensor_set *s = NULL;
        st = cattr_tensor_set_new(&s);
        char name[32];
        for (int i = 0; i < n && st == CATTR_OK; i++) {
            snprintf(name, sizeof name, "attr.%d", i);
            st = cattr_tensor_set_add(s, name, attr[i]);
        }
        if (st == CATTR_OK && delta) st = cattr_tensor_set_add(s, "delta", delta);
        if (st == CATTR_OK) st = cattr_tensor_set_save(s, a->output);
        cattr_tensor_set_free(s);
    } else {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", a->model);
        cJSON_AddStringToObject(root, "method", cattr_method_name(a->p.method));
        cJSON *args = cJSON_AddObjectToObject(root, "args");
        cJSON_AddStringToObject(args, "dtype", cattr_dtype_name(a->p.dtype));
        if (a->p.method == CATTR_METHOD_INTEGRATED_GRADIENTS ||
            a->p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) {
            cJSON_AddNumberToObject(args, "n_steps", a->steps_used > 0 ? a->steps_used : a->p.n_steps);
            if (a->p.n_steps == CATTR_STEPS_AUTO) {
                cJSON *au = cJSON_AddObjectToObject(args, "n_steps_auto");
                cJSON_AddNumberToObject(au, "delta_tol", a->p.delta_tol);
                cJSON_AddNumberToObject(au, "max_steps", a->p.max_steps);
            }
            cJSON_AddStringToObject(args, "method", cattr_quadrature_name(a->p.quadrature));
            cJSON_AddBoolToObject(args, "multiply_by_inputs", a->p.multiply_by_inputs);
        }
        if (a->p.method == CATTR_METHOD_SALIENCY) cJSON_AddBoolToObject(args, "abs", a->p.abs);
        if (tg->kind == CATTR_TARGET_NONE) cJSON_AddNullToObject(root, "target");
        else {
            cJSON *t = cJSON_AddArrayToObject(root, "target");
            int64_t rows = tg->kind == CATTR_TARGET_PER_EXAMPLE ? tg->n_rows : 1;
            for (int64_t r = 0; r < rows; r++) {
                cJSON *row = cJSON_CreateArray();
                for (int k = 0; k < tg->n_idx; k++) cJSON_AddItemToArray(row, cJSON_CreateNumber((double)tg->idx[r * tg->n_idx + k]));
                cJSON_AddItemToArray(t, row);
            }
        }
        cJSON *arr = cJSON_AddArrayToObject(root, "attributions");
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, tensor_json(attr[i]));
        if (delta) cJSON_AddItemToObject(root, "convergence_delta", tensor_json(delta));
        else cJSON_AddNullToObject(root, "convergence_delta");
        if (metrics) cJSON_AddItemReferenceToObject(root, "metrics", metrics);
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (!text) return cli_usage_error("out of memory writing JSON");
        size_t len = strlen(text);
        char *withnl = malloc(len + 2);
        if (!withnl) {
            free(text);
            return cli_usage_error("out of memory");
        }
        memcpy(withnl, text, len);
        withnl[len] = '\n';
        withnl[len + 1] = 0;
        free(text);
        if (a->mem_json) { /* cattr serve: the answer's body */
            *a->mem_json = withnl;
            return 0;
        }
        text_ctx ctx = {withnl};
        st = cx_write_file_atomic(a->output, write_text, &ctx);
        free(withnl);
    }
    if (st != CATTR_OK) return cli_error(st, "cannot write the output");
    return 0;
}

/* The attribution of example 0, input 0, reduced to its last two dims (channels summed). */
static int cmp_abs_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *map2d(const cattr_tensor *t, int *h, int *w) {
    int nd = cattr_tensor_ndim(t);
    const int64_t *sh = cattr_tensor_shape(t);
    if (nd < 2) return NULL;
    int64_t H = nd >= 3 ? sh[nd - 2] : 1, W = sh[nd - 1];
    int64_t per = cattr_tensor_numel(t) / (sh[0] ? sh[0] : 1), planes = H * W > 0 ? per / (H * W) : 0;
    double *m = calloc((size_t)(H * W), sizeof *m);
    if (!m) return NULL;
    cattr_tensor *d = NULL;
    cattr_tensor_convert(t, CATTR_FLOAT64, &d);
    const double *v = cattr_tensor_data_const(d);
    for (int64_t p = 0; p < planes; p++)
        for (int64_t k = 0; k < H * W; k++) m[k] += v[p * H * W + k];
    cattr_tensor_free(d);
    *h = (int)H;
    *w = (int)W;
    return m;
}

/* Captum's visualize_image_attr conventions: the map by sign mode (all, positive, negative, absolute_value), scaled
 * by the value where the cumulative sum of the sorted |values| reaches (100 - outlier_perc)% and clipped to [-1, 1]. */
static void normalize_map(double *m, int n, const char *sign, double outlier_perc) {
    for (int i = 0; i < n; i++) {
        if (!strcmp(sign, "absolute_value")) m[i] = fabs(m[i]);
        else if (!strcmp(sign, "positive")) m[i] = m[i] > 0 ? m[i] : 0;
        else if (!strcmp(sign, "negative")) m[i] = m[i] < 0 ? m[i] : 0;
    }
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return;
    for (int i = 0; i < n; i++) v[i] = fabs(m[i]);
    qsort(v, (size_t)n, sizeof *v, cmp_abs_double);
    double total = 0, cum = 0, thr = v[n - 1];
    for (int i = 0; i < n; i++) total += v[i];
    for (int i = 0; i < n; i++) { /* the first value whose cumulative sum reaches the percentile */
        cum += v[i];
        if (cum >= total * 0.01 * (100.0 - outlier_perc)) {
            thr = v[i];
            break;
        }
    }
    free(v);
    if (thr <= 0) return;
    for (int i = 0; i < n; i++) {
        double x = m[i] / thr;
        m[i] = x > 1 ? 1 : (x < -1 ? -1 : x);
    }
}

/* Nearest-neighbour resize of an h x w map to H x W (Captum's LayerAttribution.interpolate, mode "nearest"). */
static double *resize_nearest(const double *m, int h, int w, int H, int W) {
    double *o = malloc((size_t)H * (size_t)W * sizeof *o);
    for (int y = 0; o && y < H; y++)
        for (int x = 0; x < W; x++) {
            int sy = (int)floorf((float)y * ((float)h / (float)H)), sx = (int)floorf((float)x * ((float)w / (float)W));
            o[y * W + x] = m[(sy < h ? sy : h - 1) * w + (sx < w ? sx : w - 1)];
        }
    return o;
}

/* Prints each example's predicted class and the class being explained (for [B, C] outputs). */
static void print_prediction(const cattr_tensor *out, int64_t B, const target_buf *tb, bool auto_pred) {
    if (cattr_tensor_ndim(out) != 2 || cattr_tensor_shape(out)[1] < 2) return;
    const int64_t C = cattr_tensor_shape(out)[1];
    cattr_tensor *od = NULL;
    if (cattr_tensor_convert(out, CATTR_FLOAT64, &od) != CATTR_OK) return;
    const double *v = cattr_tensor_data_const(od);
    for (int64_t b = 0; b < B && b < 8; b++) {
        int64_t best = 0;
        for (int64_t c = 1; c < C; c++)
            if (v[b * C + c] > v[b * C + best]) best = c;
        printf("example %lld: predicted class %lld (score %.4g)", (long long)b, (long long)best, v[b * C + best]);
        if (tb->t.kind != CATTR_TARGET_NONE && tb->t.n_idx == 1) {
            int64_t t = tb->t.kind == CATTR_TARGET_PER_EXAMPLE ? tb->idx[b] : tb->idx[0];
            if (t < 0) /* Python indexing, as Captum: -1 is the last class */
                printf(", explaining class %lld (%lld counts from the end, as in Python)", (long long)(t + C), (long long)t);
            else printf(", explaining class %lld%s", (long long)t, auto_pred ? " (the prediction; --target to choose)" : "");
        }
        printf("\n");
    }
    if (B > 8) printf("... (%lld examples)\n", (long long)B);
    cattr_tensor_free(od);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rows [b0, b1) of t, or a copy of t when its first dim is not the batch (scalars, batch-1 or distribution rows). */
static cattr_tensor *rows_of(const cattr_tensor *t, int64_t B, int64_t b0, int64_t b1, bool per_example) {
    if (!t) return NULL;
    cattr_tensor *o = NULL;
    if (!per_example || cattr_tensor_ndim(t) < 1 || cattr_tensor_shape(t)[0] != B) {
        cattr_tensor_convert(t, cattr_tensor_dtype(t), &o);
        return o;
    }
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, cattr_tensor_shape(t), sizeof sh);
    sh[0] = b1 - b0;
    size_t row = cattr_tensor_numel(t) / (B ? B : 1) * cattr_dtype_size(cattr_tensor_dtype(t));
    cattr_tensor_from_data(cattr_tensor_dtype(t), cattr_tensor_ndim(t), sh,
                           (const char *)cattr_tensor_data_const(t) + (size_t)b0 * row, &o);
    return o;
}

/* [a; b] along dim 0 (a may be NULL: returns a copy of b). */
static cattr_tensor *cat_rows(cattr_tensor *a, const cattr_tensor *b) {
    cattr_tensor *o = NULL;
    if (!a) {
        cattr_tensor_convert(b, cattr_tensor_dtype(b), &o);
        return o;
    }
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, cattr_tensor_shape(a), sizeof sh);
    sh[0] += cattr_tensor_shape(b)[0];
    size_t na = cattr_tensor_numel(a) * cattr_dtype_size(cattr_tensor_dtype(a));
    size_t nb = cattr_tensor_numel(b) * cattr_dtype_size(cattr_tensor_dtype(b));
    if (cattr_tensor_new(cattr_tensor_dtype(a), cattr_tensor_ndim(a), sh, &o) != CATTR_OK) return NULL;
    memcpy(cattr_tensor_data(o), cattr_tensor_data_const(a), na);
    memcpy((char *)cattr_tensor_data(o) + na, cattr_tensor_data_const(b), nb);
    return o;
}

/* The attribution in batches of `bs` examples, concatenated (examples are independent for every method but
 * FeaturePermutation, which shuffles across the batch). */
static cattr_status run_in_batches(cattr_explainer *e, const cattr_call *call, int64_t bs, bool distribution,
                                   cattr_tensor **attr, cattr_tensor **delta, int *steps_used) {
    int64_t B = cattr_tensor_shape(call->inputs[0])[0];
    if (bs <= 0 || bs >= B) {
        cattr_status st = cattr_explainer_run(e, call, attr, delta);
        *steps_used = cattr_explainer_steps_used(e);
        return st;
    }
    *steps_used = 0;
    cattr_status st = CATTR_OK;
    for (int64_t b0 = 0; b0 < B && st == CATTR_OK; b0 += bs) {
        int64_t b1 = b0 + bs < B ? b0 + bs : B;
        cattr_tensor *in[MAXT] = {0}, *bl[MAXT] = {0}, *ad[MAXT] = {0}, *mk[MAXT] = {0}, *pa[MAXT] = {0}, *pd = NULL;
        int64_t *tidx = NULL;
        cattr_target t = call->target ? *call->target : (cattr_target){CATTR_TARGET_NONE, 0, 0, NULL};
        for (int i = 0; i < call->n_inputs; i++) {
            in[i] = rows_of(call->inputs[i], B, b0, b1, true);
            bl[i] = call->baselines ? rows_of(call->baselines[i], B, b0, b1, !distribution) : NULL;
            mk[i] = call->feature_masks ? rows_of(call->feature_masks[i], B, b0, b1, true) : NULL;
        }
        for (int j = 0; j < call->n_additional; j++) ad[j] = rows_of(call->additional[j], B, b0, b1, true);
        if (t.kind == CATTR_TARGET_PER_EXAMPLE) {
            tidx = malloc((size_t)((b1 - b0) * t.n_idx + 1) * sizeof *tidx);
            if (tidx) memcpy(tidx, t.idx + b0 * t.n_idx, (size_t)((b1 - b0) * t.n_idx) * sizeof *tidx);
            t.idx = tidx;
            t.n_rows = b1 - b0;
        }
        cattr_call c = *call;
        c.inputs = (const cattr_tensor *const *)in;
        c.baselines = call->baselines ? (const cattr_tensor *const *)bl : NULL;
        c.additional = (const cattr_tensor *const *)ad;
        c.feature_masks = call->feature_masks ? (const cattr_tensor *const *)mk : NULL;
        c.target = &t;
        st = cattr_explainer_run(e, &c, pa, delta ? &pd : NULL);
        if (cattr_explainer_steps_used(e) > *steps_used) *steps_used = cattr_explainer_steps_used(e);
        for (int i = 0; i < MAXT && pa[i] && st == CATTR_OK; i++) { /* per input, or per layer tensor */
            cattr_tensor *joined = cat_rows(attr[i], pa[i]);
            cattr_tensor_free(attr[i]);
            attr[i] = joined;
        }
        if (st == CATTR_OK && delta && pd) {
            cattr_tensor *joined = cat_rows(*delta, pd);
            cattr_tensor_free(*delta);
            *delta = joined;
        }
        for (int i = 0; i < MAXT; i++) {
            cattr_tensor_free(in[i]);
            cattr_tensor_free(bl[i]);
            cattr_tensor_free(ad[i]);
            cattr_tensor_free(mk[i]);
            cattr_tensor_free(pa[i]);
        }
        cattr_tensor_free(pd);
        free(tidx);
    }
    return st;
}


/* --additional NAME=FILE: *m becomes the model with the inputs not named first (the attributed ones, in model order)
 * and the named ones after, in the order given; *orig keeps the loaded model, which the new one borrows from (free
 * both). Returns 0 or the exit code (the message printed). */
static int order_inputs(const explain_args *a, cattr_model **m, cattr_model **orig) {
    int named = 0, ni = cattr_model_n_inputs(*m);
    for (int i = 0; i < a->n_add; i++) named += a->add_name[i][0] != '\0';
    if (!named) return 0;
    if (named != a->n_add) return cli_usage_error("give every --additional as NAME=FILE, or none");
    if (ni > 2 * MAXT) return cli_usage_error("'%s' has %d inputs: too many", a->model, ni);
    int order[2 * MAXT], k = 0, idx[MAXT];
    bool used[2 * MAXT] = {0};
    for (int i = 0; i < a->n_add; i++) {
        idx[i] = -1;
        for (int j = 0; j < ni && idx[i] < 0; j++)
            if (strcmp(cattr_model_input_name(*m, j), a->add_name[i]) == 0) idx[i] = j;
        if (idx[i] < 0) {
            char names[1024] = "";
            size_t off = 0;
            for (int j = 0; j < ni && off < sizeof names; j++)
                off += (size_t)snprintf(names + off, sizeof names - off, "%s'%s'", j ? ", " : "", cattr_model_input_name(*m, j));
            return cli_usage_error("--additional %s=...: '%s' has no input called '%s' (its inputs: %s)", a->add_name[i],
                                   a->model, a->add_name[i], names);
        }
        if (used[idx[i]]) return cli_usage_error("--additional: input '%s' is given twice", a->add_name[i]);
        used[idx[i]] = true;
    }
    for (int j = 0; j < ni; j++)
        if (!used[j]) order[k++] = j;
    if (k != a->n_in)
        return cli_usage_error("'%s' takes %d inputs: with %d given by name, %d are attributed; got %d --input", a->model,
                               ni, a->n_add, k, a->n_in);
    for (int i = 0; i < a->n_add; i++) order[k++] = idx[i];
    cattr_model *r = NULL;
    cattr_status st = cattr_model_reorder_inputs(*m, order, ni, &r);
    if (st != CATTR_OK) return cli_error(st, "cannot reorder the model's inputs");
    *orig = *m;
    *m = r;
    return 0;
}

/* A tensor file, or in memory (cli_explain_mem) "@S<k>": a copy of the request's tensor k */
static cattr_status side_tensor(const explain_args *a, const char *spec, cattr_tensor **t) {
    if (a->mem_json && spec[0] == '@' && spec[1] == 'S') {
        char *end;
        long k = strtol(spec + 2, &end, 10);
        if (*end || end == spec + 2 || k < 0 || k >= a->n_mem_side)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' names no tensor of the request", spec);
        return cattr_tensor_convert(a->mem_side[k], cattr_tensor_dtype(a->mem_side[k]), t);
    }
    return cli_load_tensor(spec, t);
}

/* Reads the feature masks, additional inputs and baselines (whole) and checks the input count against the model.
 * Returns 0 or the exit code (the message printed). */
static int load_side_inputs(const explain_args *a, const cattr_model *m, cattr_tensor **masks, cattr_tensor **add,
                            cattr_tensor **base) {
    cattr_status st;
    for (int i = 0; i < a->n_masks; i++)
        if ((st = side_tensor(a, a->masks[i], &masks[i])) != CATTR_OK) return cli_error(st, "cannot read --feature-mask");
    for (int i = 0; i < a->n_add; i++)
        if ((st = cli_load_tensor(a->additional[i], &add[i])) != CATTR_OK) return cli_error(st, "cannot read --additional");
    for (int i = 0; i < a->n_in && a->n_base; i++) {
        const char *spec = a->baselines[a->n_base == 1 ? 0 : i];
        double v;
        if (cli_parse_double(spec, &v)) st = cattr_tensor_from_data(CATTR_FLOAT64, 0, NULL, &v, &base[i]);
        else st = side_tensor(a, spec, &base[i]);
        if (st != CATTR_OK) return cli_error(st, "cannot read --baseline");
    }
    if (a->n_in + a->n_add != cattr_model_n_inputs(m))
        return cli_usage_error("'%s' takes %d inputs; got %d --input and %d --additional", a->model,
                               cattr_model_n_inputs(m), a->n_in, a->n_add);
    return 0;
}

/* ---- one attribution split over ranks (--split steps) -----------------------------------------------------------
 * Every rank computes parts of the call (cattr_explainer_run_part), rank 0 combines them (cattr_explainer_combine):
 * the attributions of one process whose IG chunks are cut alike (cli_split_run). */
typedef struct split_call {
    cattr_explainer *e;
    const cattr_call *call;
    cattr_tensor **attr, **delta;
} split_call;

static cattr_status split_part(void *user, int part, int n_parts, void **blob, size_t *len) {
    split_call *s = user;
    return cattr_explainer_run_part(s->e, s->call, part, n_parts, blob, len);
}

static cattr_status split_combine(void *user, const void *const *blobs, const size_t *lens, int n) {
    split_call *s = user;
    return cattr_explainer_combine(s->e, s->call, blobs, lens, n, s->attr, s->delta);
}

static cattr_status run_split(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr, cattr_tensor **delta,
                              bool quiet) {
    split_call s = {e, call, attr, delta};
    int64_t rows = call->n_inputs && cattr_tensor_ndim(call->inputs[0]) ? cattr_tensor_shape(call->inputs[0])[0] : 1;
    return cli_split_run(split_part, split_combine, &s, rows, quiet);
}

/* ---- dataset mode ------------------------------------------------------------------------------------------
 * `--batch-size N` with an .npy or .safetensors --output: the inputs are read N rows at a time from their files (a
 * dataset larger than memory), each batch is attributed and written at its place in OUTPUT.part (the whole file's
 * header first), made durable, and counted in OUTPUT.part.json; when every row is there OUTPUT.part becomes OUTPUT.
 * Rerunning the same command after an interruption resumes after the last batch counted. Under mpirun the batches
 * are handed out over the ranks (mpi_driver.h); rank 0 writes them, in order, so the file is one process's. Baselines,
 * feature masks, additional inputs and targets are read whole (one row, or one per example). */

typedef struct stream_run {
    explain_args *a;
    cattr_model *m, *m_orig; /* m_orig: the loaded model when m reorders its inputs (--additional NAME=FILE) */
    cattr_explainer *e;
    cx_rows_reader rd[MAXT];
    cattr_tensor **base, **masks, **add;
    target_buf tb;              /* an explicit target for the whole dataset (kind NONE: each batch's prediction) */
    bool dist;
    int64_t R, bs, first;       /* rows, rows per batch, the first batch still to do */
    cJSON *identity;            /* rank 0: what makes the output (the progress file without rows_done) */
    int part_fd;                /* rank 0: OUTPUT.part, open and locked from the start */
    cx_rows_writer *w;          /* rank 0: the writer on it, from the first result */
    char *progress;             /* rank 0: OUTPUT.part.json */
    double start;
    bool show;
    int64_t done;
} stream_run;

static cattr_status progress_write(stream_run *s, int64_t rows_done);

/* Appends tensor t (dtype, ndim, shape, data) to the result bytes. */
static bool put_tensor(char **buf, size_t *len, size_t *cap, const cattr_tensor *t) {
    int32_t hd[2] = {(int32_t)cattr_tensor_dtype(t), cattr_tensor_ndim(t)};
    size_t db = (size_t)cattr_tensor_numel(t) * cattr_dtype_size(cattr_tensor_dtype(t));
    size_t need = *len + sizeof hd + (size_t)hd[1] * sizeof(int64_t) + db;
    if (need > *cap) {
        size_t c = need * 2;
        char *nb = realloc(*buf, c);
        if (!nb) return false;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, hd, sizeof hd);
    *len += sizeof hd;
    memcpy(*buf + *len, cattr_tensor_shape(t), (size_t)hd[1] * sizeof(int64_t));
    *len += (size_t)hd[1] * sizeof(int64_t);
    memcpy(*buf + *len, cattr_tensor_data_const(t), db);
    *len += db;
    return true;
}

/* One batch (mpi_driver_work_fn): its rows attributed; *data = int32 count, then the tensors (attributions, then the
 * delta when there is one), or the error message after a status < 0. */
static int stream_work(int64_t item, char **data, size_t *len, void *user) {
    stream_run *s = user;
    explain_args *a = s->a;
    int64_t b0 = (s->first + item) * s->bs, b1 = b0 + s->bs < s->R ? b0 + s->bs : s->R;
    cattr_tensor *in[MAXT] = {0}, *bl[MAXT] = {0}, *ad[MAXT] = {0}, *mk[MAXT] = {0}, *attr[MAXT] = {0}, *delta = NULL;
    cattr_tensor *out = NULL;
    target_buf tb = {{0}, NULL};
    int64_t *tidx = NULL;
    cattr_status st = CATTR_OK;
    int rc = 0;
    for (int i = 0; i < a->n_in && st == CATTR_OK; i++) st = cx_rows_read(&s->rd[i], b0, b1, &in[i]);
    for (int i = 0; i < a->n_in && st == CATTR_OK; i++) {
        bl[i] = a->n_base ? rows_of(s->base[i], s->R, b0, b1, !s->dist) : NULL;
        mk[i] = a->n_masks ? rows_of(s->masks[i], s->R, b0, b1, true) : NULL;
        if ((a->n_base && !bl[i]) || (a->n_masks && !mk[i])) st = CATTR_ERR_NO_MEMORY;
    }
    for (int j = 0; j < a->n_add && st == CATTR_OK; j++)
        if (!(ad[j] = rows_of(s->add[j], s->R, b0, b1, true))) st = CATTR_ERR_NO_MEMORY;
    cattr_target t = s->tb.t;
    if (st == CATTR_OK && t.kind == CATTR_TARGET_NONE) { /* each example's predicted class, as in one batch */
        const cattr_tensor *all[2 * MAXT];
        for (int i = 0; i < a->n_in; i++) all[i] = in[i];
        for (int j = 0; j < a->n_add; j++) all[a->n_in + j] = ad[j];
        bool auto_pred;
        st = cattr_model_forward(s->m, a->p.dtype, all, a->n_in + a->n_add, &out);
        if (st == CATTR_OK && build_target(a, out, b1 - b0, &tb, &auto_pred) != 0) st = CATTR_ERR_INVALID_ARGUMENT;
        t = tb.t;
    } else if (st == CATTR_OK && t.kind == CATTR_TARGET_PER_EXAMPLE) {
        tidx = malloc((size_t)((b1 - b0) * t.n_idx + 1) * sizeof *tidx);
        if (!tidx) st = CATTR_ERR_NO_MEMORY;
        else memcpy(tidx, t.idx + b0 * t.n_idx, (size_t)((b1 - b0) * t.n_idx) * sizeof *tidx);
        t.idx = tidx;
        t.n_rows = b1 - b0;
    }
    if (st == CATTR_OK) {
        cattr_call c = {(const cattr_tensor *const *)in, a->n_in, a->n_base ? (const cattr_tensor *const *)bl : NULL,
                        &t, (const cattr_tensor *const *)ad, a->n_add,
                        a->n_masks ? (const cattr_tensor *const *)mk : NULL, NULL, NULL, 0, NULL, 0, NULL};
        st = cattr_explainer_run(s->e, &c, attr, a->no_delta ? NULL : &delta);
    }
    size_t cap = 0;
    *data = NULL;
    *len = 0;
    if (st == CATTR_OK) {
        int32_t n = 0;
        while (n < MAXT && attr[n]) n++;
        int32_t cnt = n + (delta ? 1 : 0);
        cap = 1024;
        *data = malloc(cap);
        bool okb = *data != NULL;
        if (okb) {
            memcpy(*data, &cnt, sizeof cnt);
            *len = sizeof cnt;
        }
        for (int i = 0; i < n && okb; i++) okb = put_tensor(data, len, &cap, attr[i]);
        if (okb && delta) okb = put_tensor(data, len, &cap, delta);
        if (!okb) st = CATTR_ERR_NO_MEMORY;
    }
    if (st != CATTR_OK) { /* the message for rank 0 */
        free(*data);
        char msg[1024];
        snprintf(msg, sizeof msg, "rows %lld to %lld: %s", (long long)b0, (long long)b1,
                 st == CATTR_ERR_NO_MEMORY ? "out of memory" : cattr_last_error());
        *len = strlen(msg) + 1;
        *data = malloc(*len);
        if (*data) memcpy(*data, msg, *len);
        else *len = 0;
        rc = -1;
    }
    for (int i = 0; i < MAXT; i++) {
        cattr_tensor_free(in[i]);
        cattr_tensor_free(bl[i]);
        cattr_tensor_free(ad[i]);
        cattr_tensor_free(mk[i]);
        cattr_tensor_free(attr[i]);
    }
    cattr_tensor_free(delta);
    cattr_tensor_free(out);
    free(tb.idx);
    free(tidx);
    return rc;
}

/* Reads the next tensor of a batch result as a borrowed view. */
static bool get_tensor(const char **p, const char *end, cattr_tensor **t) {
    int32_t hd[2];
    if ((size_t)(end - *p) < sizeof hd) return false;
    memcpy(hd, *p, sizeof hd);
    *p += sizeof hd;
    int64_t sh[CATTR_MAX_DIMS] = {0};
    if (hd[1] < 0 || hd[1] > CATTR_MAX_DIMS || (size_t)(end - *p) < (size_t)hd[1] * sizeof(int64_t)) return false;
    memcpy(sh, *p, (size_t)hd[1] * sizeof(int64_t));
    *p += (size_t)hd[1] * sizeof(int64_t);
    if (cattr_tensor_wrap((cattr_dtype)hd[0], hd[1], sh, (void *)*p, t) != CATTR_OK) return false;
    size_t db = (size_t)cattr_tensor_numel(*t) * cattr_dtype_size((cattr_dtype)hd[0]);
    if ((size_t)(end - *p) < db) {
        cattr_tensor_free(*t);
        return false;
    }
    *p += db;
    return true;
}

static void stream_show(stream_run *s, bool last) {
    double el = now_s() - s->start, rate = el > 0 ? (double)(s->done - s->first * s->bs) / el : 0;
    double eta = rate > 0 ? (double)(s->R - s->done) / rate : 0;
    int width = 30, fill = s->R ? (int)(width * s->done / s->R) : width;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld rows, %.1f rows/s, ETA %.0f s  ", fill, "##############################",
            width - fill, "", (long long)s->done, (long long)s->R, rate, eta);
    if (last) fprintf(stderr, "\n");
}

/* Rank 0, in batch order (mpi_driver_deliver_fn): the batch written at its rows, made durable, counted. */
static int stream_deliver(int64_t item, int status, const char *data, size_t len, void *user) {
    stream_run *s = user;
    explain_args *a = s->a;
    if (status < 0) {
        fprintf(stderr, "%scattr: attribution failed: %s\n", s->show ? "\n" : "", len ? data : "(no message)");
        return CLI_FAIL;
    }
    int64_t b0 = (s->first + item) * s->bs;
    const char *p = data, *end = data + len;
    int32_t cnt = 0;
    if (len < sizeof cnt) return CLI_FAIL;
    memcpy(&cnt, p, sizeof cnt);
    p += sizeof cnt;
    cattr_tensor *t[MAXT + 1] = {0};
    bool okr = cnt >= 1 && cnt <= MAXT + 1;
    for (int i = 0; i < cnt && okr; i++) okr = get_tensor(&p, end, &t[i]);
    cattr_status st = okr ? CATTR_OK : cx_fail(CATTR_ERR_INTERNAL, "a batch result is malformed");
    int n_attr = a->no_delta ? cnt : cnt - 1;
    if (st == CATTR_OK && !s->w) { /* the first result gives the rows' shapes: the whole file's header */
        if (ends_with(a->output, ".npy") && n_attr > 1) {
            for (int i = 0; i < cnt; i++) cattr_tensor_free(t[i]);
            cli_usage_error("the method returned %d tensors: use an .safetensors --output", n_attr);
            return CLI_USAGE;
        }
        int nw = ends_with(a->output, ".npy") ? 1 : cnt, nd[MAXT + 1];
        cattr_dtype dt[MAXT + 1];
        int64_t sh[MAXT + 1][CATTR_MAX_DIMS];
        char names[MAXT + 1][16];
        const char *nm[MAXT + 1];
        for (int i = 0; i < nw; i++) {
            dt[i] = cattr_tensor_dtype(t[i]);
            nd[i] = cattr_tensor_ndim(t[i]);
            memcpy(sh[i], cattr_tensor_shape(t[i]), sizeof sh[i]);
            if (nd[i] < 1) nd[i] = 1, sh[i][0] = 1; /* a per-batch scalar cannot be streamed */
            sh[i][0] = s->R;
            if (i < n_attr) snprintf(names[i], sizeof names[i], "attr.%d", i);
            else snprintf(names[i], sizeof names[i], "delta");
            nm[i] = names[i];
        }
        st = cx_rows_writer_open(a->output, s->part_fd, nw, nm, dt, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh,
                                 s->first > 0, &s->w);
        s->part_fd = -1; /* the writer's from here */
    }
    int nw = s->w && ends_with(a->output, ".npy") ? 1 : cnt;
    for (int i = 0; i < nw && st == CATTR_OK; i++) {
        if (cattr_tensor_ndim(t[i]) < 1 || cattr_tensor_shape(t[i])[0] != (b0 + s->bs < s->R ? s->bs : s->R - b0))
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "tensor %d of the attribution has no row per example: it cannot be "
                         "written batch by batch (run without --batch-size)", i);
        else st = cx_rows_writer_put(s->w, i, b0, t[i]);
    }
    for (int i = 0; i < cnt; i++) cattr_tensor_free(t[i]);
    if (st == CATTR_OK) st = cx_rows_writer_sync(s->w);
    int64_t b1 = b0 + s->bs < s->R ? b0 + s->bs : s->R;
    if (st == CATTR_OK) st = progress_write(s, b1);
    if (st != CATTR_OK) {
        if (s->show) fprintf(stderr, "\n");
        return cli_error(st, "cannot write the output");
    }
    s->done = b1;
    if (s->show) stream_show(s, false);
    return 0;
}

/* The progress file (OUTPUT.part.json): what makes the output and how far it got,
 *     {"cattr_progress":1,"command":"explain","rows":R,"batch_size":N,"options":{...},
 *      "files":[{"what":"--input 1","path":"x.npy","fingerprint":"16 hex digits"},...],"rows_done":K}
 * options: the command line's (cli_options_json) but --output, --quiet and --max-memory (which only sizes the chunks);
 * files: the fingerprints of the model and of every file an option names (cx_file_fingerprint with times: a file
 * rewritten since is noticed). A rerun resumes only when all of it but rows_done is the same. */
#define PROGRESS_VERSION 1

/* The path of a tensor option's file (FILE.safetensors:NAME names FILE). */
static void spec_path(const char *spec, char *out, size_t size) {
    snprintf(out, size, "%s", spec);
    char *c = strstr(out, ".safetensors:");
    if (c) c[strlen(".safetensors")] = 0;
}

/* This run's identity: the progress file's fields but rows_done. NULL with a message printed on failure. */
static cJSON *run_identity(const explain_args *a, int argc, char **argv, int64_t rows) {
    static const char *const flags[] = {"--layer-input", "--draw-baseline-from-distrib", "--overlay", "--heatmap",
                                        "--quiet", "-q", "--signed", "--no-multiply-by-inputs", "--no-delta",
                                        "--precision-error", "--progress", NULL};
    static const char *const skip[] = {"--output", "--quiet", "--max-memory", "--progress", NULL};
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "cattr_progress", PROGRESS_VERSION);
    cJSON_AddStringToObject(j, "command", "explain");
    cJSON_AddNumberToObject(j, "rows", (double)rows);
    cJSON_AddNumberToObject(j, "batch_size", (double)a->batch_size);
    cJSON *opts = cli_options_json(argc, argv, flags, skip), *files = cJSON_AddArrayToObject(j, "files");
    if (!opts || !files) {
        cJSON_Delete(opts);
        cJSON_Delete(j);
        cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    cJSON_AddItemToObject(j, "options", opts);
    struct { const char *what; const char *const *v; int n; } groups[] = {
        {"model", &a->model, 1}, {"--input", a->inputs, a->n_in}, {"--additional", a->additional, a->n_add},
        {"--baseline", a->baselines, a->n_base}, {"--feature-mask", a->masks, a->n_masks},
        {"--target-file", &a->target_file, a->target_file ? 1 : 0}};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
        for (int i = 0; i < groups[g].n; i++) {
            double num;
            if (!strcmp(groups[g].what, "--baseline") && cli_parse_double(groups[g].v[i], &num)) continue; /* a number */
            char path[4096], what[64], hex[17];
            spec_path(groups[g].v[i], path, sizeof path);
            uint64_t fp = 0;
            cattr_status st = cx_file_fingerprint(path, true, &fp);
            if (st != CATTR_OK) {
                cJSON_Delete(j);
                cli_error(st, groups[g].what);
                return NULL;
            }
            snprintf(what, sizeof what, groups[g].n > 1 ? "%s %d" : "%s", groups[g].what, i + 1);
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fp);
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "what", what);
            cJSON_AddStringToObject(f, "path", path);
            cJSON_AddStringToObject(f, "fingerprint", hex);
            cJSON_AddItemToArray(files, f);
        }
    return j;
}

/* Writes the progress file: the identity and rows_done. */
static cattr_status progress_write(stream_run *s, int64_t rows_done) {
    cJSON *j = cJSON_Duplicate(s->identity, true);
    if (j) cJSON_AddNumberToObject(j, "rows_done", (double)rows_done);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    size_t n = strlen(text);
    char *line = malloc(n + 2);
    cattr_status st = line ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (line) {
        memcpy(line, text, n);
        memcpy(line + n, "\n", 2);
        st = cli_write_text_file(s->progress, line);
    }
    free(line);
    free(text);
    return st;
}

/* A progress file's text against this run's identity: the first row to do (>= 0, a multiple of the batch size), or -1
 * with what differs in msg (the file is another command's, or not a progress file of cattr). */
static int64_t progress_check(const char *text, const cJSON *id, const char *part, char *msg, size_t size) {
    cJSON *j = cJSON_Parse(text);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "cattr_progress"),
                *rows = cJSON_GetObjectItemCaseSensitive(j, "rows"),
                *bs = cJSON_GetObjectItemCaseSensitive(j, "batch_size"),
                *done = cJSON_GetObjectItemCaseSensitive(j, "rows_done"),
                *opts = cJSON_GetObjectItemCaseSensitive(j, "options"),
                *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    int64_t first = -1;
    double R = cJSON_GetObjectItemCaseSensitive(id, "rows")->valuedouble,
           B = cJSON_GetObjectItemCaseSensitive(id, "batch_size")->valuedouble;
    char diff[1536];
    if (!cJSON_IsObject(j) || !cJSON_IsNumber(ver) || ver->valuedouble != PROGRESS_VERSION || !cJSON_IsNumber(rows) ||
        !cJSON_IsNumber(bs) || !cJSON_IsNumber(done) || !cJSON_IsObject(opts) || !cJSON_IsArray(files)) {
        snprintf(msg, size, "its progress file is not one this version of cattr writes");
    } else if (cli_json_diff(cJSON_GetObjectItemCaseSensitive(id, "options"), opts, diff, sizeof diff)) {
        snprintf(msg, size, "it is another command's (%s)", diff);
    } else if (rows->valuedouble != R || bs->valuedouble != B) {
        snprintf(msg, size, "it is a run over %.0f rows in batches of %.0f (this one: %.0f rows)", rows->valuedouble,
                 bs->valuedouble, R);
    } else if (!((done->valuedouble >= 0 && done->valuedouble <= R && B > 0 && fmod(done->valuedouble, B) == 0) ||
                 done->valuedouble == R)) {
        snprintf(msg, size, "its progress file says %.0f rows are done, which is not a whole number of batches",
                 done->valuedouble);
    } else {
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(id, "files"), *f, *g = files->child;
        msg[0] = 0;
        cJSON_ArrayForEach(f, want) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(f, "what"), *p = cJSON_GetObjectItemCaseSensitive(f, "path"),
                        *fp = cJSON_GetObjectItemCaseSensitive(f, "fingerprint"),
                        *gfp = g ? cJSON_GetObjectItemCaseSensitive(g, "fingerprint") : NULL;
            if (!cJSON_IsString(gfp) || strcmp(gfp->valuestring, fp->valuestring)) {
                snprintf(msg, size, "the content of %s '%s' changed since it was begun", w->valuestring, p->valuestring);
                break;
            }
            g = g->next;
        }
        if (!msg[0] && g) snprintf(msg, size, "it reads other files");
        if (!msg[0]) first = (int64_t)done->valuedouble;
    }
    cJSON_Delete(j);
    (void)part;
    return first;
}

int cli_progress_fuzz(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1), msg[2048];
    cJSON *id = cJSON_Parse("{\"cattr_progress\":1,\"command\":\"explain\",\"rows\":600,\"batch_size\":10,"
                            "\"options\":{\"model\":\"m.onnx\",\"--batch-size\":\"10\"},\"files\":[{\"what\":\"model\","
                            "\"path\":\"m.onnx\",\"fingerprint\":\"0123456789abcdef\"}]}");
    if (text && id) {
        memcpy(text, data, size);
        text[size] = 0;
        (void)progress_check(text, id, "x.npy.part", msg, sizeof msg);
    }
    cJSON_Delete(id);
    free(text);
    return 0;
}

/* Removes OUTPUT.part (while this run holds its lock). */
static void unlink_part(const char *output) {
    char part[4096];
    snprintf(part, sizeof part, "%s.part", output);
    unlink(part);
}

/* The files of the command, before any is touched: no output may be an input or another output (cli_file_in/out). */
static bool register_files(const explain_args *a, bool dataset) {
    char path[4096];
    bool ok = cli_file_in(a->model, "the model");
    struct { const char *what; const char *const *v; int n; } in[] = {
        {"--input", a->inputs, a->n_in}, {"--additional", a->additional, a->n_add}, {"--baseline", a->baselines, a->n_base},
        {"--feature-mask", a->masks, a->n_masks}, {"--target-file", &a->target_file, a->target_file ? 1 : 0}};
    for (size_t g = 0; g < sizeof in / sizeof *in; g++)
        for (int i = 0; ok && i < in[g].n; i++) {
            double num;
            if (!strcmp(in[g].what, "--baseline") && cli_parse_double(in[g].v[i], &num)) continue;
            spec_path(in[g].v[i], path, sizeof path);
            ok = cli_file_in(path, in[g].what);
        }
    ok = ok && cli_file_out(a->output, "--output") && cli_file_out(a->png, "--png") &&
         cli_file_out(a->metrics.curve_png, "--curve-png");
    if (ok && dataset) {
        snprintf(path, sizeof path, "%s.part", a->output);
        ok = cli_file_out(path, "--output's part file");
        snprintf(path, sizeof path, "%s.part.json", a->output);
        ok = ok && cli_file_out(path, "--output's progress file");
    }
    return ok;
}

/* Rank 0: opens and locks OUTPUT.part and decides where to start: a new run (OUTPUT.part made now, or an empty one left
 * by a run killed as it began) starts at row 0; an OUTPUT.part with the progress file of this very command resumes
 * where it stopped; anything else is refused, naming what differs, and nothing is changed. Returns CLI_OK or the exit
 * code (the message printed). */
static int stream_open(stream_run *s) {
    explain_args *a = s->a;
    cx_dest kind;
    cattr_status st = cx_output_kind(a->output, &kind);
    if (st != CATTR_OK) return cli_error(st, "--output");
    if (kind == CX_DEST_STREAM)
        return cli_usage_error("--output '%s' is not a file: --batch-size writes '%s.part' and renames it (write to a "
                               "file, or leave out --batch-size)", a->output, a->output);
    bool created = false;
    if ((st = cx_rows_part_open(a->output, &s->part_fd, &created)) != CATTR_OK) return cli_error(st, "--output");
    struct stat sb;
    bool empty = fstat(s->part_fd, &sb) == 0 && sb.st_size == 0;
    s->first = 0;
    if (!created && !empty) { /* a part file with rows: resumed only when its progress file is this command's */
        void *text = NULL;
        size_t n = 0;
        char msg[2048];
        int64_t row = -1;
        if (cx_read_file(s->progress, &text, &n) != CATTR_OK)
            snprintf(msg, sizeof msg, "its progress file '%s' is missing or unreadable", s->progress);
        else
            row = progress_check(text, s->identity, a->output, msg, sizeof msg);
        free(text);
        if (row < 0)
            return cli_usage_error("'%s.part' is not an unfinished run of this command: %s. To finish that run, rerun "
                                   "the command that began it; to start this one, remove '%s.part' and '%s'",
                                   a->output, msg, a->output, s->progress);
        s->first = row / s->bs;
        if (row >= s->R) s->first = (s->R + s->bs - 1) / s->bs; /* every row is there: only the rename is left */
        return CLI_OK;
    }
    st = progress_write(s, 0);
    if (st != CATTR_OK) {
        if (created) unlink_part(a->output);
        return cli_error(st, "cannot write the progress file");
    }
    return CLI_OK;
}

static int explain_stream(explain_args *a, int argc, char **argv) {
    stream_run s;
    memset(&s, 0, sizeof s);
    s.a = a;
    s.bs = a->batch_size;
    s.part_fd = -1;
    cattr_tensor *base[MAXT] = {0}, *masks[MAXT] = {0}, *add[MAXT] = {0};
    s.base = base;
    s.masks = masks;
    s.add = add;
    int rc = CLI_OK, rank = 0;
    if (mpi_driver_start() != 0) {
        fprintf(stderr, "cattr: MPI cannot start (CATTR_NO_MPI=1 runs without it)\n");
        return CLI_FAIL;
    }
    rank = mpi_driver_rank();
    /* rank 0 (the only one that writes) checks the files; every rank that it runs rank 0's command */
    if (rank == 0 && !register_files(a, true)) rc = CLI_USAGE;
    rc = mpi_driver_max(rc);
    const char *agree[1 + MAXT] = {a->model};
    for (int i = 0; i < a->n_in; i++) agree[1 + i] = a->inputs[i];
    if (rc == CLI_OK && !cli_ranks_agree(argc, argv, agree, 1 + a->n_in)) rc = CLI_USAGE;
    cattr_status st = CATTR_OK;
    if (rc == CLI_OK) {
        st = cattr_model_load_onnx(a->model, &s.m);
        if (st == CATTR_OK) st = cattr_model_set_device(s.m, a->p.device);
        if (st != CATTR_OK) rc = cli_error(st, "cannot load model");
        else rc = order_inputs(a, &s.m, &s.m_orig);
    }
    for (int i = 0; i < a->n_in && rc == CLI_OK; i++)
        if ((st = cx_rows_open(a->inputs[i], &s.rd[i])) != CATTR_OK) rc = cli_error(st, "cannot read --input");
    s.R = rc == CLI_OK ? s.rd[0].shape[0] : 0;
    if (rc == CLI_OK && s.R < 1) rc = cli_usage_error("--input %s has no rows: nothing to attribute", a->inputs[0]);
    for (int i = 1; i < a->n_in && rc == CLI_OK; i++)
        if (s.rd[i].shape[0] != s.R)
            rc = cli_usage_error("--input %s has %lld rows, --input %s %lld", a->inputs[i], (long long)s.rd[i].shape[0],
                                 a->inputs[0], (long long)s.R);
    if (rc == CLI_OK) rc = load_side_inputs(a, s.m, masks, add, base);
    bool auto_pred = false;
    if (rc == CLI_OK && (a->target || a->targets || a->target_file)) rc = build_target(a, NULL, s.R, &s.tb, &auto_pred);
    a->p.progress = NULL; /* the dataset's progress is shown instead */
    if (rc == CLI_OK && (st = cattr_explainer_new(s.m, &a->p, &s.e)) != CATTR_OK) rc = cli_error(st, "bad parameters");
    s.dist = a->p.method == CATTR_METHOD_DEEPLIFT_SHAP || a->p.method == CATTR_METHOD_GRADIENT_SHAP ||
             a->p.draw_baseline_from_distrib;
    /* every rank must have set up; then rank 0 opens the output, finds where to start and tells the others */
    rc = mpi_driver_max(rc);
    int64_t hdr[2] = {rc, 0};
    size_t ol = strlen(a->output);
    if (rank == 0 && rc == CLI_OK) {
        s.progress = malloc(ol + 16);
        if (!s.progress) hdr[0] = rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        else snprintf(s.progress, ol + 16, "%s.part.json", a->output);
        if (rc == CLI_OK && !(s.identity = run_identity(a, argc, argv, s.R))) hdr[0] = rc = CLI_USAGE;
        if (rc == CLI_OK) hdr[0] = rc = stream_open(&s);
        hdr[1] = s.first;
    }
    mpi_driver_bcast(hdr, sizeof hdr);
    rc = (int)hdr[0];
    s.first = hdr[1];
    int64_t nb = s.bs ? (s.R + s.bs - 1) / s.bs : 0;
    if (rc == CLI_OK) {
        s.start = now_s();
        s.done = s.first * s.bs < s.R ? s.first * s.bs : s.R;
        s.show = rank == 0 && !a->quiet && isatty(STDERR_FILENO);
        if (rank == 0 && s.first > 0 && !a->quiet)
            fprintf(stderr, "cattr: resuming %s after row %lld of %lld\n", a->output, (long long)s.done, (long long)s.R);
        int frc = mpi_driver_farm(nb - s.first, stream_work, stream_deliver, &s);
        if (rank == 0) {
            if (s.show) stream_show(&s, true);
            if (frc != 0) {
                rc = frc < 0 ? CLI_FAIL : frc;
                if (s.done == 0) { /* nothing was written: no part file is left behind */
                    cx_rows_writer_free(s.w);
                    s.w = NULL;
                    unlink_part(a->output);
                    remove(s.progress);
                }
            } else {
                if (s.w) st = cx_rows_writer_finish(s.w);
                else st = cx_rows_part_commit(a->output, s.part_fd); /* every row was there already */
                s.w = NULL;
                s.part_fd = -1;
                if (st != CATTR_OK) rc = cli_error(st, "cannot write the output");
                else {
                    remove(s.progress);
                    if (!a->quiet)
                        printf("wrote %s (%s, %s, %lld rows in batches of %lld, %.1f s)\n", a->output,
                               cattr_method_name(a->p.method), cattr_dtype_name(a->p.dtype), (long long)s.R,
                               (long long)s.bs, now_s() - s.start);
                }
            }
        }
        int64_t final = rc;
        mpi_driver_bcast(&final, sizeof final);
        rc = (int)final;
    }
    cx_rows_writer_free(s.w); /* an interrupted run keeps OUTPUT.part for the rerun */
    if (s.part_fd >= 0) close(s.part_fd);
    cJSON_Delete(s.identity);
    free(s.progress);
    free(s.tb.idx);
    for (int i = 0; i < MAXT; i++) {
        cx_rows_close(&s.rd[i]);
        cattr_tensor_free(base[i]);
        cattr_tensor_free(masks[i]);
        cattr_tensor_free(add[i]);
    }
    cattr_explainer_free(s.e);
    cattr_model_free(s.m);
    cattr_model_free(s.m_orig);
    mpi_driver_stop();
    return rc;
}

static int explain_one(explain_args *ap);

/* Captum's name of a method for its progress bar: "feature-ablation" -> "Feature Ablation". */
static void progress_name(cattr_method m, char *out, size_t size) {
    const char *s = cattr_method_name(m);
    size_t k = 0;
    for (bool up = true; *s && k + 1 < size; s++) {
        char c = *s == '-' ? ' ' : *s;
        out[k++] = up && c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
        up = c == ' ';
    }
    out[k] = 0;
}

static int explain_main(int argc, char **argv, bool evaluate);

int cmd_explain(int argc, char **argv) { return explain_main(argc, argv, false); }

/* cattr evaluate: explain whose metrics are the point (--metric, an alias of --metrics; --output optional). */
int cmd_evaluate(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: cattr evaluate MODEL.onnx --method M --input FILE --metric LIST [--output FILE.json] "
                   "[explain's options]\n\nThe attributions of the call and their metrics (--metric: infidelity, "
                   "sensitivity, deletion,\ninsertion, randomization; comma-separated), printed, and written with the "
                   "attributions to a .json\n--output when given. Every option of cattr explain applies but "
                   "--batch-size and --split; its help\nfollows.\n\n");
            explain_help(stdout);
            return CLI_OK;
        }
    return explain_main(argc, argv, true);
}

static int explain_main(int argc, char **argv, bool evaluate) {
    explain_args a;
    int rc = parse_args(argc, argv, &a, evaluate, false);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (a.batch_size > 0 && !ends_with(a.output, ".json") && !a.png && !a.heatmap && !a.runs && !a.precision_error) {
        if (cli_metrics_any(&a.metrics))
            return cli_usage_error("--metrics: not with --batch-size into a .npy or .safetensors output (streamed "
                                   "batches); use a .json --output or no --batch-size");
        return explain_stream(&a, argc, argv);
    }
    if (a.split && mpi_driver_start() != 0) {
        fprintf(stderr, "cattr: MPI cannot start (CATTR_NO_MPI=1 runs without it)\n");
        return CLI_FAIL;
    }
    /* rank 0 (the only one that writes) checks the files; under --split every rank that it runs rank 0's command */
    if (mpi_driver_rank() == 0 && !register_files(&a, false)) rc = CLI_USAGE;
    if (a.split) {
        rc = mpi_driver_max(rc);
        if (rc == CLI_OK && !cli_ranks_agree(argc, argv, &a.model, 1)) rc = CLI_USAGE;
    }
    if (rc == CLI_OK) rc = explain_one(&a);
    if (a.split) mpi_driver_stop();
    return rc;
}

/* One attribution of the inputs in memory (under mpirun with --split, on every rank; only rank 0 writes). */
static int explain_one(explain_args *ap) {
    explain_args a = *ap;
    int rc;
    cattr_model *m = NULL, *m_orig = NULL;
    cattr_tensor *in[MAXT] = {0}, *add[MAXT] = {0}, *base[MAXT] = {0}, *attr[MAXT] = {0}, *delta = NULL, *out = NULL;
    cattr_tensor *masks[MAXT] = {0};
    cattr_explainer *e = NULL;
    bool e_owned = true;
    cJSON *metrics = NULL;
    target_buf tb = {{0}, NULL};
    double *times = NULL;
    cattr_status st = CATTR_OK;
    if (a.mem_model) {
        m = (cattr_model *)a.mem_model; /* the served model: read only (its device was set when it was loaded) */
    } else {
        st = cattr_model_load_onnx(a.model, &m);
        if (st == CATTR_OK) st = cattr_model_set_device(m, a.p.device);
    }
    if (st != CATTR_OK) {
        rc = cli_error(st, "cannot load model");
        goto done;
    }
    if ((rc = order_inputs(&a, &m, &m_orig))) goto done;
    for (int i = 0; i < a.n_in; i++) {
        st = a.mem_inputs ? cattr_tensor_convert(a.mem_inputs[i], cattr_tensor_dtype(a.mem_inputs[i]), &in[i])
                          : cli_load_tensor(a.inputs[i], &in[i]);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot read --input");
            goto done;
        }
    }
    if ((rc = load_side_inputs(&a, m, masks, add, base))) goto done;
    /* the forward pass: prediction and the default target */
    {
        const cattr_tensor *all[2 * MAXT];
        for (int i = 0; i < a.n_in; i++) all[i] = in[i];
        for (int i = 0; i < a.n_add; i++) all[a.n_in + i] = add[i];
        st = cattr_model_forward(m, a.p.dtype, all, a.n_in + a.n_add, &out);
        if (st != CATTR_OK) {
            rc = cli_error(st, "forward pass failed");
            goto done;
        }
    }
    int64_t B = cattr_tensor_ndim(in[0]) ? cattr_tensor_shape(in[0])[0] : 1;
    bool auto_pred = false;
    if ((rc = build_target(&a, out, B, &tb, &auto_pred))) goto done;
    char pname[96];
    progress_name(a.p.method, pname, sizeof pname);
    cli_progress_state prog = {now_s(), false, a.progress, pname};
    a.p.progress = a.mem_json ? NULL : cli_progress; /* in memory (cattr serve) nothing is shown */
    a.p.progress_user = a.mem_json ? NULL : &prog;
    st = cli_explainer_get(m == a.mem_model ? a.mem_cache : NULL, m, &a.p, &e, &e_owned);
    if (st != CATTR_OK) {
        rc = cli_error(st, "bad parameters");
        goto done;
    }
    cattr_call call = {(const cattr_tensor *const *)in, a.n_in, a.n_base ? (const cattr_tensor *const *)base : NULL,
                       &tb.t, (const cattr_tensor *const *)add, a.n_add,
                       a.n_masks ? (const cattr_tensor *const *)masks : NULL, NULL, NULL, 0, NULL, 0, NULL};
    bool dist = a.p.method == CATTR_METHOD_DEEPLIFT_SHAP || a.p.method == CATTR_METHOD_GRADIENT_SHAP ||
                a.p.draw_baseline_from_distrib; /* baselines are a distribution: batches keep them whole */
    int runs = a.runs > 0 ? a.runs : 1;
    times = calloc((size_t)runs, sizeof *times);
    for (int r = 0; r < runs; r++) {
        for (int i = 0; i < MAXT; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
        cattr_tensor_free(delta);
        delta = NULL;
        double t0 = now_s();
        prog.start = t0;
        st = a.split ? run_split(e, &call, attr, a.no_delta ? NULL : &delta, a.quiet)
                     : run_in_batches(e, &call, a.batch_size, dist, attr, a.no_delta ? NULL : &delta, &a.steps_used);
        if (times) times[r] = now_s() - t0;
        if (st != CATTR_OK) {
            rc = a.split && mpi_driver_rank() != 0 ? cli_error_code(st) : cli_error(st, "attribution failed");
            if (!e_owned) { /* a failed (or cancelled) call's explainer is not kept */
                cli_explainer_drop(a.mem_cache, e);
                e = NULL;
            }
            goto done;
        }
    }
    if (a.split && mpi_driver_rank() != 0) { /* rank 0 writes and prints */
        rc = CLI_OK;
        goto done;
    }
    if (a.precision_error) { /* the same call at the other precision: the error of "high" against "highest" */
        cattr_attr_params q = a.p;
        q.precision = a.p.precision == CATTR_PRECISION_HIGH ? CATTR_PRECISION_HIGHEST : CATTR_PRECISION_HIGH;
        q.progress = NULL;
        if (q.n_steps == CATTR_STEPS_AUTO) q.n_steps = a.steps_used; /* the same steps as the call compared with */
        int steps2 = 0;
        cattr_explainer *e2 = NULL;
        cattr_tensor *attr2[MAXT] = {0};
        st = cattr_explainer_new(m, &q, &e2);
        if (st == CATTR_OK) st = run_in_batches(e2, &call, a.batch_size, dist, attr2, NULL, &steps2);
        double err = 0, mx = 0;
        for (int i = 0; st == CATTR_OK && i < MAXT && attr[i] && attr2[i]; i++) {
            const cattr_tensor *hi = a.p.precision == CATTR_PRECISION_HIGH ? attr[i] : attr2[i];
            const cattr_tensor *ref = hi == attr[i] ? attr2[i] : attr[i];
            const float *h = cattr_tensor_data_const(hi), *r = cattr_tensor_data_const(ref); /* float32: HIGH */
            for (int64_t k = 0; k < cattr_tensor_numel(ref); k++) {
                double hv = h[k], rv = r[k];
                err = fmax(err, fabs(hv - rv));
                mx = fmax(mx, fabs(rv));
            }
        }
        if (st == CATTR_OK)
            fprintf(stderr, "precision high vs highest: max |attribution error| %.3e (%.3e of max |attribution| %.3e)\n",
                    err, mx > 0 ? err / mx : 0.0, mx);
        for (int i = 0; i < MAXT; i++) cattr_tensor_free(attr2[i]);
        cattr_explainer_free(e2);
        if (st != CATTR_OK) {
            rc = cli_error(st, "the attribution at the other precision failed");
            goto done;
        }
    }
    /* the heatmap first: an attribution that cannot be drawn, or a PNG that cannot be written, leaves no output */
    double *map = NULL;
    int mh = 0, mw = 0;
    if (a.png || a.heatmap) {
        map = map2d(attr[0], &mh, &mw);
        if (!map) {
            rc = cli_usage_error("cannot draw a heatmap of a %d-D attribution", cattr_tensor_ndim(attr[0]));
            goto done;
        }
        if (a.png && a.overlay) { /* the map over example 0's image (channels averaged), Captum's conventions */
            int ih = 0, iw = 0;
            double *img = map2d(in[0], &ih, &iw);
            double *mm = img && (ih != mh || iw != mw) ? resize_nearest(map, mh, mw, ih, iw) : NULL;
            if (!img || (!mm && (ih != mh || iw != mw))) {
                free(img);
                free(map);
                rc = cli_usage_error("cannot overlay the attribution on input 0 (it needs two spatial dims)");
                goto done;
            }
            if (mm) {
                free(map);
                map = mm;
                mh = ih;
                mw = iw;
            }
            normalize_map(map, mh * mw, a.sign ? a.sign : "absolute_value", a.outlier_perc);
            int cell = mh * mw <= 256 ? 32 : (mh * mw <= 4096 ? 8 : 2);
            st = cx_png_heatmap_overlay(a.png, img, map, mh, mw, cell, 0.6);
            free(img);
            if (st != CATTR_OK) {
                free(map);
                rc = cli_error(st, "cannot write the PNG");
                goto done;
            }
        } else if (a.png) {
            int cell = mh * mw <= 256 ? 32 : (mh * mw <= 4096 ? 8 : 2);
            st = cx_png_heatmap(a.png, map, mh, mw, cell);
            if (st != CATTR_OK) {
                free(map);
                rc = cli_error(st, "cannot write the PNG");
                goto done;
            }
        }
    }
    int n_out = 0; /* one per input, or one per layer tensor for layer methods */
    while (n_out < MAXT && attr[n_out]) n_out++;
    if (ends_with(a.output, ".npy") && n_out > 1) {
        rc = cli_usage_error("the method returned %d tensors: use an .safetensors or .json --output", n_out);
        goto done;
    }
    /* the metrics before anything is written: a metric that fails leaves no output */
    if ((rc = cli_metrics_run(&a.metrics, m, e, &a.p, &call, attr, n_out, &metrics))) {
        free(map);
        goto done;
    }
    if ((rc = write_output(&a, attr, n_out, delta, &tb.t, metrics))) {
        if (a.png) remove(a.png);
        if (a.metrics.curve_png) remove(a.metrics.curve_png);
        free(map);
        goto done;
    }
    if (!a.quiet) {
        print_prediction(out, B, &tb, auto_pred);
        if (a.output) printf("wrote %s (%s, %s", a.output, cattr_method_name(a.p.method), cattr_dtype_name(a.p.dtype));
        else printf("attributions (%s, %s", cattr_method_name(a.p.method), cattr_dtype_name(a.p.dtype));
        if (a.p.method == CATTR_METHOD_INTEGRATED_GRADIENTS || a.p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS)
            printf(", %d steps%s, %s", a.steps_used > 0 ? a.steps_used : a.p.n_steps,
                   a.p.n_steps == CATTR_STEPS_AUTO ? " (auto)" : "", cattr_quadrature_name(a.p.quadrature));
        printf(")\n");
        if (delta) {
            printf("convergence delta:");
            cattr_tensor *dd = NULL;
            if (cattr_tensor_convert(delta, CATTR_FLOAT64, &dd) == CATTR_OK) {
                const double *dv = cattr_tensor_data_const(dd);
                for (int64_t b = 0; b < cattr_tensor_numel(dd) && b < 8; b++) printf(" %.3e", dv[b]);
            }
            printf("%s\n", cattr_tensor_numel(dd) > 8 ? " ..." : "");
            cattr_tensor_free(dd);
        }
        if (a.png) printf("wrote %s\n", a.png);
        if (a.metrics.curve_png) printf("wrote %s\n", a.metrics.curve_png);
    }
    for (cJSON *mj = metrics ? metrics->child : NULL; mj && !a.quiet; mj = mj->next)
        if (!strcmp(mj->string, "randomization")) cli_print_randomization(mj);
        else
            printf("%s over %d example%s (%s): mean %.6g\n", mj->string,
                   cJSON_GetArraySize(cJSON_GetObjectItem(mj, "values")),
                   cJSON_GetArraySize(cJSON_GetObjectItem(mj, "values")) == 1 ? "" : "s", cli_metric_label(mj->string),
                   cJSON_GetNumberValue(cJSON_GetObjectItem(mj, "mean")));
    if (a.heatmap) {
        int ansi = isatty(STDOUT_FILENO);
        size_t need = cx_term_heatmap(NULL, 0, map, mh, mw, ansi);
        char *buf = malloc(need + 1);
        if (buf) {
            cx_term_heatmap(buf, need + 1, map, mh, mw, ansi);
            printf("attribution of example 0 (red positive, blue negative%s):\n%s", ansi ? "" : "; ramp: +  .:oO@  -  ,;xX#", buf);
            free(buf);
        }
    }
    free(map);
    if (a.runs > 0) printf("time: first=%.6f warm_median=%.6f\n", times[0], runs >= 2 ? cli_median(times + 1, runs - 1) : NAN);
    rc = CLI_OK;
done:
    free(times);
    free(tb.idx);
    for (int i = 0; i < MAXT; i++) {
        cattr_tensor_free(in[i]);
        cattr_tensor_free(add[i]);
        cattr_tensor_free(base[i]);
        cattr_tensor_free(masks[i]);
        cattr_tensor_free(attr[i]);
    }
    cattr_tensor_free(delta);
    cattr_tensor_free(out);
    cJSON_Delete(metrics);
    if (e_owned) cattr_explainer_free(e);
    if (m != a.mem_model) cattr_model_free(m);
    if (m_orig != a.mem_model) cattr_model_free(m_orig);
    return rc;
}

int cli_explain_mem(const cattr_model *m, int argc, char **argv, const cattr_tensor *const *inputs, int n_inputs,
                    const cattr_tensor *const *side, int n_side, const volatile int *cancel, cli_explainer_cache *cache,
                    char **json) {
    explain_args a;
    *json = NULL;
    int rc = parse_args(argc, argv, &a, false, true);
    if (rc) return rc < 0 ? CLI_USAGE : rc;
    if (a.n_in != n_inputs) return cli_usage_error("%d inputs for %d --input", n_inputs, a.n_in);
    a.mem_model = m;
    a.mem_inputs = inputs;
    a.mem_json = json;
    a.mem_cache = cache;
    a.mem_side = side;
    a.n_mem_side = n_side;
    a.quiet = true;
    a.progress = false;
    a.p.cancel = cancel;
    return explain_one(&a);
}
