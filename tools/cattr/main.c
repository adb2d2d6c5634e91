/* main.c - the cattr command: usage and dispatch to the subcommands (their shared helpers are in cli.c). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "core/core.h"

#include <errno.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: cattr <command> [options]\n"
            "\n"
            "Native attribution engine: Captum's methods for ONNX models, in C.\n"
            "\n"
            "commands:\n"
            "  explain MODEL.onnx --method M --input FILE --output FILE [...]   attribute a prediction to the inputs\n"
            "  replay PATH... [--dtype float64|float32] [--device NAME]       re-run recorded Captum cases\n"
            "  explain-llm DIR --prompt TEXT [--target TEXT] [...]             token attribution for a language model\n"
            "  info MODEL.onnx                                                  inputs, outputs, ops and layers\n"
            "  version                                                          print the version\n"
            "\n"
            "Run 'cattr <command> --help' for the options of a command; docs/CLI.md documents every flag.\n");
}

int main(int argc, char **argv) {
    cattr_set_log_callback(cli_log, NULL);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("cattr %s\n", cattr_version());
        return CLI_OK;
    }
    if (!strcmp(cmd, "explain")) return cmd_explain(argc - 1, argv + 1);
    if (!strcmp(cmd, "replay")) return cmd_replay(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "explain-llm")) return cmd_explain_llm(argc - 1, argv + 1);
    (void)cli_usage_error("unknown command '%s'", cmd);
    fprintf(stderr, "\n");
    usage(stderr);
    return CLI_USAGE;
}
