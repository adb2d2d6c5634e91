/* info.c - `cattr info MODEL`: inputs, outputs, op counts and addressable layers. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cmd_info(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: cattr info MODEL.onnx\n\nPrints the model's inputs (declared shapes, ? = dynamic), outputs, op "
                "counts and the layers (PyTorch module path and ONNX tensor).\n");
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (argc > 2) return cli_usage_error("info takes one model (got '%s' too)", argv[2]);
    cattr_model *m = NULL;
    cattr_status st = cattr_model_load_onnx(argv[1], &m);
    if (st != CATTR_OK) return cli_error(st, "cannot load model");
    size_t n = cattr_model_describe(m, NULL, 0);
    char *buf = malloc(n + 1);
    if (!buf) {
        cattr_model_free(m);
        return cli_usage_error("out of memory");
    }
    cattr_model_describe(m, buf, n + 1);
    fputs(buf, stdout);
    free(buf);
    cattr_model_free(m);
    return CLI_OK;
}
