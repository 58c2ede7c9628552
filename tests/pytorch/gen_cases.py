#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Generates PyTorch reference cases for every Switchyard op.

Run from the repository root with the Python that has torch 1.13 (Debian's
python3-torch):

    /usr/bin/python3 tests/pytorch/gen_cases.py

It writes tests/data/pytorch_cases.json: a list of cases, each with the op
(named as in tests/ops/pytorch_test.cpp), its inputs, arguments and either
PyTorch's output or "error" when PyTorch rejects the call. The C++ test
replays every case on every device; it needs no Python. Inputs come from a
fixed seed, so regenerating gives the same file for the same torch version.
Floats that JSON cannot hold are written as the strings "nan", "inf", "-inf";
f16 and bf16 values are written as the floats they are (exact in float64).

Dtypes: f32, f64, i32, i64, u8, bool and f16, bf16, i8, i16. Cases that
involve one of the last four draw their random inputs from a generator of
their own (fresh() below), so the cases of the first six are the same as
before those were added.

PyTorch 1.13's CPU leaves many ops unimplemented for Half (and a few for
BFloat16): it raises "... not implemented for 'Half'". Switchyard computes
them anyway, in f32 with one rounding at the end, so for those the expected
output is PyTorch's own f32 result rounded to the f16/bf16 dtype that
PyTorch's promotion gives; such cases carry "emulated": true (see add()).
So do the few multi-step ops (bf16 conv, matmul, interpolate, norms) whose
native kernel rounds along the way and lands outside the C++ test's
tolerance of that; elementwise ops keep PyTorch's own result always. f16
and bf16 cases run with oneDNN off, so that the file does not depend on the
CPU it is generated on. `-v` prints which ops were emulated.
"""

import contextlib
import json
import math
import os
import sys
from collections import Counter

import torch
import torch.nn.functional as F

SEED = 20261202
torch.manual_seed(SEED)
torch.set_num_threads(1)

DT = {
    "f32": torch.float32,
    "f64": torch.float64,
    "i32": torch.int32,
    "i64": torch.int64,
    "u8": torch.uint8,
    "bool": torch.bool,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i8": torch.int8,
    "i16": torch.int16,
}
NAME = {v: k for k, v in DT.items()}
ALL = list(DT)
NEW = ["f16", "bf16", "i8", "i16"]
HALVES = ["f16", "bf16"]
FLOATS = ["f32", "f64", "f16", "bf16"]
INTS = ["i32", "i64", "u8", "i8", "i16"]
HALF_TYPES = (torch.float16, torch.bfloat16)

cases = []
notes = []
deviations = Counter()  # native f16/bf16 results outside the C++ tolerance of f32 + one rounding
imprecise = Counter()  # of those, the multi-step ops whose reference is f32 + one rounding


def enc(x):
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


def tensor_json(t):
    flat = t.detach().reshape(-1)
    if t.dtype == torch.bool:
        vals = [int(v) for v in flat.tolist()]
    elif t.dtype.is_floating_point:
        vals = [enc(float(v)) for v in flat.tolist()]
    else:
        vals = [int(v) for v in flat.tolist()]
    return {"dtype": NAME[t.dtype], "shape": list(t.shape), "data": vals}


_forks = [0]


@contextlib.contextmanager
def fresh(*dtypes):
    """Draws inside come from a generator of their own when any of `dtypes`
    is new (or none is named), leaving the main stream, and so the cases of
    the original six dtypes, as they were."""
    if dtypes and not any(d in NEW for d in dtypes):
        yield
        return
    _forks[0] += 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED + 7919 * _forks[0])
        yield


def rand(dtype, shape, kind="any"):
    """Small random inputs: 2-decimal floats (rounded to f16/bf16 there), small integers."""
    t = DT[dtype]
    if t == torch.bool:
        return torch.rand(shape) < 0.5
    if t.is_floating_point:
        x = torch.randn(shape, dtype=torch.float64) * 2
        if kind == "pos":
            x = x.abs() + 0.1
        return torch.round(x * 100).div(100).to(t)
    lo, hi = (0, 10) if t == torch.uint8 else (-5, 6)
    if kind == "pos":
        lo = 1
    if kind == "exp":
        lo, hi = 0, 4
    x = torch.randint(lo, hi, shape, dtype=torch.int64)
    if kind == "nonzero":
        x = torch.where(x == 0, torch.ones_like(x), x)
    return x.to(t)


def result_type(tensors):
    """torch.result_type over any number of tensors: the dimensioned ones
    decide, a 0-d one only when its category (bool < int < float) is higher."""
    def category(d):
        return 0 if d == torch.bool else 2 if d.is_floating_point else 1
    dim = zero = None
    for t in tensors:
        if t.dim() > 0:
            dim = t.dtype if dim is None else torch.promote_types(dim, t.dtype)
        else:
            zero = t.dtype if zero is None else torch.promote_types(zero, t.dtype)
    if dim is None:
        return zero
    if zero is not None and category(zero) > category(dim):
        return torch.promote_types(dim, zero)
    return dim


def emulate(fn, inputs, operands=False):
    """The op in f32 for every f16/bf16 input, its floating result rounded
    (once) back to the dtype PyTorch's promotion gives. Non-floating results
    (comparisons, indices, argmax) are kept as they are. With `operands` (an
    elementwise op) every input is first converted to the common dtype, as
    PyTorch does (an i64 70000 meets an f16 tensor as inf)."""
    target = result_type(inputs)
    if operands and target in HALF_TYPES:
        inputs = [x.to(target) for x in inputs]

    def widened(t):
        return [x.to(t) if x.dtype in HALF_TYPES else x for x in inputs]

    out = fn(*widened(torch.float32))
    if out.dtype == torch.float32 and target in HALF_TYPES:
        # f32 because the inputs were, or because the op says so (a dtype
        # argument)? Widening to f64 instead tells.
        try:
            follows = fn(*widened(torch.float64)).dtype == torch.float64
        except (RuntimeError, TypeError, ValueError, IndexError):
            follows = True
        if follows:
            out = out.to(target)
    return out


# Ops whose f16/bf16 result PyTorch defines elementwise (one rounding, or
# none): their native results are the reference even where they differ from
# f32 + one rounding (a Python float scalar is rounded to f16 first: f16 1000
# == 1000.2 is true).
ELEMENTWISE = {"unary", "clamp", "binary", "scalar", "cast", "where", "masked_fill", "full", "eye", "arange"}


HALF_TOL = {torch.float16: (2e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}  # as tests/ops/pytorch_test.cpp


def close(got, want, share=1.0):
    """got within `share` of the C++ test's tolerance of want (NaN matches NaN)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if not want.dtype.is_floating_point:
        return bool(torch.equal(got, want))
    rtol, atol = HALF_TOL.get(want.dtype, (2e-5, 1e-6))
    g, w = got.double(), want.double()
    return bool(torch.isclose(g, w, rtol=rtol * share, atol=atol * share, equal_nan=True).all())


def add(op, inputs, args, fn, tol=None, exact=False):
    case = {"op": op, "inputs": [tensor_json(x) for x in inputs], "args": args}
    halves = any(x.dtype in HALF_TYPES for x in inputs)
    operands = op in ("binary", "clamp")
    # oneDNN takes bf16 convolutions and matmuls only on CPUs with AVX-512
    # (BF16); the native kernels give the same on every machine.
    with torch.backends.mkldnn.flags(enabled=not halves):
        try:
            out = fn(*inputs)
            if halves:
                # Where PyTorch's own f16/bf16 kernel of a multi-step op
                # (matmul, conv, interpolate, norms, ...) rounds along the way
                # and lands outside the C++ tolerance of f32 + one rounding,
                # the latter is the reference (Switchyard computes such ops in
                # f32 and rounds once); such cases are "emulated" too.
                try:
                    emu = emulate(fn, inputs, operands)
                except (RuntimeError, TypeError, ValueError, IndexError):
                    emu = None
                # Half the tolerance: Switchyard's own f32 result may round
                # to the neighbour of the emulation's.
                if emu is not None and not close(out, emu, 1.0 if op in ELEMENTWISE else 0.5):
                    deviations[f"{op} {args.get('kind', '')} {NAME[result_type(inputs)]}".replace("  ", " ")] += 1
                    if op not in ELEMENTWISE:
                        out = emu
                        case["emulated"] = True
                        imprecise[op] += 1
            case["out"] = tensor_json(out)
        except (RuntimeError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
            message = str(e).split("\n")[0][:120]
            # PyTorch 1.13's CPU has no f16 kernel for many ops (and no bf16
            # one for some): "... not implemented for 'Half'". Switchyard
            # computes them in f32 and rounds once, so the expected output is
            # the same op on f32 copies of the f16/bf16 inputs, rounded back
            # to the dtype PyTorch's promotion gives (emulate()). A genuine
            # type error (bitwise ops on floats, ...) fails in f32 too and
            # stays an error case. So do mixed float dtypes where only the
            # elementwise ops promote them: for matmul, conv, ... "not
            # implemented" hides the mismatch PyTorch would report next.
            floats = {x.dtype for x in inputs if x.dtype.is_floating_point}
            mixed = len(floats) > 1 and op not in ("binary", "scalar", "clamp", "where", "cat", "stack")
            if halves and not mixed and ("not implemented for 'Half'" in message
                                         or "not implemented for 'BFloat16'" in message):
                try:
                    out = emulate(fn, inputs, operands)
                    case["out"] = tensor_json(out)
                    case["emulated"] = True
                except (RuntimeError, TypeError, ValueError, IndexError, ZeroDivisionError):
                    case["error"] = message
            else:
                case["error"] = message
    if "emulated" in case:  # "emulated" after "out", so that the key order stays as it was
        case["emulated"] = case.pop("emulated")
    if tol is not None:
        case["tol"] = tol
    if exact:  # bit for bit on cpu and reference (see tests/ops/pytorch_test.cpp)
        case["exact"] = True
    cases.append(case)


SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5, -2.5, 0.5])

# --- unary -------------------------------------------------------------------
FLOAT_UNARY = {
    "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "gelu": F.gelu, "silu": F.silu,
    "erf": torch.erf, "reciprocal": torch.reciprocal,
}
KEEP_UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "relu": torch.relu,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "isnan": torch.isnan, "isinf": torch.isinf,
}
for name, fn in FLOAT_UNARY.items():
    for dt in ALL:
        with fresh(dt):
            x = rand(dt, [2, 3], "pos" if name in ("log", "sqrt", "rsqrt") and dt not in FLOATS else "any")
            # PyTorch computes int -> float unary ops in the default float type;
            # gelu and silu have no integer or bool kernels and raise (issue 15,
            # item 12: we follow PyTorch there now).
            add("unary", [x], {"kind": name}, fn)
    add("unary", [SPECIAL.clone()], {"kind": name}, fn)
    for dt in HALVES:
        add("unary", [SPECIAL.to(DT[dt])], {"kind": name}, fn)
        # Overflow to inf, subnormal inputs (f16: 1e-5 and 6e-8), the largest finite value.
        # (log1p: not 3e38, where PyTorch's float kernel, Sleef's log1pf, gives inf instead of 88.6.)
        big = 1.0e30 if name == "log1p" else 3.0e38
        add("unary", [torch.tensor([12.0, 100.0, -20.0, 1e-5, 6e-8, 65504.0, -0.0, big]).to(DT[dt])],
            {"kind": name}, fn)
