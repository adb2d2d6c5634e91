/* main.c - the cattr command: usage and dispatch to the subcommands (their shared helpers are in cli.c). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "core/core.h"
#include "io/fileutil.h"

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
            "  info MODEL.onnx [--device NAME] | info --devices                 inputs, outputs, ops and layers\n"
            "  compare CASE|MODEL|DIR --devices A,B [...]                       the same attributions on two devices\n"
            "  attack MODEL.onnx --input FILE --target T --epsilon E [...]      an adversarial input (FGSM, PGD)\n"
            "  influence MODEL.onnx --train X --train-labels Y --test X ...     training examples' influence (TracIn)\n"
            "  explain-context DIR --question TEXT --context FILE [...]         which documents an answer relies on\n"
            "  evaluate MODEL.onnx --method M --input FILE --metric LIST [...]  metrics of the attributions\n"
            "  serve --model NAME=MODEL.onnx [--port 8080] [...]               explanations over HTTP (KServe V1)\n"
            "  version                                                          print the version\n"
            "\n"
            "Every command also takes --profile FILE.json: a Chrome trace (Perfetto, chrome://tracing) of every op,\n"
            "copy between host and device and plan build, with a summary on stderr.\n"
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
    int (*fn)(int, char **) = !strcmp(cmd, "explain")       ? cmd_explain
                              : !strcmp(cmd, "replay")      ? cmd_replay
                              : !strcmp(cmd, "info")        ? cmd_info
                              : !strcmp(cmd, "explain-llm") ? cmd_explain_llm
                              : !strcmp(cmd, "compare")     ? cmd_compare
                              : !strcmp(cmd, "attack")      ? cmd_attack
                              : !strcmp(cmd, "influence")   ? cmd_influence
                              : !strcmp(cmd, "explain-context") ? cmd_explain_context
                              : !strcmp(cmd, "evaluate")    ? cmd_evaluate
                              : !strcmp(cmd, "serve")       ? cmd_serve
                                                            : NULL;
    if (fn) {
        /* --profile FILE belongs to every command: taken out here, the command runs under the profiler */
        const char *profile = NULL;
        int n = 0;
        for (int i = 1; i < argc; i++) {
            if (!strcmp(argv[i], "--profile")) {
                if (i + 1 >= argc) return cli_usage_error("--profile needs a file name (FILE.json)");
                profile = argv[++i];
            } else {
                argv[++n] = argv[i];
            }
        }
        argc = n + 1;
        cli_files_reset();
        if (profile) { /* a .json trace, or a stream such as /dev/stdout; never one of the command's other files */
            cx_dest kind = CX_DEST_NEW;
            size_t pl = strlen(profile);
            if (cx_output_kind(profile, &kind) == CATTR_OK && kind != CX_DEST_STREAM &&
                (pl < 5 || strcmp(profile + pl - 5, ".json") != 0))
                return cli_usage_error("--profile writes a Chrome trace: give a FILE.json, not '%s'", profile);
            if (!cli_file_out(profile, "--profile")) return CLI_USAGE;
            cattr_profile_begin();
        }
        int rc = fn(argc - 1, argv + 1);
        if (profile && rc == CLI_USAGE) { /* a command that could not start (its files, its options): no trace */
            cattr_profile_end(NULL, NULL);
        } else if (profile) {
            char *summary = NULL;
            cattr_status st = cattr_profile_end(profile, &summary);
            if (st != CATTR_OK) {
                int prc = cli_error(st, "--profile");
                if (rc == CLI_OK) rc = prc;
            } else {
                fprintf(stderr, "profile written to %s\n%s", profile, summary ? summary : "");
            }
            free(summary);
        }
        return rc;
    }
    (void)cli_usage_error("unknown command '%s'", cmd);
    fprintf(stderr, "\n");
    usage(stderr);
    return CLI_USAGE;
}
