/* model.h - the cattr_model handle: a graph plus what its loader learnt about it (ONNX files here in model.c,
 * Hugging Face checkpoints in decoder.c), its device, describe and a plain forward pass. */
#ifndef CATTR_MODEL_H
#define CATTR_MODEL_H

#include "backend/backend.h"
#include "graph/graph.h"

struct cattr_model {
    cg_graph *g;
    char *path;
    int opset;
    int *in_ndim;                      /* declared input rank, -1 unknown */
    int64_t (*in_shape)[CATTR_MAX_DIMS]; /* declared input shapes, -1 dynamic */
    cattr_dtype *in_dtype;
    cx_backend *be; /* the model's device (cattr_model_set_device; NULL: the default device) */
};

/* The backend of the model's device. Errors: as cx_backend_by_name. */
cattr_status cx_model_backend(const cattr_model *m, cx_backend **out);

/* Checks tensor x against model input i: its declared rank and static sizes, and a float dtype for inputs declared
 * float. `what` names the role in messages ("input", "additional input"). Errors: CATTR_ERR_SHAPE, CATTR_ERR_DTYPE. */
cattr_status cx_model_check_input(const cattr_model *m, int i, const cattr_tensor *x, const char *what);

/* cattr_model_load_onnx from a serialized ModelProto in memory (borrowed); `what` names it in messages and
 * descriptions. Errors: as cattr_model_load_onnx. */
cattr_status cx_model_load_onnx_buffer(const void *data, size_t size, const char *what, cattr_model **out);

/* Value id of the model output 0. */
static inline int cx_model_output(const cattr_model *m) { return m->g->outputs[0]; }

#endif