for name, fn in KEEP_UNARY.items():
    for dt in ALL:
        if name == "abs" and dt == "bool":
            continue  # deliberate difference: we allow abs of bool (the identity), PyTorch does not
        with fresh(dt):
            add("unary", [rand(dt, [2, 3])], {"kind": name}, fn)
    add("unary", [SPECIAL.clone()], {"kind": name}, fn)
    for dt in HALVES:
        add("unary", [SPECIAL.to(DT[dt])], {"kind": name}, fn)
    for dt, vals in (("i8", [-128, 127, 0, -1]), ("i16", [-32768, 32767, 0, -1])):  # neg/abs of the minimum wrap
        add("unary", [torch.tensor(vals, dtype=DT[dt])], {"kind": name}, fn)
add("unary", [torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.5])], {"kind": "round"}, torch.round)
for dt in HALVES:
    add("unary", [torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.5, 1000.5, 1001.5]).to(DT[dt])], {"kind": "round"},
        torch.round)
for dt in ["f32", "f64", "i32", "i64"] + NEW:
    with fresh(dt):
        add("clamp", [rand(dt, [2, 4])], {"lo": -1, "hi": 2}, lambda x: torch.clamp(x, -1, 2))
        add("clamp", [rand(dt, [5])], {"lo": None, "hi": 0}, lambda x: torch.clamp(x, max=0))
        add("clamp", [rand(dt, [5])], {"lo": 1, "hi": None}, lambda x: torch.clamp(x, min=1))
add("clamp", [rand("u8", [6])], {"lo": 2, "hi": 7}, lambda x: torch.clamp(x, 2, 7))
add("clamp", [SPECIAL.clone()], {"lo": -1, "hi": 1}, lambda x: torch.clamp(x, -1, 1))
for dt in HALVES:
    add("clamp", [SPECIAL.to(DT[dt])], {"lo": -1, "hi": 1}, lambda x: torch.clamp(x, -1, 1))
    # Bounds that are not f16/bf16 values.
    add("clamp", [torch.tensor([0.1, 0.2, 1000.3, -1000.3, 0.3]).to(DT[dt])], {"lo": 0.15, "hi": 1000.2},
        lambda x: torch.clamp(x, 0.15, 1000.2))
# Inverted bounds (low > high): every element becomes high; no bound at all raises.
for dt in ["f32", "f64", "i32", "i64", "u8"] + NEW:
    lo, hi = (7, 2) if dt == "u8" else (2, -1)
    with fresh(dt):
        add("clamp", [rand(dt, [2, 3])], {"lo": lo, "hi": hi}, lambda x, lo=lo, hi=hi: torch.clamp(x, lo, hi))
        add("clamp", [rand(dt, [3])], {"lo": None, "hi": None}, lambda x: torch.clamp(x))
add("clamp", [SPECIAL.clone()], {"lo": 1, "hi": -1}, lambda x: torch.clamp(x, 1, -1))

# --- binary ------------------------------------------------------------------
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "pow": torch.pow, "remainder": torch.remainder, "maximum": torch.maximum,
    "minimum": torch.minimum, "atan2": torch.atan2, "eq": torch.eq, "ne": torch.ne,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "floor_divide": torch.floor_divide,
}


ZERO_D_NEW = ("add", "div", "maximum", "lt", "bitwise_or", "remainder")


def rhs_kind(name):
    return {"pow": "exp", "remainder": "nonzero", "floor_divide": "nonzero"}.get(name, "any")


for name, fn in BINARY.items():
    for dt in ALL:
        with fresh(dt):
            a = rand(dt, [2, 3])
            if name == "pow" and dt in INTS:
                a = rand(dt, [2, 3]).clamp(-3, 3)
            add("binary", [a, rand(dt, [3], rhs_kind(name))], {"kind": name}, fn)
    # Broadcasting [2,1,3] x [4,1] with size-1 and 0-d operands.
    add("binary", [rand("f32", [2, 1, 3]), rand("f32", [4, 1], rhs_kind(name))], {"kind": name}, fn)
    add("binary", [rand("f64", []), rand("f64", [2, 2], rhs_kind(name))], {"kind": name}, fn)
    add("binary", [rand("f32", [0, 3]), rand("f32", [1, 3], rhs_kind(name))], {"kind": name}, fn)
    with fresh():
        add("binary", [rand("f16", [2, 1, 3]), rand("f16", [4, 1], rhs_kind(name))], {"kind": name}, fn)
        add("binary", [rand("bf16", []), rand("bf16", [2, 2], rhs_kind(name))], {"kind": name}, fn)
    if name in ("add", "mul", "div", "maximum", "minimum", "pow", "atan2", "eq", "lt", "remainder", "sub",
                "floor_divide"):
        add("binary", [SPECIAL.clone(), SPECIAL.flip(0).clone()], {"kind": name}, fn)
        for dt in HALVES:
            add("binary", [SPECIAL.to(DT[dt]), SPECIAL.flip(0).to(DT[dt])], {"kind": name}, fn)

# Mixed dtypes: promotion across every pair for a few kinds.
for name in ("add", "mul", "div", "maximum", "lt", "bitwise_or", "floor_divide"):
    for da in ALL:
        for db in ALL:
            if da != db:
                with fresh(da, db):
                    add("binary", [rand(da, [3]), rand(db, [3], rhs_kind(name))], {"kind": name}, BINARY[name])
# 0-d operands (issue 15, item 1): a dimensioned tensor's dtype wins over a
# 0-d tensor's of the same category (torch.result_type). Pairs with a new
# dtype: fewer kinds (the rule is the same for every kind).
for name in ("add", "sub", "mul", "div", "maximum", "le", "eq", "lt", "bitwise_or", "remainder", "logical_xor"):
    for da in ALL:
        for db in ALL:
            if (da in NEW or db in NEW) and name not in ZERO_D_NEW:
                continue
            with fresh(da, db):
                for sa, sb in (([], [2]), ([1, 2], [])):
                    add("binary", [rand(da, sa), rand(db, sb, rhs_kind(name))], {"kind": name}, BINARY[name])
add("binary", [torch.tensor([-184], dtype=torch.int32), torch.tensor(100)], {"kind": "sub"}, torch.sub)
add("binary", [torch.tensor([[[3]]], dtype=torch.uint8), torch.tensor(-327)], {"kind": "le"}, torch.le)
add("binary", [torch.tensor(-9, dtype=torch.int32), torch.tensor([0], dtype=torch.uint8)], {"kind": "bitwise_or"},
    torch.bitwise_or)
add("binary", [torch.tensor(-9, dtype=torch.int32), torch.tensor(7, dtype=torch.uint8)], {"kind": "bitwise_or"},
    torch.bitwise_or)
add("binary", [rand("i32", [4]), torch.tensor([1, 0, 2, 0], dtype=torch.int32)], {"kind": "remainder"}, torch.remainder)
add("binary", [rand("i64", [4]), torch.tensor([1, 0, 2, 0], dtype=torch.int64)], {"kind": "div"}, torch.div)
add("binary", [rand("i32", [4]), torch.tensor([1, 0, 2, 0], dtype=torch.int32)], {"kind": "floor_divide"},
    torch.floor_divide)
# floor_divide's float rule: Python's (1.0 // 0.1 == 9), signed zeros, inf divisors.
add("binary", [torch.tensor([1.0, -0.0, 5.0, -5.0, 7.5, -7.5, 0.0], dtype=torch.float64),
               torch.tensor([0.1, 3.0, float("inf"), float("inf"), -2.0, 0.0, 0.0], dtype=torch.float64)],
    {"kind": "floor_divide"}, torch.floor_divide)

# --- scalar ------------------------------------------------------------------
SCALARS = [("int", 2), ("int", -3), ("float", 0.5), ("float", -1.25), ("bool", True)]
for name in ("add", "sub", "mul", "div", "pow", "remainder", "maximum", "lt", "eq", "ge",
             "logical_and", "bitwise_xor", "atan2", "floor_divide"):
    fn = BINARY[name]
    for dt in ALL:
        with fresh(dt):
            for kind, s in SCALARS:
                if name in ("bitwise_xor",) and kind == "float":
                    continue
                if name == "pow" and kind == "int" and s < 0:
                    continue
                x = rand(dt, [2, 2], "pos" if name in ("pow",) else "nonzero")
                wrapped = torch.tensor(s)
                add("scalar", [x], {"kind": name, "value": s, "scalar": kind, "first": False},
                    lambda x, w=wrapped, fn=fn: fn(x, w))
                if name in ("sub", "div", "pow", "remainder", "lt", "floor_divide"):
                    add("scalar", [x], {"kind": name, "value": s, "scalar": kind, "first": True},
                        lambda x, w=wrapped, fn=fn: fn(w, x))
# PyTorch's CPU pow takes these exponents of a Python scalar (not of a
# tensor) to sqrt, 1 / sqrt, reciprocal and products for f32, f64 and bf16,
# not for f16: they differ from pow at -inf, -0 and where x * x overflows.
POW_EDGES = torch.tensor([-float("inf"), -0.0, 0.0, 4.0, 1e20, -3.5, float("nan"), float("inf"), 0.3])
for dt in ("f32", "f64", "bf16", "f16"):
    for kind, s in (("float", 0.5), ("float", -0.5), ("float", -1.0), ("float", 2.0), ("float", 3.0),
                    ("float", -2.0), ("float", 1.5), ("int", 2), ("int", 3)):
        add("scalar", [POW_EDGES.to(DT[dt])], {"kind": "pow", "value": s, "scalar": kind, "first": False},
            lambda x, s=s: x.pow(s))
add("scalar", [torch.tensor([1, 2], dtype=torch.int32)], {"kind": "remainder", "value": 0, "scalar": "int", "first": False},
    lambda x: torch.remainder(x, torch.tensor(0)))
# Large integer scalars (issue 15, item 10): exact beyond 2^53, wrapping in
# narrower integer dtypes, rounded once for floats.
BIG = [2**62 + 1, -(2**62) - 3, 2**53 + 1, 2**63 - 1, -(2**63), 2**40 + 7, 300, -1]
for name in ("add", "sub", "mul", "eq", "lt", "ge", "bitwise_xor", "maximum"):
    for dt in ALL:
        with fresh(dt):
            for s in BIG:
                if name == "sub" and dt == "bool":
                    continue
                x = rand(dt, [3])
                if dt == "i64":
                    x = torch.tensor([0, 2**62, -(2**62)], dtype=torch.int64)
                # torch.maximum takes no Python scalar; a 0-d i64 tensor promotes the same way.
                add("scalar", [x], {"kind": name, "value": s, "scalar": "int", "first": False},
                    lambda x, s=s, fn=BINARY[name]: fn(x, torch.tensor(s) if fn is torch.maximum else s))
                if name in ("sub", "lt"):
                    add("scalar", [x], {"kind": name, "value": s, "scalar": "int", "first": True},
                        lambda x, s=s, fn=BINARY[name]: fn(torch.tensor(s), x))

# --- reductions ----------------------------------------------------------------


def over(fn, axes):
    """Applies a single-axis torch reduction over several axes."""
    def run(x, keepdim):
        ax = sorted([a % max(x.dim(), 1) for a in axes] if axes else range(x.dim()), reverse=True)
        for a in ax:
            x = fn(x, a, keepdim)
        return x
    return run


