/* elementwise.h - the elementwise functions of the ops added for exported models (Sqrt, Exp, Log, Erf, Reciprocal,
 * HardSigmoid, HardSwish, Softplus, Elu, Selu, Gelu; Pow, Max, Min) and their derivatives, in double, as PyTorch
 * defines them. Both backends evaluate them through these functions (the CPU kernels round the double result to
 * the dtype once), so that the two agree and the derivatives have one definition. */
#ifndef CATTR_ELEMENTWISE_H
#define CATTR_ELEMENTWISE_H

#include "core/hd.h"
#include "ops/op.h"

#include <math.h>

#define CX_SQRT_1_2 0.70710678118654752440
#define CX_2_SQRTPI 1.12837916709551257390 /* 2 / sqrt(pi) */
#define CX_SQRT_2_PI 0.79788456080286535588 /* sqrt(2 / pi) */

/* y = f(x) of unary op `op` (alpha, beta: HardSigmoid's; Elu's alpha; Selu's alpha and gamma in beta; Gelu: tanh
 * approximation when `approx`). */
static inline CX_HD double cx_unary_f(cg_op op, double x, double alpha, double beta, int approx) {
    switch (op) {
    case CG_SQRT: return sqrt(x);
    case CG_EXP: return exp(x);
    case CG_LOG: return log(x);
    case CG_ERF: return erf(x);
    case CG_RECIPROCAL: return 1.0 / x;
    case CG_HARDSIGMOID: {
        double v = alpha * x + beta;
        return v <= 0 ? 0 : v >= 1 ? 1 : v;
    }
    case CG_HARDSWISH: {
        double v = x / 6.0 + 0.5;
        return x * (v <= 0 ? 0 : v >= 1 ? 1 : v);
    }
    case CG_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case CG_ELU: return x > 0 ? x : alpha * expm1(x);
    case CG_SELU: return beta * (x > 0 ? x : alpha * expm1(x));
    case CG_GELU:
        if (approx) return 0.5 * x * (1 + tanh(CX_SQRT_2_PI * (x + 0.044715 * x * x * x)));
        return 0.5 * x * (1 + erf(x * CX_SQRT_1_2));
    default: return NAN;
    }
}

/* dy/dx of unary op `op` at x (torch's backward formulas; at the kinks the side torch takes). */
static inline CX_HD double cx_unary_df(cg_op op, double x, double alpha, double beta, int approx) {
    switch (op) {
    case CG_SQRT: return 0.5 / sqrt(x);
    case CG_EXP: return exp(x);
    case CG_LOG: return 1.0 / x;
    case CG_ERF: return CX_2_SQRTPI * exp(-x * x);
    case CG_RECIPROCAL: return -1.0 / (x * x);
    case CG_HARDSIGMOID: {
        double v = alpha * x + beta;
        return v > 0 && v < 1 ? alpha : 0;
    }
    case CG_HARDSWISH: return x < -3 ? 0 : x <= 3 ? x / 3.0 + 0.5 : 1;
    case CG_SOFTPLUS: return 1.0 / (1.0 + exp(-x));
    case CG_ELU: return x > 0 ? 1 : alpha * exp(x);
    case CG_SELU: return beta * (x > 0 ? 1 : alpha * exp(x));
    case CG_GELU:
        if (approx) {
            double u = CX_SQRT_2_PI * (x + 0.044715 * x * x * x), t = tanh(u);
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * CX_SQRT_2_PI * (1 + 3 * 0.044715 * x * x);
        }
        return 0.5 * (1 + erf(x * CX_SQRT_1_2)) + x * exp(-0.5 * x * x) * 0.5 * CX_2_SQRTPI * CX_SQRT_1_2;
    default: return NAN;
    }
}

/* a op b for Pow, Max, Min (NaN propagates through Max and Min, as torch.maximum / minimum). */
static inline CX_HD double cx_binary_f(cg_op op, double a, double b) {
    switch (op) {
    case CG_POW: return pow(a, b);
    case CG_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case CG_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default: return NAN;
    }
}

/* d(a op b)/da (which 0) or /db (which 1), times g: Pow's torch formulas (0 where the exponent is 0, and where the
 * base is 0 for a non-negative exponent's log term); Max and Min split the gradient between equal operands. */
static inline CX_HD double cx_binary_df(cg_op op, int which, double a, double b, double g) {
    switch (op) {
    case CG_POW:
        if (which == 0) return b == 0 ? 0 : g * b * pow(a, b - 1);
        return a == 0 && b >= 0 ? 0 : g * pow(a, b) * log(a);
    case CG_MAX: case CG_MIN: {
        double mine = which ? b : a, other = which ? a : b;
        if (mine == other) return g / 2;
        return (op == CG_MAX ? mine > other : mine < other) ? g : 0;
    }
    default: return NAN;
    }
}

/* The comparisons and logical ops of ONNX as Equal's modes (graph.h, CG_EQUAL): 1 where the relation holds, else 0;
 * the logical ones read non-zero as true. */
enum { CX_CMP_EQ, CX_CMP_GT, CX_CMP_LT, CX_CMP_GE, CX_CMP_LE, CX_CMP_AND, CX_CMP_OR, CX_CMP_XOR, CX_CMP_COUNT };
static inline CX_HD int cx_compare(int mode, double a, double b) {
    switch (mode) {
    case CX_CMP_GT: return a > b;
    case CX_CMP_LT: return a < b;
    case CX_CMP_GE: return a >= b;
    case CX_CMP_LE: return a <= b;
    case CX_CMP_AND: return a != 0 && b != 0;
    case CX_CMP_OR: return a != 0 || b != 0;
    case CX_CMP_XOR: return (a != 0) != (b != 0);
    default: return a == b;
    }
}

/* ONNX Mod: fmod 1 keeps the sign of the dividend (C's fmod), 0 the divisor's (Python's %); integers by 0 give 0. */
static inline CX_HD double cx_mod_f(double a, double b, int fmod_sign) {
    double r = fmod(a, b);
    if (!fmod_sign && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static inline CX_HD int64_t cx_mod_i(int64_t a, int64_t b, int fmod_sign) {
    if (b == 0 || (b == -1)) return 0; /* b = -1: every remainder is 0 (and INT64_MIN % -1 would trap) */
    int64_t r = a % b;
    if (!fmod_sign && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* Integer Add, Sub, Mul, Div of shape arithmetic at run time (wrapping instead of overflowing; Div truncates, and a
 * division by 0 gives 0: the planner's folding reports it where a shape depends on it). */
static inline CX_HD int64_t cx_int_binary(cg_op op, int64_t a, int64_t b) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case CG_ADD: return (int64_t)(ua + ub);
    case CG_SUB: return (int64_t)(ua - ub);
    case CG_MUL: return (int64_t)(ua * ub);
    default: return b == 0 || (a == INT64_MIN && b == -1) ? 0 : a / b;
    }
}

/* Element k of Range(start, ., delta): start + k * delta, wrapping rather than overflowing at the int64 limits. */
static inline CX_HD int64_t cx_range_at(int64_t start, int64_t delta, int64_t k) {
    return (int64_t)((uint64_t)start + (uint64_t)k * (uint64_t)delta);
}

#endif
