/* fuzz_safetensors.c - libFuzzer harness: a .safetensors tensor set (cattr_tensor_set_load's parser) from arbitrary
 * bytes, and the header checker the checkpoint loader uses. */
#include "io/tensorio.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cattr_tensor_set *s = NULL;
    if (cx_tensor_set_parse(data, size, "fuzz.safetensors", &s) == CATTR_OK) {
        volatile unsigned char sink = 0;
        for (int i = 0; i < cattr_tensor_set_count(s); i++) {
            const cattr_tensor *t = cattr_tensor_set_get(s, cattr_tensor_set_name(s, i));
            const unsigned char *p = cattr_tensor_data_const(t);
            size_t n = (size_t)cattr_tensor_numel(t) * cattr_dtype_size(cattr_tensor_dtype(t));
            for (size_t k = 0; k < n; k++) sink ^= p[k];
        }
        (void)sink;
    }
    cattr_tensor_set_free(s);
    cx_st_header h;
    if (cx_st_header_parse(data, size, "fuzz.safetensors", &h) == CATTR_OK) {
        /* every range lies inside the buffer */
        volatile unsigned char sink = 0;
        for (int i = 0; i < h.n; i++)
            if (h.e[i].end > h.e[i].begin) sink ^= data[h.data_start + h.e[i].end - 1];
        (void)sink;
        cx_st_header_free(&h);
    }
    return 0;
}