REDUCE = {
    "sum": lambda x, ax, k: torch.sum(x, dim=ax, keepdim=k) if ax else torch.sum(x).reshape([1] * x.dim() if k else []),
    "mean": lambda x, ax, k: torch.mean(x, dim=ax, keepdim=k) if ax else torch.mean(x).reshape([1] * x.dim() if k else []),
    "prod": lambda x, ax, k: over(lambda t, a, kd: torch.prod(t, a, keepdim=kd), ax)(x, k),
    "max": lambda x, ax, k: torch.amax(x, dim=ax if ax else list(range(x.dim())), keepdim=k),
    "min": lambda x, ax, k: torch.amin(x, dim=ax if ax else list(range(x.dim())), keepdim=k),
    "var": lambda x, ax, k: torch.var(x, dim=ax if ax else None, unbiased=True, keepdim=k),
    "std": lambda x, ax, k: torch.std(x, dim=ax if ax else None, unbiased=True, keepdim=k),
    "any": lambda x, ax, k: over(lambda t, a, kd: torch.any(t != 0, a, keepdim=kd), ax)(x, k),
    "all": lambda x, ax, k: over(lambda t, a, kd: torch.all(t != 0, a, keepdim=kd), ax)(x, k),
}
for name, fn in REDUCE.items():
    for dt in ALL:
        with fresh(dt):
            for axes, keep in (([], False), ([1], False), ([0, 2], True), ([-1], True)):
                x = rand(dt, [2, 3, 4])
                add("reduce", [x], {"kind": name, "axes": axes, "keepdim": keep, "correction": 1},
                    lambda x, fn=fn, axes=axes, keep=keep: fn(x, axes, keep))
    add("reduce", [torch.tensor([[1.0, float("nan"), 3.0], [-float("inf"), 0.0, float("inf")]])],
        {"kind": name, "axes": [1], "keepdim": False, "correction": 1}, lambda x, fn=fn: fn(x, [1], False))
    add("reduce", [torch.zeros(0, 3)], {"kind": name, "axes": [1], "keepdim": False, "correction": 1},
        lambda x, fn=fn: fn(x, [1], False))
    for dt in HALVES:
        add("reduce", [torch.tensor([[1.0, float("nan"), 3.0], [-float("inf"), 0.0, float("inf")]]).to(DT[dt])],
            {"kind": name, "axes": [1], "keepdim": False, "correction": 1}, lambda x, fn=fn: fn(x, [1], False))
        add("reduce", [torch.zeros(0, 3, dtype=DT[dt])], {"kind": name, "axes": [1], "keepdim": False, "correction": 1},
            lambda x, fn=fn: fn(x, [1], False))
        # f32 accumulation: partial sums beyond the f16 range, 300 ones (bf16 alone would stop at 256).
        add("reduce", [torch.tensor([[60000.0, 60000.0, -60000.0, -50000.0], [1e-4, 1e-4, 1e-4, 1e-4]]).to(DT[dt])],
            {"kind": name, "axes": [1], "keepdim": False, "correction": 1}, lambda x, fn=fn: fn(x, [1], False))
        add("reduce", [torch.ones(2, 300, dtype=DT[dt])], {"kind": name, "axes": [1], "keepdim": True, "correction": 1},
            lambda x, fn=fn: fn(x, [1], True))
    # Integer sums and products of i8/i16 are i64 in PyTorch: no wrap at 127.
    for dt in ("i8", "i16"):
        add("reduce", [torch.tensor([[100, 100, 100], [-128 if dt == "i8" else -32768, -100, 7]], dtype=DT[dt])],
            {"kind": name, "axes": [1], "keepdim": False, "correction": 1}, lambda x, fn=fn: fn(x, [1], False))
# Repeated axes raise (issue 15, item 8).
for name, fn in (("sum", torch.sum), ("max", torch.amax), ("min", torch.amin), ("mean", torch.mean)):
    for axes in ([-1, 0, -1], [1, 1]):
        add("reduce", [rand("f32", [2, 3])], {"kind": name, "axes": axes, "keepdim": False, "correction": 1},
            lambda x, fn=fn, axes=axes: fn(x, dim=axes))
    add("reduce", [rand("f32", [])], {"kind": name, "axes": [0, -1], "keepdim": False, "correction": 1},
        lambda x, fn=fn: fn(x, dim=[0, -1]))
# var/std with correction >= n: n - correction <= 0 divides by 0 (inf, or NaN
# for 0 / 0), as PyTorch (issue 15, item 4).
for name, fn in (("var", torch.var), ("std", torch.std)):
    for corr in (2, 3, 5):
        for dt in FLOATS:
            with fresh(dt):
                add("reduce", [rand(dt, [3, 2])], {"kind": name, "axes": [1], "keepdim": False, "correction": corr},
                    lambda x, fn=fn, corr=corr: fn(x, dim=1, correction=corr))
                add("reduce", [rand(dt, [2])], {"kind": name, "axes": [], "keepdim": True, "correction": corr},
                    lambda x, fn=fn, corr=corr: fn(x, dim=None, correction=corr, keepdim=True))
    add("reduce", [torch.tensor([[1.0, 1.0], [2.0, float("nan")]])],
        {"kind": name, "axes": [1], "keepdim": False, "correction": 2}, lambda x, fn=fn: fn(x, dim=1, correction=2))
    add("reduce", [torch.tensor([4.0])], {"kind": name, "axes": [0], "keepdim": False, "correction": 1},
        lambda x, fn=fn: fn(x, dim=0, correction=1))
add("reduce", [rand("f64", [3, 4])], {"kind": "var", "axes": [0], "keepdim": False, "correction": 0},
    lambda x: torch.var(x, 0, unbiased=False))
add("reduce", [rand("f32", [3, 4])], {"kind": "std", "axes": [1], "keepdim": True, "correction": 0},
    lambda x: torch.std(x, 1, unbiased=False, keepdim=True))
for name in ("sum", "prod", "mean"):
    add("reduce", [torch.zeros(0, 3)], {"kind": name, "axes": [0], "keepdim": False, "correction": 1},
        lambda x, fn=REDUCE[name]: fn(x, [0], False))
for name in ("argmax", "argmin"):
    fn = getattr(torch, name)
    for dt in ALL:  # bool raises in PyTorch (issue 15, item 12)
        with fresh(dt):
            x = rand(dt, [3, 4])
            add(name, [x], {"axis": None, "keepdim": False}, lambda x, fn=fn: fn(x))
            # No axis with keepdim keeps every axis as extent 1 (issue 15, item 3).
            add(name, [x], {"axis": None, "keepdim": True}, lambda x, fn=fn: fn(x, keepdim=True))
            add(name, [rand(dt, [2, 1, 3])], {"axis": None, "keepdim": True}, lambda x, fn=fn: fn(x, keepdim=True))
            add(name, [rand(dt, [])], {"axis": None, "keepdim": True}, lambda x, fn=fn: fn(x, keepdim=True))
            add(name, [rand(dt, [])], {"axis": 0, "keepdim": True}, lambda x, fn=fn: fn(x, 0, keepdim=True))
            add(name, [x], {"axis": 1, "keepdim": True}, lambda x, fn=fn: fn(x, 1, keepdim=True))
            add(name, [x], {"axis": 0, "keepdim": False}, lambda x, fn=fn: fn(x, 0))
    add(name, [torch.tensor([[1.0, 3.0, 3.0], [2.0, float("nan"), 1.0]])], {"axis": 1, "keepdim": False},
        lambda x, fn=fn: fn(x, 1))
    for dt in HALVES:
        add(name, [torch.tensor([[1.0, 3.0, 3.0], [2.0, float("nan"), 1.0]]).to(DT[dt])], {"axis": 1, "keepdim": False},
            lambda x, fn=fn: fn(x, 1))
