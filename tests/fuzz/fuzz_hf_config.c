/* fuzz_hf_config.c - libFuzzer harness: a Hugging Face config.json (cx_hf_config_load's parser) from arbitrary
 * bytes; an accepted config also goes through the RoPE frequency computation the model builder runs. */
#include "io/hf.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cx_hf_config cfg;
    if (cx_hf_config_parse((const char *)data, size, "fuzz/config.json", &cfg) != CATTR_OK) return 0;
    double *inv = malloc((size_t)(cfg.head_dim / 2 + 1) * sizeof *inv);
    if (inv) {
        cx_hf_rope_inv_freq(&cfg, inv);
        for (int64_t i = 0; i < cfg.head_dim / 2; i++)
            if (!isfinite(inv[i]) || !(inv[i] > 0)) abort(); /* an accepted config gives usable frequencies */
    }
    free(inv);
    return 0;
}
