/* check_kernels.h - the kernels of the "cpu-check" backend: plain scalar reference implementations of every op the
 * fast CPU backend runs, with the same semantics, written for reading rather than speed. The fast CPU kernels
 * (src/backend/cpu/) must agree with them (tests/test_check_kernels.c compares the two op by op); a backend table
 * built on cx_check_run_op gives a slow, independent second opinion on a whole attribution run.
 */
#ifndef CATTR_CHECK_KERNELS_H
#define CATTR_CHECK_KERNELS_H

#include "backend/backend.h"

/* Runs node `n` on the host, reading `in` (n->n_in views; an absent optional input has data == NULL) into `out`,
 * whose dtype and shape the planner has inferred (cx_infer) and whose data is allocated. The same contract as a
 * backend table's run_op: the view ops (Identity, Reshape, Flatten, Squeeze, Unsqueeze, ReshapeLike) accept an
 * output that aliases their input; inputs a kernel reads for their shape only (ReduceSumLike's, ReshapeLike's and
 * SliceGrad's X, SeqPickGrad's X, ZerosLike's input) are never read. float32 and float64 for every op, int64 for the
 * data-movement ops. Errors: CATTR_ERR_UNSUPPORTED (an op without a kernel, int64 data for an arithmetic op, MatMul
 * with the bfloat16 flag: this backend computes at full precision only), CATTR_ERR_SHAPE (a Gather index out of
 * range), CATTR_ERR_INVALID_ARGUMENT (a SeqPick position, RoPE position or attention segment out of range),
 * CATTR_ERR_NO_MEMORY; each message names the node. */
cattr_status cx_check_run_op(const cg_node *n, const cx_view *in, cx_view *out);

#endif
