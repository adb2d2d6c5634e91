/* info.c - `cattr info MODEL`: inputs, outputs, op counts and addressable layers; `cattr info --devices`. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void info_help(FILE *f) {
    fprintf(f, "usage: cattr info MODEL.onnx [--device NAME]\n"
               "       cattr info --devices\n\n"
               "Prints the model's inputs (declared shapes, ? = dynamic), outputs, op counts and the layers (PyTorch\n"
               "module path and ONNX tensor), as planned on the device (default cpu). --devices lists the devices of\n"
               "this build.\n");
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL, *device = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            info_help(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--devices")) {
            /* the build's devices, then whether each can be used on this machine */
            const char *names = cattr_device_names();
            printf("%s\n", names);
            cattr_set_log_callback(NULL, NULL); /* the checks' own errors are the report */
            for (const char *p = names; *p;) {
                size_t len = strcspn(p, ", ");
                char name[64];
                if (len > 0 && len < sizeof name && !memchr(p, ':', len)) {
                    memcpy(name, p, len);
                    name[len] = 0;
                    cattr_status st = cattr_device_check(name);
                    if (st == CATTR_OK) printf("%s: available\n", name);
                    else printf("%s: unavailable: %s\n", name, cattr_last_error());
                }
                p += len;
                p += strspn(p, ", ");
            }
            return CLI_OK;
        } else if (!strcmp(a, "--device")) {
            if (++i >= argc) return cli_usage_error("--device needs a name");
            if (!cli_device_arg(argv[i])) return CLI_USAGE;
            device = argv[i];
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("info: unknown option '%s' (see cattr info --help)", a);
        } else if (path) {
            return cli_usage_error("info takes one model (got '%s' too)", a);
        } else {
            path = a;
        }
    }
    if (!path) {
        info_help(stderr);
        return CLI_USAGE;
    }
    cattr_model *m = NULL;
    cattr_status st = cattr_model_load_onnx(path, &m);
    if (st == CATTR_OK) st = cattr_model_set_device(m, device);
    if (st != CATTR_OK) {
        cattr_model_free(m);
        return cli_error(st, "cannot load model");
    }
    size_t n = cattr_model_describe(m, NULL, 0);
    char *buf = malloc(n + 1);
    if (!buf) {
        cattr_model_free(m);
        return cli_usage_error("out of memory");
    }
    cattr_model_describe(m, buf, n + 1);
    fputs(buf, stdout);
    free(buf);
    int nw = cattr_model_n_weight_modules(m);
    if (nw > 0) { /* what explain --metrics randomization draws anew, module by module */
        printf("modules with weights (in the order of use): ");
        for (int k = 0; k < nw; k++) {
            char name[256];
            cattr_model_weight_module(m, k, name, sizeof name);
            printf("%s%s", k ? ", " : "", name);
        }
        printf("\n");
    }
    cattr_model_free(m);
    return CLI_OK;
}