for log in (False, True):
    fn = torch.log_softmax if log else torch.softmax
    op = "log_softmax" if log else "softmax"
    for dt in FLOATS:
        with fresh(dt):
            add(op, [rand(dt, [3, 4])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
            add(op, [rand(dt, [3, 4])], {"axis": 0}, lambda x, fn=fn: fn(x, 0))
            add(op, [rand(dt, [2, 3, 2])], {"axis": -2}, lambda x, fn=fn: fn(x, -2))
    add(op, [torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -999.0, -1e4]])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
    add(op, [torch.tensor([[-float("inf"), 0.0, 1.0], [-float("inf"), -float("inf"), -float("inf")]])], {"axis": 1},
        lambda x, fn=fn: fn(x, 1))
    add(op, [torch.tensor([[float("nan"), 0.0], [float("inf"), 1.0]])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
    add(op, [torch.zeros(2, 0)], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
    for dt in HALVES:
        for rows in ([[1000.0, 1001.0, 1002.0], [-1000.0, -999.0, -1e4]],
                     [[-float("inf"), 0.0, 1.0], [-float("inf"), -float("inf"), -float("inf")]],
                     [[float("nan"), 0.0, 1.0], [float("inf"), 1.0, 2.0]]):
            add(op, [torch.tensor(rows).to(DT[dt])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))

# --- matmul and linear ----------------------------------------------------------
for dt in ["f32", "f64", "i32", "i64"] + NEW:
    with fresh(dt):
        for sa, sb in (([2, 3], [3, 4]), ([3], [3, 2]), ([2, 3], [3]), ([4], [4]), ([2, 1, 2, 3], [4, 3, 2]),
                       ([5, 2, 3], [3, 1]), ([3], [2, 3, 2]), ([2, 0], [0, 3])):
            add("matmul", [rand(dt, sa), rand(dt, sb)], {}, torch.matmul, tol=[1e-5, 1e-5])
add("matmul", [rand("u8", [2, 3]), rand("u8", [3, 2])], {}, torch.matmul)
add("matmul", [rand("f32", [2, 3]), rand("f64", [3, 2])], {}, torch.matmul)
with fresh():
    # Operands of different dtypes are refused, halves included.
    for da, db in (("f16", "bf16"), ("f16", "f32"), ("bf16", "f32"), ("i8", "i16"), ("i8", "u8")):
        add("matmul", [rand(da, [2, 3]), rand(db, [3, 2])], {}, torch.matmul)
    # Integer products wrap in the operands' dtype (300 -> 44 in i8).
    add("matmul", [torch.tensor([[1, 2], [100, -100]], dtype=torch.int8),
                   torch.tensor([[100], [100]], dtype=torch.int8)], {}, torch.matmul)
    add("matmul", [torch.tensor([[300, 200]], dtype=torch.int16), torch.tensor([[300], [1]], dtype=torch.int16)],
        {}, torch.matmul)
    # Sums of products beyond the f16 range on the way, finite at the end (f32 accumulation).
    add("matmul", [torch.tensor([[250.0, 250.0, -250.0]]).half(), torch.tensor([[250.0], [250.0], [250.0]]).half()],
        {}, torch.matmul)
for dt in FLOATS:
    with fresh(dt):
        add("linear", [rand(dt, [4, 3]), rand(dt, [5, 3]), rand(dt, [5])], {}, F.linear, tol=[1e-5, 1e-5])
        add("linear", [rand(dt, [2, 4, 3]), rand(dt, [2, 3])], {}, F.linear, tol=[1e-5, 1e-5])
        add("linear", [rand(dt, [3]), rand(dt, [2, 3]), rand(dt, [2])], {}, F.linear, tol=[1e-5, 1e-5])

# --- casts ------------------------------------------------------------------------
for da in ALL:
    for db in ALL:
        with fresh(da, db):
            x = rand(da, [2, 4])
            if da in FLOATS and db == "u8":
                x = x.abs()  # negative float -> u8 is undefined in C++; PyTorch gives the x86 result
            if da in FLOATS and db in INTS:
                x = x * 7  # exercise truncation toward zero
            add("cast", [x], {"dtype": db}, lambda x, db=db: x.to(DT[db]))
add("cast", [torch.tensor([300.7, 255.9, 0.2])], {"dtype": "u8"}, lambda x: x.to(torch.uint8))
add("cast", [torch.tensor([-1, 256, 513], dtype=torch.int32)], {"dtype": "u8"}, lambda x: x.to(torch.uint8))
add("cast", [torch.tensor([4294967297, -1], dtype=torch.int64)], {"dtype": "i32"}, lambda x: x.to(torch.int32))
add("cast", [SPECIAL.clone()], {"dtype": "bool"}, lambda x: x.to(torch.bool))
# In-range values near the i64 limits (issue 15, item 6): the cutoff is 2^63.
add("cast", [torch.tensor([9.2e18, 2.0**63 - 1024, -9.2e18, -(2.0**63), 9.2233720368547748e18], dtype=torch.float64)],
    {"dtype": "i64"}, lambda x: x.to(torch.int64))
add("cast", [torch.tensor([9.2e18, -9.2e18, 2.0**62, -(2.0**63)], dtype=torch.float32)], {"dtype": "i64"},
    lambda x: x.to(torch.int64))

# --- layout ---------------------------------------------------------------------
for dt in ALL:
    with fresh(dt):
        x = rand(dt, [2, 3, 4])
        add("reshape", [x], {"shape": [4, -1]}, lambda x: x.reshape(4, -1))
        add("permute", [x], {"axes": [2, 0, 1]}, lambda x: x.permute(2, 0, 1))
        add("transpose", [x], {"a": 0, "b": -1}, lambda x: x.transpose(0, -1))
        add("flip", [x], {"axes": [0, 2]}, lambda x: x.flip(0, 2))
        add("slice", [x], {"slices": [[1, None, 1], [0, 3, 2], [-3, None, 2]]}, lambda x: x[1:, 0:3:2, -3::2])
        add("cat", [x, rand(dt, [2, 1, 4])], {"axis": 1}, lambda a, b: torch.cat([a, b], 1))
        add("stack", [rand(dt, [2, 3]), rand(dt, [2, 3])], {"axis": 1}, lambda a, b: torch.stack([a, b], 1))
        add("pad", [rand(dt, [2, 3])], {"before": [1, 0], "after": [0, 2], "value": 1},
            lambda x: F.pad(x, (0, 2, 1, 0), value=1) if x.dtype != torch.bool else F.pad(x.to(torch.uint8), (0, 2, 1, 0), value=1).to(torch.bool))
        add("expand", [rand(dt, [3, 1])], {"shape": [2, 3, 4]}, lambda x: x.expand(2, 3, 4))
        add("squeeze", [rand(dt, [1, 3, 1])], {"axis": None}, lambda x: x.squeeze())
        add("squeeze", [rand(dt, [1, 3, 1])], {"axis": -1}, lambda x: x.squeeze(-1))
        add("unsqueeze", [rand(dt, [2, 3])], {"axis": 1}, lambda x: x.unsqueeze(1))
        add("slice_assign", [rand(dt, [3, 4]), rand(dt, [2, 1])], {"slices": [[0, 3, 2], [1, 3, 1]]},
            lambda b, v: (lambda c: (c.__setitem__((slice(0, 3, 2), slice(1, 3)), v), c)[1])(b.clone()))
        add("gather", [rand(dt, [3, 4]), torch.randint(0, 4, (3, 2))], {"axis": 1}, lambda x, i: torch.gather(x, 1, i))
        add("gather", [rand(dt, [3, 4]), torch.randint(0, 3, (2, 4))], {"axis": 0}, lambda x, i: torch.gather(x, 0, i))
        add("index_select", [rand(dt, [3, 4]), torch.tensor([2, 0, 2])], {"axis": 0}, lambda x, i: torch.index_select(x, 0, i))
        add("index_select", [rand(dt, [3, 4]), torch.tensor([3, 1], dtype=torch.int32)], {"axis": 1},
            lambda x, i: torch.index_select(x, 1, i.long()))
        if dt != "bool":
            add("scatter_add", [rand(dt, [3, 4]), torch.randint(0, 3, (2, 4)), rand(dt, [2, 4])], {"axis": 0},
                lambda x, i, s: torch.scatter_add(x, 0, i, s))
        add("where", [torch.rand(2, 3) < 0.5, rand(dt, [2, 3]), rand(dt, [3])], {}, torch.where)
        add("masked_fill", [rand(dt, [2, 3]), torch.tensor([True, False, True])], {"value": 1, "scalar": "int"},
            lambda x, m: x.masked_fill(m, 1))
add("where", [torch.tensor([True, False]), rand("i32", [2]), rand("f64", [2, 1])], {}, torch.where)
add("where", [torch.tensor([True, False]), rand("u8", [2]), rand("i64", [2])], {}, torch.where)
add("cat", [rand("i32", [2]), rand("f32", [3]), rand("u8", [1])], {"axis": 0}, lambda *t: torch.cat(t))
add("cat", [rand("f32", [0, 2]), rand("f32", [2, 2])], {"axis": 0}, lambda *t: torch.cat(t))
add("slice", [rand("f32", [10])], {"slices": [[7, 3, 1]]}, lambda x: x[7:3])
add("gather", [rand("f32", [2, 3]), torch.tensor([[0], [5]])], {"axis": 1}, lambda x, i: torch.gather(x, 1, i))
# 0-d inputs (issue 15, items 5 and 7): the index is still checked; flip and
# transpose accept axis 0 and -1.
for dt in ALL:
    with fresh(dt):
        for v in (0, 1, 1000000):
            add("gather", [rand(dt, []), torch.tensor(v)], {"axis": 0}, lambda x, i: torch.gather(x, 0, i))
            if dt != "bool":
                add("scatter_add", [rand(dt, []), torch.tensor(v), rand(dt, [])], {"axis": 0},
                    lambda x, i, s: torch.scatter_add(x, 0, i, s))
        add("gather", [rand(dt, []), torch.tensor(0)], {"axis": -1}, lambda x, i: torch.gather(x, -1, i))
        add("index_select", [rand(dt, []), torch.tensor(1)], {"axis": 0}, lambda x, i: torch.index_select(x, 0, i))
        add("index_select", [rand(dt, []), torch.tensor([0, 0])], {"axis": 0}, lambda x, i: torch.index_select(x, 0, i))
        for axes in ([0], [-1], [1]):
            add("flip", [rand(dt, [])], {"axes": axes}, lambda x, axes=axes: x.flip(axes))
        for a, b in ((0, -1), (0, 0), (-1, -1), (0, 1)):
            add("transpose", [rand(dt, [])], {"a": a, "b": b}, lambda x, a=a, b=b: x.transpose(a, b))
# masked_fill checks the value against the dtype's range (issue 15, item 9).
for dt, vals in (("i32", [4294967299, -2147483648, 2147483647, 2147483648, 2.5, 3e9]),
                 ("u8", [-1, -255, -256, 255, 256, 1.5, -1.5]),
                 ("i64", [2**63 - 1, -(2**63), 2**62 + 1, 1e19]),
                 ("f32", [1e40, -1e40, 3e38, 2**62 + 1, float("inf")]),
                 ("f64", [1e300, 2**63 - 1]),
                 ("bool", [2, -1, 0.5])):
    for v in vals:
        kind = "float" if isinstance(v, float) else "int"
        add("masked_fill", [rand(dt, [2, 3]), torch.tensor([True, False, True])], {"value": enc(v), "scalar": kind},
            lambda x, m, v=v: x.masked_fill(m, v))
add("masked_fill", [rand("i64", []), torch.tensor(True)], {"value": 2**62 + 1, "scalar": "int"},
    lambda x, m: x.masked_fill(m, 2**62 + 1))
# The new dtypes' ranges: 65504 is f16's largest value, and PyTorch refuses
# anything above it, even 65519 which would round to 65504; a float value in
# an integer tensor truncates without complaint.
for dt, vals in (("f16", [65504, -65504, 65519.0, 65520.0, 1e5, float("inf"), 0.1, 1e-8, 2**62 + 1]),
                 ("bf16", [3.3895313892515355e38, 3.4e38, 1e39, 0.1, 1e-40, float("-inf"), 2**62 + 1]),
                 ("i8", [127, -128, 128, -129, 255, 1.5, -1.5, 300.0]),
                 ("i16", [32767, -32768, 32768, -32769, 65535, 2.5])):
    with fresh(dt):
        for v in vals:
            kind = "float" if isinstance(v, float) else "int"
            add("masked_fill", [rand(dt, [2, 3]), torch.tensor([True, False, True])],
                {"value": enc(v), "scalar": kind}, lambda x, m, v=v: x.masked_fill(m, v))
# Negative pad widths crop (issue 15, item 11).
# (PyTorch 1.13 also refuses an axis cropped to 0 while another grows; we
# allow it, so no such case is drawn.)
for before, after in (([0, -1], [-1, 0]), ([0, -3], [0, 1]), ([0, 1], [0, -3]), ([-1, 1], [0, 2]), ([0, -4], [0, 0]),
                      ([0, 2], [0, -4]), ([0, -2], [0, -1]), ([-2, 0], [0, 0]), ([-1, 0], [-1, 0])):
    add("pad", [rand("f32", [2, 3])], {"before": before, "after": after, "value": 7},
        lambda x, b=before, a=after: F.pad(x, (b[1], a[1], b[0], a[0]), value=7))
# A linear bias of another dtype: PyTorch 1.13 refuses it (addmm) as we do.
add("linear", [rand("f32", [4, 3]), rand("f32", [5, 3]), rand("f64", [5])], {}, F.linear)
add("linear", [rand("f64", [2, 4, 3]), rand("f64", [5, 3]), rand("f32", [5])], {}, F.linear)
# where promotes like the binary ops (0-d operands count less).
for da, db in (("i32", "i64"), ("u8", "i32"), ("f32", "f64"), ("i32", "f64"), ("bool", "i64")):
    add("where", [torch.tensor([True, False]), rand(da, [2]), rand(db, [])], {}, torch.where)
    add("where", [torch.tensor(True), rand(da, []), rand(db, [2])], {}, torch.where)
for da, db in (("f16", "bf16"), ("f16", "f32"), ("bf16", "f64"), ("f16", "i64"), ("i8", "u8"), ("i8", "i16"),
               ("u8", "i16"), ("bool", "i8"), ("i16", "f16"), ("bf16", "i32")):
    with fresh(da, db):
        add("where", [torch.tensor([True, False, True]), rand(da, [3]), rand(db, [3])], {}, torch.where)
        add("where", [torch.tensor([True, False]), rand(da, [2]), rand(db, [])], {}, torch.where)
        add("where", [torch.tensor(True), rand(da, []), rand(db, [2])], {}, torch.where)

# --- composed layout and resampling ops (issue 18) -----------------------------------
for dt in ALL:
    with fresh(dt):
        for k in (0, 1, -1, 5, -5):
            add("tril", [rand(dt, [3, 4])], {"diagonal": k}, lambda x, k=k: torch.tril(x, k))
            add("triu", [rand(dt, [2, 3, 4])], {"diagonal": k}, lambda x, k=k: torch.triu(x, k))
add("tril", [rand("f32", [4])], {"diagonal": 0}, torch.tril)
add("triu", [rand("f32", [0, 3])], {"diagonal": 1}, lambda x: torch.triu(x, 1))
for reps in ([2, 3], [1, 1], [2, 1, 2], [0, 2], [3]):
    add("repeat", [rand("i64", [2, 3])], {"repeats": reps}, lambda x, r=reps: x.repeat(*r))
    add("tile", [rand("f32", [2, 3])], {"reps": reps}, lambda x, r=reps: torch.tile(x, tuple(r)))
add("repeat", [rand("bool", [])], {"repeats": [2, 2]}, lambda x: x.repeat(2, 2))
with fresh():
    for dt in NEW:
        add("repeat", [rand(dt, [2, 3])], {"repeats": [2, 1, 2]}, lambda x: x.repeat(2, 1, 2))
        add("tile", [rand(dt, [2, 3])], {"reps": [2, 3]}, lambda x: torch.tile(x, (2, 3)))
        add("roll", [rand(dt, [3, 4])], {"shifts": [1, -2], "dims": [0, 1]}, lambda x: torch.roll(x, [1, -2], [0, 1]))
add("repeat", [rand("f32", [2])], {"repeats": [-1]}, lambda x: x.repeat(-1))
for shifts, dims in (([1], [0]), ([-1], [1]), ([7], [1]), ([1, -2], [0, 1]), ([3], []), ([-4], []), ([0], [0]),
                     ([1, 1], [0])):
    add("roll", [rand("i32", [3, 4])], {"shifts": shifts, "dims": dims},
        lambda x, s=shifts, d=dims: torch.roll(x, s, d) if d else torch.roll(x, s[0]))
for mode in ("reflect", "replicate", "circular"):
    for shape, widths in (([2, 5], [2, 1]), ([1, 2, 4], [1, 3]), ([1, 2, 3, 4], [1, 2, 2, 0]),
                          ([1, 1, 3, 3, 3], [1, 1, 2, 0, 0, 2]), ([1, 3], [3, 0]), ([2, 3], [-1, 1]),
                          ([1, 2, 3], [-1, 1]), ([1, 1, 2, 3], [-1, 0, 1, 0]), ([3], [1, 1]), ([1, 2, 3], [4, 0]),
                          ([1, 2, 3], [1, 1, 1, 1]), ([1, 1, 1, 2, 3], [1, 1]), ([1, 2, 3], [-3, 2]),
                          ([1, 2, 3], [-1, 2]), ([1, 2, 3], [-2, 2]), ([1, 2, 3], [-4, 0])):
        if mode == "circular" and widths == [-3, 2]:
            continue  # PyTorch 1.13 returns uninitialised memory there; we wrap the input
        for dt in ("f32", "f64", "i64"):
            add("pad_mode", [rand(dt, shape)], {"pad": widths, "mode": mode},
                lambda x, w=widths, m=mode: F.pad(x, tuple(w), mode=m))
        if shape in ([2, 5], [1, 2, 4], [1, 2, 3, 4], [1, 1, 3, 3, 3]) or widths == [-1, 1]:
            with fresh():
                for dt in ("f16", "bf16", "i8"):
                    add("pad_mode", [rand(dt, shape)], {"pad": widths, "mode": mode},
                        lambda x, w=widths, m=mode: F.pad(x, tuple(w), mode=m))
def interpolate_exact(shape):
    """Whether PyTorch 1.13 takes its channels-first kernel for this f32 input,
    which Switchyard reproduces bit for bit (sums as fma(x0, w0, x1 * w1),
    innermost axis first, source positions in double). A 4-D or 5-D input
    with one channel is channels-last contiguous too, and takes the
    channels-last kernel, which sums the four or eight corners otherwise
    (within an ulp). f64 sums as the former in an fma the op set lacks."""
    return len(shape) == 3 or shape[1] > 1


for shape, kw in (([1, 2, 5], {"size": [8]}), ([2, 1, 3, 4], {"size": [5, 7]}), ([1, 2, 4, 4], {"size": [2, 3]}),
                  ([1, 1, 3, 4], {"scale_factor": [2.0]}), ([1, 1, 5, 6], {"scale_factor": [0.5, 1.5]}),
                  ([1, 1, 2, 3, 4], {"size": [3, 4, 2]}), ([1, 1, 4, 4], {"scale_factor": [1.7]}),
                  ([1, 1, 7], {"size": [3]}), ([1, 1, 3, 3], {"size": [1, 1]})):
    rank = len(shape)
    for mode in ("nearest", "nearest-exact", ("linear", "bilinear", "trilinear")[rank - 3]):
        for corners in ((None,) if mode.startswith("nearest") else (None, True, False)):
            for dt in ("f32", "f64", "u8"):
                args = {"mode": mode, "align_corners": corners, "size": kw.get("size", []),
                        "scale_factor": kw.get("scale_factor", [])}
                def run(x, kw=kw, mode=mode, corners=corners):
                    size = kw.get("size")
                    scale = kw.get("scale_factor")
                    return F.interpolate(x, size=None if size is None else (size if len(size) > 1 else size[0]),
                                         scale_factor=None if scale is None else (
                                             tuple(scale) if len(scale) > 1 else scale[0]),
                                         mode=mode, align_corners=corners)
                add("interpolate", [rand(dt, shape)], args, run, exact=dt == "f32" and interpolate_exact(shape),
                    tol=None if dt != "f32" or interpolate_exact(shape) else [1e-5, 1e-5])
            if rank < 5 and len(kw.get("size", [])) != 1 or shape == [1, 2, 5]:
                with fresh():
                    for dt in HALVES:
                        add("interpolate", [rand(dt, shape)], args, run)

# --- creation -----------------------------------------------------------------------
for dt in ALL:
    add("full", [], {"shape": [2, 3], "value": 1 if dt == "bool" else 3, "dtype": dt},
        lambda dt=dt: torch.full((2, 3), True if dt == "bool" else 3, dtype=DT[dt]))
    # PyTorch 1.13 has no bf16 eye kernel; its values are exact, so an f32 eye cast is the expectation.
    add("eye", [], {"n": 3, "m": 2, "dtype": dt},
        lambda dt=dt: torch.eye(3, 2).to(DT[dt]) if dt == "bf16" else torch.eye(3, 2, dtype=DT[dt]))
for dt in ["f32", "f64", "i32", "i64"] + NEW:
    add("arange", [], {"start": 1, "end": 11, "step": 3, "dtype": dt}, lambda dt=dt: torch.arange(1, 11, 3, dtype=DT[dt]))
add("arange", [], {"start": 0, "end": 1, "step": 0.125, "dtype": "f32"}, lambda: torch.arange(0, 1, 0.125))
for dt in HALVES:
    add("arange", [], {"start": 0, "end": 1, "step": 0.125, "dtype": dt},
        lambda dt=dt: torch.arange(0, 1, 0.125, dtype=DT[dt]))
add("arange", [], {"start": 120, "end": 130, "step": 3, "dtype": "i8"},
    lambda: torch.arange(120, 130, 3, dtype=torch.int8))  # 129 wraps to -127
add("arange", [], {"start": 5, "end": -3, "step": -2, "dtype": "i64"}, lambda: torch.arange(5, -3, -2))

# --- convolution and pooling ----------------------------------------------------------
# Args name the public nn:: call: "n" spatial axes, then PyTorch's arguments.
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAXP = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVGP = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
CONV_TOL = [1e-5, 1e-5]


def conv_case(dt, n, batch, cin, cout, size, k, stride=1, padding=0, dilation=1, groups=1, bias=True):
    x = rand(dt, ([batch] if batch else []) + [cin] + [size] * n)
    w = rand(dt, [cout, cin // groups] + [k] * n)
    ins = [x, w] + ([rand(dt, [cout])] if bias else [])
    args = {"n": n, "stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    add("conv", ins, args, lambda x, w, b=None: CONV[n](x, w, b, stride, padding, dilation, groups), tol=CONV_TOL)


def conv_t_case(dt, n, batch, cin, cout, size, k, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                bias=True):
    x = rand(dt, ([batch] if batch else []) + [cin] + [size] * n)
    w = rand(dt, [cin, cout // groups] + [k] * n)
    ins = [x, w] + ([rand(dt, [cout])] if bias else [])
    args = {"n": n, "stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups,
            "dilation": dilation}
    add("conv_transpose", ins, args,
        lambda x, w, b=None: CONV_T[n](x, w, b, stride, padding, output_padding, groups, dilation), tol=CONV_TOL)


for dt in FLOATS:
    with fresh(dt):
        for n in (1, 2, 3):
            size = {1: 7, 2: 5, 3: 3}[n]
            b2 = 2 if n < 3 else 1  # 3-D cases stay small: the file is replayed on every device
            conv_case(dt, n, b2, 4, 6, size, 3)
            conv_case(dt, n, 0, 4, 6, size, 3, bias=False)  # unbatched
            conv_case(dt, n, 1, 4, 6, size, 3, stride=2, padding=1)
            conv_case(dt, n, 1, 4, 4, size, 2, dilation=2, padding=1, groups=2)
            conv_case(dt, n, b2, 4, 8, size, 3, padding=1, groups=4)  # depthwise, multiplier 2
            conv_case(dt, n, 1, 3, 5, size, 1)  # 1x1
            conv_case(dt, n, 1, 4, 6, size, 2, padding="same")  # even kernel: asymmetric pads
            conv_case(dt, n, 1, 4, 6, size, 3, padding="valid", dilation=2 if n < 3 else 1)
            conv_t_case(dt, n, b2, 4, 6, size - 1, 3)
            conv_t_case(dt, n, 0, 4, 3, size - 1, 3, bias=False)
            conv_t_case(dt, n, 1, 4, 2, size - 1, 3, stride=2, padding=1, output_padding=1)
            conv_t_case(dt, n, 1, 4, 4, size - 1, 2, stride=2, groups=2, dilation=2, output_padding=1)
        conv_case(dt, 2, 1, 4, 6, 6, 3, stride=[1, 2], padding=[0, 1], dilation=[2, 1])
        conv_case(dt, 2, 1, 4, 6, 6, 3, stride=[2, 1], padding=[1, 0])
        conv_case(dt, 2, 2, 6, 6, 6, 3, padding=1, groups=6)  # depthwise 3x3
        conv_case(dt, 2, 1, 6, 6, 6, 3, stride=2, padding=1, groups=6)  # strided depthwise
        conv_t_case(dt, 2, 1, 4, 6, 4, 3, stride=[2, 3], padding=[1, 0], output_padding=[1, 2])
# Errors: channels vs groups, kernel larger than the input, bad stride,
# bias shape, dtypes, weight rank, output_padding, "same" with stride.
conv_case("f32", 2, 1, 4, 6, 5, 3, groups=3)
conv_case("f32", 2, 1, 4, 6, 2, 3)
conv_case("f32", 2, 1, 4, 6, 5, 3, stride=0)
conv_case("f32", 2, 1, 4, 6, 5, 3, dilation=0)
conv_case("f32", 2, 1, 4, 6, 5, 3, stride=2, padding="same")
conv_t_case("f32", 2, 1, 4, 6, 5, 3, output_padding=1)
add("conv", [rand("f32", [1, 4, 5, 5]), rand("f32", [8, 3, 3, 3])], {"n": 2}, F.conv2d)
add("conv", [rand("f32", [1, 4, 5, 5]), rand("f32", [8, 4, 3, 3]), rand("f32", [3])], {"n": 2}, F.conv2d)
add("conv", [rand("f32", [1, 4, 5, 5]), rand("f32", [8, 4, 3])], {"n": 2}, F.conv2d)
add("conv", [rand("f32", [1, 4, 5, 5]), rand("f64", [8, 4, 3, 3])], {"n": 2}, F.conv2d)
add("conv", [rand("f32", [4, 5, 5, 5, 5]), rand("f32", [8, 4, 3, 3])], {"n": 2}, F.conv2d)
add("conv", [rand("bool", [1, 4, 5, 5]), rand("bool", [8, 4, 3, 3])], {"n": 2}, F.conv2d)
with fresh():
    add("conv", [rand("f16", [1, 4, 5, 5]), rand("bf16", [8, 4, 3, 3])], {"n": 2}, F.conv2d)
    add("conv", [rand("bf16", [1, 4, 5, 5]), rand("f32", [8, 4, 3, 3])], {"n": 2}, F.conv2d)
    add("conv", [rand("f16", [1, 4, 5, 5]), rand("f16", [8, 4, 3, 3]), rand("f32", [8])], {"n": 2}, F.conv2d)
# (PyTorch 1.13's CPU also convolves some integer dtypes in a slow fallback
# with gaps (no dilated i32, no transposed i32/u8); Switchyard takes the
# floating dtypes only, a deliberate difference, so no integer conv case is
# drawn.)


def pool_case(kind, dt, n, shape, **kw):
    x = rand(dt, shape)
    args = {"n": n, **kw}
    if kind == "max_pool":
        add("max_pool", [x], args, lambda x: MAXP[n](x, **kw))
        add("max_pool_indices", [x], args, lambda x: MAXP[n](x, return_indices=True, **kw)[1])
    elif kind == "avg_pool":
        add("avg_pool", [x], args, lambda x: AVGP[n](x, **kw), tol=[1e-6, 1e-6])
    elif kind == "adaptive_avg":
        f = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[n]
        add("adaptive_avg_pool", [x], args, lambda x: f(x, **kw), tol=[1e-6, 1e-6])
    else:
        f = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d}[n]
        add("adaptive_max_pool", [x], args, lambda x: f(x, **kw))
        add("adaptive_max_pool_indices", [x], args, lambda x: f(x, return_indices=True, **kw)[1])


for dt in FLOATS:
    with fresh(dt):
        for n in (1, 2, 3):
            size = {1: 9, 2: 7, 3: 4}[n]
            shape = ([2, 3] if n < 3 else [1, 2]) + [size] * n
            pool_case("max_pool", dt, n, shape, kernel_size=2)
            pool_case("max_pool", dt, n, shape[1:], kernel_size=3, stride=2, padding=1)
            pool_case("max_pool", dt, n, shape, kernel_size=2, stride=2, ceil_mode=True)
            pool_case("max_pool", dt, n, shape, kernel_size=2, stride=1, dilation=2, padding=1)
            pool_case("max_pool", dt, n, shape, kernel_size=3, stride=2, padding=1, ceil_mode=True)
            pool_case("avg_pool", dt, n, shape, kernel_size=2)
            pool_case("avg_pool", dt, n, shape[1:], kernel_size=3, stride=2, padding=1)
            pool_case("avg_pool", dt, n, shape, kernel_size=3, stride=2, padding=1, count_include_pad=False)
            pool_case("avg_pool", dt, n, shape, kernel_size=2, stride=2, padding=1, ceil_mode=True)
            pool_case("avg_pool", dt, n, shape, kernel_size=3, stride=2, padding=1, ceil_mode=True,
                      count_include_pad=False)
            if n > 1:
                pool_case("avg_pool", dt, n, shape, kernel_size=3, padding=1, divisor_override=4)
            if n < 3:
                pool_case("adaptive_max", dt, n, shape, output_size=3)
                pool_case("adaptive_max", dt, n, shape, output_size=1)
            pool_case("adaptive_avg", dt, n, shape, output_size=3)
            pool_case("adaptive_avg", dt, n, shape[1:], output_size=1)
        pool_case("max_pool", dt, 2, [1, 2, 6, 7], kernel_size=[2, 3], stride=[1, 2], padding=[1, 0])
        pool_case("avg_pool", dt, 2, [1, 2, 6, 7], kernel_size=[3, 2], stride=[2, 1], padding=[1, 1])
        pool_case("adaptive_max", dt, 2, [1, 2, 7, 5], output_size=[3, 4])
        pool_case("adaptive_avg", dt, 2, [1, 2, 7, 5], output_size=[4, 2])
# NaN wins a max window (the last NaN seen); -inf windows keep the first index.
NANS = torch.tensor([[[1.0, float("nan"), 3.0, float("nan")], [-float("inf"), -float("inf"), 2.0, 2.0]]])
for k in ("max_pool",):
    add("max_pool", [NANS.clone()], {"n": 1, "kernel_size": 2}, lambda x: F.max_pool1d(x, 2))
    add("max_pool_indices", [NANS.clone()], {"n": 1, "kernel_size": 4},
        lambda x: F.max_pool1d(x, 4, return_indices=True)[1])
    add("max_pool_indices", [NANS.clone()], {"n": 1, "kernel_size": 2},
        lambda x: F.max_pool1d(x, 2, return_indices=True)[1])
    for dt in HALVES:
        add("max_pool", [NANS.to(DT[dt])], {"n": 1, "kernel_size": 2}, lambda x: F.max_pool1d(x, 2))
        add("max_pool_indices", [NANS.to(DT[dt])], {"n": 1, "kernel_size": 4},
            lambda x: F.max_pool1d(x, 4, return_indices=True)[1])
# Integer dtypes: PyTorch 1.13 CPU averages i64 only (truncating), max pools
# floats only.
for dt in INTS + ["bool"]:
    with fresh(dt):
        for n in (1, 2):
            shape = [1, 2] + [6] * n
            pool_case("avg_pool", dt, n, shape, kernel_size=2, padding=1)
            pool_case("max_pool", dt, n, shape, kernel_size=2)
            pool_case("adaptive_avg", dt, n, shape, output_size=2)
            pool_case("adaptive_max", dt, n, shape, output_size=2)
add("avg_pool", [torch.tensor([[[-7, -1, 5, 2]]])], {"n": 1, "kernel_size": 3, "padding": 1},
    lambda x: F.avg_pool1d(x, 3, padding=1))
# Errors: padding over half the kernel, output too small, zero stride or kernel.
pool_case("max_pool", "f32", 2, [1, 1, 5, 5], kernel_size=3, padding=2)
pool_case("avg_pool", "f32", 2, [1, 1, 5, 5], kernel_size=3, padding=2)
pool_case("max_pool", "f32", 2, [1, 1, 2, 2], kernel_size=3)
pool_case("avg_pool", "f32", 2, [1, 1, 2, 2], kernel_size=3)
pool_case("max_pool", "f32", 2, [1, 1, 5, 5], kernel_size=2, stride=0)
pool_case("max_pool", "f32", 2, [1, 1, 5, 5], kernel_size=0)
pool_case("max_pool", "f32", 2, [5, 5], kernel_size=2, dilation=0)
pool_case("max_pool", "f32", 2, [5], kernel_size=2)
pool_case("avg_pool", "f32", 2, [1, 1, 4, 4], kernel_size=2, divisor_override=0)
# --- normalisation, attention, scans, sort/topk, scatter (issue 18, part B) ----
def opt(t):
    return None if t is None else t


for dt in ALL:  # PyTorch refuses the integer and bool ones; so do we
    with fresh(dt):
        x = rand(dt, [2, 3, 4])
        for shape in ([4], [3, 4]):
            w = rand(dt, shape) if dt in FLOATS else None
            b = rand(dt, shape) if dt in FLOATS else None
            add("layer_norm", [x], {"shape": shape, "eps": 1e-5}, lambda x, s=shape: F.layer_norm(x, s))
            if w is not None:
                add("layer_norm", [x, w, b], {"shape": shape, "eps": 1e-3},
                    lambda x, w, b, s=shape: F.layer_norm(x, s, w, b, eps=1e-3))
        for groups in (1, 3):
            add("group_norm", [rand(dt, [2, 6, 5])], {"groups": groups, "eps": 1e-5},
                lambda x, g=groups: F.group_norm(x, g))
        if dt in FLOATS:
            add("group_norm", [rand(dt, [2, 6, 2, 3]), rand(dt, [6]), rand(dt, [6])], {"groups": 2, "eps": 1e-4},
                lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-4))
        mean = rand(dt, [3]) if dt in FLOATS else torch.zeros(3)
        var = rand(dt, [3], "pos") if dt in FLOATS else torch.ones(3)
        add("batch_norm", [rand(dt, [2, 3, 4]), mean, var], {"eps": 1e-5},
            lambda x, m, v: F.batch_norm(x, m, v))
        if dt in FLOATS:
            add("batch_norm", [rand(dt, [2, 3]), mean, var, rand(dt, [3]), rand(dt, [3])], {"eps": 1e-2},
                lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, eps=1e-2))
            add("batch_norm", [rand(dt, [2, 3, 2, 2]), mean, var, rand(dt, [3])], {"eps": 1e-5},
                lambda x, m, v, w: F.batch_norm(x, m, v, w))


def rms_norm(x, shape, w=None, eps=None):
    """torch 2.x's F.rms_norm (not in 1.13): x * rsqrt(mean(x^2) + eps) * w.
    As torch 2.x does for f16/bf16: computed in f32 (eps None: f32's machine
    epsilon, not the half type's), rounded once to the input's dtype."""
    if not x.dtype.is_floating_point:
        raise RuntimeError("rms_norm needs a floating input")
    if x.dtype in HALF_TYPES:
        return rms_norm(x.float(), shape, None if w is None else w.float(), eps).to(x.dtype)
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    dims = tuple(range(-len(shape), 0))
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * w if w is not None else y


for dt in ALL:
    with fresh(dt):
        x = rand(dt, [2, 3, 4])
        add("rms_norm", [x], {"shape": [4], "eps": None}, lambda x: rms_norm(x, [4]), tol=[1e-5, 1e-6])
        if dt in FLOATS:
            add("rms_norm", [x, rand(dt, [3, 4])], {"shape": [3, 4], "eps": 1e-2},
                lambda x, w: rms_norm(x, [3, 4], w, 1e-2), tol=[1e-5, 1e-6])
# Bad arguments: a shape that is not a suffix, channels not divisible, a
# weight of the wrong shape.
add("layer_norm", [rand("f32", [2, 3])], {"shape": [2], "eps": 1e-5}, lambda x: F.layer_norm(x, [2]))
add("layer_norm", [rand("f32", [2, 3]), rand("f32", [2])], {"shape": [3], "eps": 1e-5},
    lambda x, w: F.layer_norm(x, [3], w))
add("group_norm", [rand("f32", [2, 6, 3])], {"groups": 4, "eps": 1e-5}, lambda x: F.group_norm(x, 4))
add("layer_norm", [rand("f32", [2, 3])], {"shape": [], "eps": 1e-5}, lambda x: F.layer_norm(x, []))
add("layer_norm", [rand("f32", [0, 3])], {"shape": [3], "eps": 1e-5}, lambda x: F.layer_norm(x, [3]))
add("group_norm", [rand("f32", [2, 0, 3])], {"groups": 1, "eps": 1e-5}, lambda x: F.group_norm(x, 1))
add("batch_norm", [rand("f32", [2, 3]), rand("f32", [4]), rand("f32", [4], "pos")], {"eps": 1e-5},
    lambda x, m, v: F.batch_norm(x, m, v))


def sdpa(q, k, v, mask=None, causal=False, scale=None):
    """torch 2.x's scaled_dot_product_attention, math path (not in 1.13).
    f16/bf16: computed in f32, rounded once (as torch 2.x's CPU kernels)."""
    if not q.dtype.is_floating_point:
        raise RuntimeError("attention needs floating inputs")
    if q.dtype in HALF_TYPES:
        up = [t.float() if t is not None and t.dtype in HALF_TYPES else t for t in (q, k, v, mask)]
        return sdpa(*up, causal=causal, scale=scale).to(q.dtype)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, -float("inf"))
    if mask is not None:
        s = s.masked_fill(~mask, -float("inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


for dt in FLOATS + ["i32"]:
    with fresh(dt):
        q, k, v = rand(dt, [2, 3, 4, 8]), rand(dt, [2, 3, 6, 8]), rand(dt, [2, 3, 6, 5])
        add("sdpa", [q, k, v], {"causal": False, "scale": None}, sdpa, tol=[1e-4, 1e-5])
        add("sdpa", [q, k, v], {"causal": True, "scale": None}, lambda q, k, v: sdpa(q, k, v, causal=True),
            tol=[1e-4, 1e-5])
        add("sdpa", [q, k, v], {"causal": False, "scale": 0.3}, lambda q, k, v: sdpa(q, k, v, scale=0.3),
            tol=[1e-4, 1e-5])
        if dt in FLOATS:
            bool_mask = torch.rand(4, 6) < 0.7
            bool_mask[:, 0] = True  # no fully masked row (NaN is tested by hand)
            add("sdpa", [q, k, v, bool_mask], {"causal": False, "scale": None},
                lambda q, k, v, m: sdpa(q, k, v, m), tol=[1e-4, 1e-5])
            add("sdpa", [q, k, v, rand(dt, [3, 1, 6])], {"causal": False, "scale": None},
                lambda q, k, v, m: sdpa(q, k, v, m), tol=[1e-4, 1e-5])
add("sdpa", [rand("f32", [2, 4, 8]), rand("f32", [2, 6, 8]), rand("f32", [2, 6, 5]), torch.rand(5, 6) < 0.5],
    {"causal": False, "scale": None}, lambda q, k, v, m: sdpa(q, k, v, m))
add("sdpa", [rand("f32", [2, 4, 8]), rand("f32", [2, 6, 7]), rand("f32", [2, 6, 5])],
    {"causal": False, "scale": None}, sdpa)

for dt in ALL:
    with fresh(dt):
        x = rand(dt, [3, 4], "exp" if dt in INTS else "any")
        for axis in (0, -1):
            add("cumsum", [x], {"axis": axis, "dtype": None}, lambda x, a=axis: torch.cumsum(x, a))
            add("cumprod", [x], {"axis": axis, "dtype": None}, lambda x, a=axis: torch.cumprod(x, a))
        for to in ("f64", "i32", "i64", "bool"):
            add("cumsum", [x], {"axis": 1, "dtype": to}, lambda x, to=to: torch.cumsum(x, 1, dtype=DT[to]))
        add("cumsum", [rand(dt, [])], {"axis": 0, "dtype": None}, lambda x: torch.cumsum(x, 0))
add("cumsum", [rand("f32", [3])], {"axis": 1, "dtype": None}, lambda x: torch.cumsum(x, 1))
add("cumprod", [torch.tensor([200, 3, 5], dtype=torch.uint8)], {"axis": 0, "dtype": "u8"},
    lambda x: torch.cumprod(x, 0, dtype=torch.uint8))
# i8/i16 scans are i64 in PyTorch (no wrap) unless a dtype is asked for;
# f16/bf16 scans accumulate in f32 (300 ones reach 300 in bf16).
for dt in ("i8", "i16"):
    add("cumsum", [torch.tensor([100, 100, 100, -128], dtype=DT[dt])], {"axis": 0, "dtype": None},
        lambda x: torch.cumsum(x, 0))
    add("cumsum", [torch.tensor([100, 100, 100, -128], dtype=DT[dt])], {"axis": 0, "dtype": dt},
        lambda x, dt=dt: torch.cumsum(x, 0, dtype=DT[dt]))
    add("cumprod", [torch.tensor([100, 3, 5, -2], dtype=DT[dt])], {"axis": 0, "dtype": None},
        lambda x: torch.cumprod(x, 0))
for dt in HALVES:
    add("cumsum", [torch.ones(2, 300, dtype=DT[dt])], {"axis": 1, "dtype": None}, lambda x: torch.cumsum(x, 1))
    add("cumsum", [torch.tensor([60000.0, 60000.0, -60000.0, 1.0, float("nan")]).to(DT[dt])],
        {"axis": 0, "dtype": None}, lambda x: torch.cumsum(x, 0))
    add("cumsum", [torch.tensor([1.5, 2.25, 3.0]).to(DT[dt])], {"axis": 0, "dtype": "f32"},
        lambda x: torch.cumsum(x, 0, dtype=torch.float32))


def distinct(dt, shape):
    """Values without ties (topk's order among ties is unspecified)."""
    n = math.prod(shape)
    x = torch.randperm(n).reshape(shape)
    if DT[dt].is_floating_point:
        return (x.to(torch.float64) / 4 - 3).to(DT[dt])
    return x.to(DT[dt])


for dt in ALL:
    with fresh(dt):
        x = rand(dt, [3, 5])
        for axis in (0, 1):
            for desc in (False, True):
                for part in ("values", "indices"):
                    add("sort", [x], {"axis": axis, "descending": desc, "part": part},
                        lambda x, a=axis, d=desc, p=part: getattr(torch.sort(x, dim=a, descending=d, stable=True), p))
                add("argsort", [x], {"axis": axis, "descending": desc},
                    lambda x, a=axis, d=desc: torch.sort(x, dim=a, descending=d, stable=True).indices)
        y = distinct(dt, [3, 6]) if dt != "bool" else x
        for k, axis, largest in ((2, 1, True), (3, 1, False), (1, 0, True), (0, 1, True), (7, 1, True), (3, 0, False)):
            for part in ("values", "indices"):
                add("topk", [y], {"k": k, "axis": axis, "largest": largest, "part": part},
                    lambda y, k=k, a=axis, l=largest, p=part: getattr(torch.topk(y, k, dim=a, largest=l), p))
for k in (0, 1, 2):  # a 0-d input: k = 0 still gives its one element, as PyTorch
    for part in ("values", "indices"):
        add("topk", [rand("f32", [])], {"k": k, "axis": 0, "largest": True, "part": part},
            lambda y, k=k, p=part: getattr(torch.topk(y, k), p))
nan_row = torch.tensor([1.0, float("nan"), 3.0, -1.0, float("inf"), -float("inf")])
for desc in (False, True):
    add("sort", [nan_row], {"axis": 0, "descending": desc, "part": "indices"},
        lambda x, d=desc: torch.sort(x, descending=d, stable=True).indices)
for largest in (False, True):
    add("topk", [nan_row], {"k": 3, "axis": 0, "largest": largest, "part": "indices"},
        lambda x, l=largest: torch.topk(x, 3, largest=l).indices)
for dt in HALVES:
    for desc in (False, True):
        add("sort", [nan_row.to(DT[dt])], {"axis": 0, "descending": desc, "part": "indices"},
            lambda x, d=desc: torch.sort(x, descending=d, stable=True).indices)
    add("topk", [nan_row.to(DT[dt])], {"k": 3, "axis": 0, "largest": True, "part": "indices"},
        lambda x: torch.topk(x, 3).indices)

for dt in ALL:
    with fresh(dt):
        x = rand(dt, [3, 4])
        perm = torch.stack([torch.randperm(3)[:2] for _ in range(4)], 1)  # distinct rows per column
        add("scatter", [x, perm, rand(dt, [2, 4])], {"axis": 0}, lambda x, i, s: torch.scatter(x, 0, i, s))
        perm1 = torch.stack([torch.randperm(4)[:3] for _ in range(2)], 0)
        add("scatter", [x, perm1, rand(dt, [2, 3])], {"axis": 1}, lambda x, i, s: torch.scatter(x, 1, i, s))
        for reduce in ("sum", "prod", "amax", "amin"):  # mean: not supported (README)
            idx = torch.randint(0, 3, (4, 4))
            add("scatter_reduce", [x, idx, rand(dt, [4, 4])], {"axis": 0, "reduce": reduce},
                lambda x, i, s, r=reduce: torch.scatter_reduce(x, 0, i, s, r))
add("scatter", [rand("f32", [3]), torch.tensor([3]), rand("f32", [1])], {"axis": 0},
    lambda x, i, s: torch.scatter(x, 0, i, s))
add("scatter", [rand("f32", [3]), torch.tensor([1]), rand("f64", [1])], {"axis": 0},
    lambda x, i, s: torch.scatter(x, 0, i, s))
add("scatter_reduce", [torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([0, 2, 2]),
                       torch.tensor([float("nan"), 5.0, 1.0])], {"axis": 0, "reduce": "amax"},
    lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amax"))

for n in (-1, 5):
    add("one_hot", [torch.tensor([[0, 3], [2, 1]])], {"num_classes": n}, lambda x, n=n: F.one_hot(x, n))
add("one_hot", [torch.tensor([4])], {"num_classes": 3}, lambda x: F.one_hot(x, 3))
add("one_hot", [torch.tensor([-1, 1])], {"num_classes": 3}, lambda x: F.one_hot(x, 3))
for dt in FLOATS:
    with fresh(dt):
        add("embedding", [torch.tensor([[0, 2], [1, 1]]), rand(dt, [3, 4])], {"padding_idx": 1},
            lambda i, w: F.embedding(i, w, padding_idx=1))
add("embedding", [torch.tensor([3]), rand("f32", [3, 4])], {"padding_idx": None}, lambda i, w: F.embedding(i, w))

# --- the new dtypes: casts, promotion, wrapping -------------------------------------
# Casts between every pair of the ten dtypes, on values at the edges. To
# f16/bf16: round to nearest even, overflow to inf, NaN stays NaN, subnormals
# kept; from f64 and the integers through f32 first, as c10::Half and
# c10::BFloat16 do (f64 1 + 2^-11 + 2^-40 becomes f16 1.0, not 1 + 2^-10;
# i64 2^31 + 2^23 + 1 becomes bf16 2^31). Floats to integers truncate toward
# zero, then wrap to the target's width (300.0 -> i8 44, 40000.0 -> i16
# -25536, -129.0 -> i8 127); integers to integers wrap. Not drawn: NaN, inf
# and values beyond the i32 range (the i64 range for i64) to an integer
# dtype, and negative floats to u8: undefined in C++, PyTorch gives what x86
# gives there (the "integer indefinite" 0x80...0).
NAN, INF = float("nan"), float("inf")
FLOAT_EDGES = [NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 127.9, -128.9, 255.5, 300.0, -129.0, 32767.5, -32768.9,
               40000.0, -40000.0, 65504.0, 65519.0, 65520.0, 70000.0, -70000.0, 2147483520.0, -2147483648.0,
               1e-8, 2.0**-25, 3e-8, 5.96e-8, 6e-8, 1e-5, 6.1e-5,
               1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-30,
               3.3895313892515355e38, 3.4e38, -3.4e38, 1e39, 1e-40, 1e-45, 9.2e18]
INT_EDGES = [0, 1, -1, 127, 128, -128, -129, 200, 255, 256, 300, 32767, 32768, -32768, -32769, 40000, 65504, 65519,
             65520, 65535, 65536, 16777217, 2**30 + 2**22 + 1, 2**31 - 1, -(2**31), 2**31 + 2**23 + 1, 2**53 + 1,
             2**62 + 1, 2**63 - 1, -(2**63)]
RANGE = {"i8": (-(2**7), 2**7), "i16": (-(2**15), 2**15), "i32": (-(2**31), 2**31), "i64": (-(2**63), 2**63),
         "u8": (0, 256), "bool": (0, 2)}


def castable(v, db):
    """A float value whose cast to integer dtype db PyTorch defines alike on every machine."""
    if db in FLOATS or db == "bool":
        return True
    if math.isnan(v) or math.isinf(v) or (db == "u8" and v <= -1):
        return False
    lo, hi = RANGE["i64" if db == "i64" else "i32"]
    return lo <= math.trunc(v) < hi


with fresh():
    for da in ALL:
        if da in FLOATS:
            src = torch.tensor(FLOAT_EDGES, dtype=torch.float64).to(DT[da])
        else:
            lo, hi = RANGE[da]
            src = torch.tensor([v for v in INT_EDGES if lo <= v < hi], dtype=torch.int64).to(DT[da])
        for db in ALL:
            x = src
            if da in FLOATS:
                x = src[[i for i, v in enumerate(src.tolist()) if castable(v, db)]]
            add("cast", [x], {"dtype": db}, lambda x, db=db: x.to(DT[db]))

def exact(vals, dt):
    """A tensor of dtype dt holding `vals` (floats rounded once from f64, integers wrapped from i64)."""
    return torch.tensor(vals, dtype=torch.float64 if DT[dt].is_floating_point else torch.int64).to(DT[dt])


# Promotion, tensor with tensor: f16 + bf16 -> f32, i8 + u8 -> i16, u8 + i16
# -> i16, bool + i8 -> i8, f16 + i64 -> f16 (70000 is inf there), and a 0-d
# operand of the same category is converted to the dimensioned one's dtype
# before the op (f16 1000 == 0-d f32 1000.2 is true).
PAIRS = [("f16", "bf16", [1000.0, 0.1, -2.5], [0.3, 3.0, 65504.0]),
         ("bf16", "f16", [256.0, 1.0, 3e38], [1.0, 1e-3, 2.0]),
         ("f16", "f32", [1000.0, 0.1, 65504.0], [0.4, 1e-8, 65504.0]),
         ("bf16", "f64", [256.0, 0.1, 3e38], [1.0, 0.1, 3e38]),
         ("f16", "i64", [1.5, -2.0, 1000.0], [70000, 3, -1]), ("bf16", "u8", [1.5, 256.0, -2.0], [255, 1, 7]),
         ("f16", "bool", [1.5, -0.0, 2.0], [1, 0, 1]), ("i8", "u8", [-100, 127, 5], [200, 255, 3]),
         ("u8", "i8", [200, 255, 0], [-100, 1, -128]), ("i8", "i16", [-128, 127, 5], [30000, -32768, 3]),
         ("u8", "i16", [255, 0, 200], [32767, -1, 3]), ("i16", "i32", [32767, -32768, 5], [1, -1, 70000]),
         ("bool", "i8", [1, 0, 1], [127, -128, 3]), ("i8", "f16", [100, -128, 7], [0.5, 655.0, 2.0]),
         ("i16", "bf16", [32767, 300, -5], [1.0, 0.5, 2.0]), ("i8", "i64", [127, -128, 7], [1, -1, 2**40])]
with fresh():
    for da, db, va, vb in PAIRS:
        a, b = exact(va, da), exact(vb, db)
        for name in ("add", "sub", "mul", "div", "eq", "lt", "maximum", "bitwise_or"):
            if name == "sub" and "bool" in (da, db):
                continue
            add("binary", [a, b], {"kind": name}, BINARY[name])
            add("binary", [a, b[0].clone()], {"kind": name}, BINARY[name])
            add("binary", [a[0].clone(), b], {"kind": name}, BINARY[name])
    for da, va, db, vb in (("f16", [1000.0, 1.0], "f32", 1000.2), ("f16", [1000.0, 1.0], "f32", 0.4),
                           ("bf16", [256.0, 1.0], "f64", 1.0), ("f16", [1.0, 2.0], "f64", 1e5),
                           ("i8", [100, -1], "i64", 300), ("u8", [100, 1], "i8", -1), ("i8", [100, 1], "u8", 200),
                           ("i16", [1, 2], "i64", 70000)):
        a, b = exact(va, da), exact(vb, db)
        for name in ("add", "mul", "eq", "lt"):
            add("binary", [a, b], {"kind": name}, BINARY[name])

# Promotion, tensor with a Python scalar: f16 * 2.5 stays f16 (65504 * 2.5 is
# inf), i8 + 3 stays i8 (and wraps), i8 * 2.5 -> f32, bool + 3 -> i64, bool *
# 2.5 -> f32. PyTorch converts the scalar to the result dtype first: f16 1000
# * 1.0004 is 1000, f16 1000 == 1000.2 is true, i8 50 < 300 is false (300 is
# 44 in i8).
SCALAR_CASES = [("f16", [1.0, 65504.0, 0.1, -3.0], [("float", 2.5), ("float", 1.0004), ("float", 1000.2),
                                                  ("float", 1e5), ("int", 3), ("int", 70000), ("bool", True)]),
                ("bf16", [256.0, 1.0, 0.1, 3e38], [("float", 2.5), ("float", 1.003), ("float", 1e39),
                                                  ("int", 1), ("int", 257), ("bool", True)]),
                ("i8", [1, 100, 127, -128], [("int", 3), ("int", 300), ("int", -129), ("float", 2.5), ("bool", True)]),
                ("i16", [1, 30000, 32767, -32768], [("int", 3), ("int", 10000), ("int", 70000), ("float", 0.5)]),
                ("u8", [1, 200, 255, 0], [("int", 100), ("int", -1), ("float", 2.5)]),
                ("bool", [1, 0, 1, 0], [("int", 3), ("float", 2.5), ("bool", True)])]
with fresh():
    for dt, vals, scalars in SCALAR_CASES:
        x = exact(vals, dt)
        x1000 = exact([1000.0, 1.0, 1000.5, 2.0], dt) if dt == "f16" else x
        for kind, s in scalars:
            for name in ("add", "sub", "mul", "div", "eq", "lt"):
                if name == "sub" and (dt == "bool" or kind == "bool"):
                    continue
                xin = x1000 if kind == "float" and s in (1.0004, 1000.2) else x
                add("scalar", [xin], {"kind": name, "value": s, "scalar": kind, "first": False},
                    lambda x, s=s, fn=BINARY[name]: fn(x, s))
            for name in ("sub", "div", "lt"):
                if name == "sub" and (dt == "bool" or kind == "bool"):
                    continue
                add("scalar", [x], {"kind": name, "value": s, "scalar": kind, "first": True},
                    lambda x, s=s, fn=BINARY[name]: fn(torch.tensor(s), x))

# Integer arithmetic wraps in i8/i16 (PyTorch does not saturate).
for dt, a, b in (("i8", [100, -100, 127, -128, 16, 3], [100, -100, 1, -1, 16, -128]),
                 ("i16", [30000, -30000, 32767, -32768, 256, 7], [30000, -30000, 1, -1, 256, -32768])):
    x, y = torch.tensor(a, dtype=DT[dt]), torch.tensor(b, dtype=DT[dt])
    for name in ("add", "sub", "mul", "maximum", "bitwise_xor", "lt"):
        add("binary", [x, y], {"kind": name}, BINARY[name])

# Linear interpolation over several channels (PyTorch's channels-first
# kernel), f32 bit for bit: sizes and scale factors, up and down, both
# align_corners. Last, with draws of their own, so the cases above stay.
with fresh():
    for shape, kw in (([2, 3, 4, 5], {"size": [7, 3]}), ([1, 4, 6, 5], {"scale_factor": [1.7, 0.6]}),
                      ([1, 2, 3, 4, 2], {"scale_factor": [1.5]}), ([2, 2, 5, 3, 4], {"size": [2, 7, 9]}),
                      ([1, 3, 9], {"scale_factor": [2.5]})):
        mode = ("linear", "bilinear", "trilinear")[len(shape) - 3]
        for corners in (None, True, False):
            args = {"mode": mode, "align_corners": corners, "size": kw.get("size", []),
                    "scale_factor": kw.get("scale_factor", [])}
            size, scale = kw.get("size"), kw.get("scale_factor")
            add("interpolate", [rand("f32", shape)], args,
                lambda x, size=size, scale=scale, mode=mode, corners=corners: F.interpolate(
                    x, size=None if size is None else (size if len(size) > 1 else size[0]),
                    scale_factor=None if scale is None else (tuple(scale) if len(scale) > 1 else scale[0]),
                    mode=mode, align_corners=corners), exact=True)

# Scale factors whose output extent equals the input's or twice it: PyTorch
# 1.13 copies such an axis in the linear modes but samples it through
# 1 / factor in nearest (5 x 1.1 -> 5: 0, 0, 1, 2, 3).
with fresh():
    for shape, scale in (([1, 2, 5], [1.1]), ([1, 2, 3], [2.0000001]), ([1, 2, 5, 7], [1.1, 1.5]),
                         ([2, 3, 4, 6], [2.0000001, 1.1]), ([1, 2, 4, 3, 5], [1.1, 2.0000001, 1.6])):
        linear = ("linear", "bilinear", "trilinear")[len(shape) - 3]
        for mode, corners, dt in ((linear, None, "f32"), (linear, True, "f32"), (linear, None, "f64"),
                                  ("nearest", None, "f32"), ("nearest", None, "u8"), ("nearest-exact", None, "f32")):
            args = {"mode": mode, "align_corners": corners, "size": [], "scale_factor": scale}
            add("interpolate", [rand(dt, shape)], args,
                lambda x, scale=scale, mode=mode, corners=corners: F.interpolate(
                    x, scale_factor=tuple(scale) if len(scale) > 1 else scale[0], mode=mode, align_corners=corners),
                exact=dt == "f32", tol=[1e-12, 1e-12] if dt == "f64" else None)

# addmm: half types round once (PyTorch's GEMM with beta); integers truncate
# a float beta or alpha and keep their dtype.
for dt in FLOATS + INTS:
    for beta, alpha in ((1, 1), (0.5, 2.7), (-1.5, 1), (0, 3)):
        with fresh():
            kinds = {"beta": beta, "beta_kind": "int" if isinstance(beta, int) else "float", "alpha": alpha,
                     "alpha_kind": "int" if isinstance(alpha, int) else "float"}
            add("addmm", [rand(dt, [3, 4]), rand(dt, [3, 5]), rand(dt, [5, 4])], kinds,
                lambda x, a, b, beta=beta, alpha=alpha: torch.addmm(x, a, b, beta=beta, alpha=alpha),
                tol=[1e-5, 1e-5])
            add("addmm", [rand(dt, [4]), rand(dt, [2, 3]), rand(dt, [3, 4])], kinds,
                lambda x, a, b, beta=beta, alpha=alpha: torch.addmm(x, a, b, beta=beta, alpha=alpha),
                tol=[1e-5, 1e-5])

# arange into integer dtypes truncates start and step first (the count from
# the truncated bounds for i64 only); bounds against the step's sign and a
# step truncating to 0 are refused.
for start, end, step in ((-3, 3, 1.5), (0, 10, 2.5), (-2.5, 3, 1), (0.5, 3, 1), (-3, 3, 0.5), (5, 0, 1),
                         (0, 5, -1), (7, -4.5, -2.5)):
    for dt in ("i64", "i32", "i8", "u8", "f32"):
        add("arange", [], {"start": start, "end": end, "step": step, "dtype": dt},
            lambda start=start, end=end, step=step, dt=dt: torch.arange(start, end, step, dtype=DT[dt]))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pytorch_cases.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
errors = sum(1 for c in cases if "error" in c)
emulated = Counter(c["op"] + (" " + c["args"]["kind"] if "kind" in c["args"] else "")
                   for c in cases if c.get("emulated"))
new_dtype = sum(1 for c in cases if any(t["dtype"] in NEW for t in c["inputs"] + ([c["out"]] if "out" in c else []))
                or c["args"].get("dtype") in NEW)
n_emulated, n_imprecise = sum(emulated.values()), sum(imprecise.values())
print(f"wrote {len(cases)} cases ({errors} expect an error, {new_dtype} with f16/bf16/i8/i16, {n_emulated} emulated: "
      f"{n_emulated - n_imprecise} PyTorch has no kernel for, {n_imprecise} where its f16/bf16 kernel rounds along "
      f"the way) to {os.path.normpath(out)}, {os.path.getsize(out)} bytes", file=sys.stderr)
if "-v" in sys.argv:
    print("emulated:", dict(sorted(emulated.items())), file=sys.stderr)
    print("of those, PyTorch's own kernel too far from f32 + one rounding:", dict(sorted(imprecise.items())),
          file=sys.stderr)
    print("native f16/bf16 results outside the tolerance of f32 + one rounding (elementwise ones kept):",
          dict(sorted(deviations.items())), file=sys.stderr)
