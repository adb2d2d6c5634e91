/* fuzz_npy.c - libFuzzer harness: a .npy file (cattr_tensor_load_npy's parser) from arbitrary bytes. */
#include "io/tensorio.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cattr_tensor *t = NULL;
    if (cx_npy_parse(data, size, "fuzz.npy", &t) == CATTR_OK) {
        /* touch every element: the reported shape must match the allocation */
        volatile unsigned char sink = 0;
        const unsigned char *p = cattr_tensor_data_const(t);
        size_t n = (size_t)cattr_tensor_numel(t) * cattr_dtype_size(cattr_tensor_dtype(t));
        for (size_t i = 0; i < n; i++) sink ^= p[i];
        (void)sink;
    }
    cattr_tensor_free(t);
    return 0;
}
