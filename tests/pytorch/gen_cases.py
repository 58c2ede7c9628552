#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Generates PyTorch reference cases for every Switchyard op.

Run from the repository root with the Python that has torch 1.13:

    /usr/bin/python3 tests/pytorch/gen_cases.py

It writes tests/data/pytorch_cases.json: a list of cases, each with the op
(named as in tests/ops/pytorch_test.cpp), its inputs, arguments and either
PyTorch's output or "error" when PyTorch rejects the call. The C++ test
replays every case on every device; it needs no Python. Inputs come from a
fixed seed, so regenerating gives the same file for the same torch version.
Floats that JSON cannot hold are written as the strings "nan", "inf", "-inf".
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(20261202)
torch.set_num_threads(1)

DT = {
    "f32": torch.float32,
    "f64": torch.float64,
    "i32": torch.int32,
    "i64": torch.int64,
    "u8": torch.uint8,
    "bool": torch.bool,
}
NAME = {v: k for k, v in DT.items()}
ALL = list(DT)
FLOATS = ["f32", "f64"]
INTS = ["i32", "i64", "u8"]

cases = []
notes = []


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


def rand(dtype, shape, kind="any"):
    """Small random inputs: 2-decimal floats, small integers."""
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


def add(op, inputs, args, fn, tol=None):
    case = {"op": op, "inputs": [tensor_json(x) for x in inputs], "args": args}
    try:
        out = fn(*inputs)
        case["out"] = tensor_json(out)
    except (RuntimeError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
        case["error"] = str(e).split("\n")[0][:120]
    if tol is not None:
        case["tol"] = tol
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
        x = rand(dt, [2, 3], "pos" if name in ("log", "sqrt", "rsqrt") and dt not in FLOATS else "any")
        # PyTorch computes int -> float unary ops in the default float type;
        # gelu and silu have no integer or bool kernels and raise (issue 15,
        # item 12: we follow PyTorch there now).
        add("unary", [x], {"kind": name}, fn)
    add("unary", [SPECIAL.clone()], {"kind": name}, fn)
for name, fn in KEEP_UNARY.items():
    for dt in ALL:
        if name == "abs" and dt == "bool":
            continue  # deliberate difference: we allow abs of bool (the identity), PyTorch does not
        add("unary", [rand(dt, [2, 3])], {"kind": name}, fn)
    add("unary", [SPECIAL.clone()], {"kind": name}, fn)
add("unary", [torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 3.5])], {"kind": "round"}, torch.round)
for dt in ["f32", "f64", "i32", "i64"]:
    add("clamp", [rand(dt, [2, 4])], {"lo": -1, "hi": 2}, lambda x: torch.clamp(x, -1, 2))
    add("clamp", [rand(dt, [5])], {"lo": None, "hi": 0}, lambda x: torch.clamp(x, max=0))
    add("clamp", [rand(dt, [5])], {"lo": 1, "hi": None}, lambda x: torch.clamp(x, min=1))
add("clamp", [rand("u8", [6])], {"lo": 2, "hi": 7}, lambda x: torch.clamp(x, 2, 7))
add("clamp", [SPECIAL.clone()], {"lo": -1, "hi": 1}, lambda x: torch.clamp(x, -1, 1))
# Inverted bounds (low > high): every element becomes high; no bound at all raises.
for dt in ["f32", "f64", "i32", "i64", "u8"]:
    lo, hi = (7, 2) if dt == "u8" else (2, -1)
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
}


def rhs_kind(name):
    return {"pow": "exp", "remainder": "nonzero"}.get(name, "any")


for name, fn in BINARY.items():
    for dt in ALL:
        a = rand(dt, [2, 3])
        if name == "pow" and dt in INTS:
            a = rand(dt, [2, 3]).clamp(-3, 3)
        add("binary", [a, rand(dt, [3], rhs_kind(name))], {"kind": name}, fn)
    # Broadcasting [2,1,3] x [4,1] with size-1 and 0-d operands.
    add("binary", [rand("f32", [2, 1, 3]), rand("f32", [4, 1], rhs_kind(name))], {"kind": name}, fn)
    add("binary", [rand("f64", []), rand("f64", [2, 2], rhs_kind(name))], {"kind": name}, fn)
    add("binary", [rand("f32", [0, 3]), rand("f32", [1, 3], rhs_kind(name))], {"kind": name}, fn)
    if name in ("add", "mul", "div", "maximum", "minimum", "pow", "atan2", "eq", "lt", "remainder", "sub"):
        add("binary", [SPECIAL.clone(), SPECIAL.flip(0).clone()], {"kind": name}, fn)

# Mixed dtypes: promotion across every pair for a few kinds.
for name in ("add", "mul", "div", "maximum", "lt", "bitwise_or"):
    for da in ALL:
        for db in ALL:
            if da != db:
                add("binary", [rand(da, [3]), rand(db, [3], rhs_kind(name))], {"kind": name}, BINARY[name])
# 0-d operands (issue 15, item 1): a dimensioned tensor's dtype wins over a
# 0-d tensor's of the same category (torch.result_type).
for name in ("add", "sub", "mul", "div", "maximum", "le", "eq", "lt", "bitwise_or", "remainder", "logical_xor"):
    for da in ALL:
        for db in ALL:
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

# --- scalar ------------------------------------------------------------------
SCALARS = [("int", 2), ("int", -3), ("float", 0.5), ("float", -1.25), ("bool", True)]
for name in ("add", "sub", "mul", "div", "pow", "remainder", "maximum", "lt", "eq", "ge",
             "logical_and", "bitwise_xor", "atan2"):
    fn = BINARY[name]
    for dt in ALL:
        for kind, s in SCALARS:
            if name in ("bitwise_xor",) and kind == "float":
                continue
            if name == "pow" and kind == "int" and s < 0:
                continue
            x = rand(dt, [2, 2], "pos" if name in ("pow",) else "nonzero")
            wrapped = torch.tensor(s)
            add("scalar", [x], {"kind": name, "value": s, "scalar": kind, "first": False},
                lambda x, w=wrapped, fn=fn: fn(x, w))
            if name in ("sub", "div", "pow", "remainder", "lt"):
                add("scalar", [x], {"kind": name, "value": s, "scalar": kind, "first": True},
                    lambda x, w=wrapped, fn=fn: fn(w, x))
add("scalar", [torch.tensor([1, 2], dtype=torch.int32)], {"kind": "remainder", "value": 0, "scalar": "int", "first": False},
    lambda x: torch.remainder(x, torch.tensor(0)))
# Large integer scalars (issue 15, item 10): exact beyond 2^53, wrapping in
# narrower integer dtypes, rounded once for floats.
BIG = [2**62 + 1, -(2**62) - 3, 2**53 + 1, 2**63 - 1, -(2**63), 2**40 + 7, 300, -1]
for name in ("add", "sub", "mul", "eq", "lt", "ge", "bitwise_xor", "maximum"):
    for dt in ALL:
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
        for axes, keep in (([], False), ([1], False), ([0, 2], True), ([-1], True)):
            x = rand(dt, [2, 3, 4])
            add("reduce", [x], {"kind": name, "axes": axes, "keepdim": keep, "correction": 1},
                lambda x, fn=fn, axes=axes, keep=keep: fn(x, axes, keep))
    add("reduce", [torch.tensor([[1.0, float("nan"), 3.0], [-float("inf"), 0.0, float("inf")]])],
        {"kind": name, "axes": [1], "keepdim": False, "correction": 1}, lambda x, fn=fn: fn(x, [1], False))
    add("reduce", [torch.zeros(0, 3)], {"kind": name, "axes": [1], "keepdim": False, "correction": 1},
        lambda x, fn=fn: fn(x, [1], False))
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
for log in (False, True):
    fn = torch.log_softmax if log else torch.softmax
    op = "log_softmax" if log else "softmax"
    for dt in FLOATS:
        add(op, [rand(dt, [3, 4])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
        add(op, [rand(dt, [3, 4])], {"axis": 0}, lambda x, fn=fn: fn(x, 0))
        add(op, [rand(dt, [2, 3, 2])], {"axis": -2}, lambda x, fn=fn: fn(x, -2))
    add(op, [torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -999.0, -1e4]])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
    add(op, [torch.tensor([[-float("inf"), 0.0, 1.0], [-float("inf"), -float("inf"), -float("inf")]])], {"axis": 1},
        lambda x, fn=fn: fn(x, 1))
    add(op, [torch.tensor([[float("nan"), 0.0], [float("inf"), 1.0]])], {"axis": 1}, lambda x, fn=fn: fn(x, 1))
    add(op, [torch.zeros(2, 0)], {"axis": 1}, lambda x, fn=fn: fn(x, 1))

# --- matmul and linear ----------------------------------------------------------
for dt in ["f32", "f64", "i32", "i64"]:
    for sa, sb in (([2, 3], [3, 4]), ([3], [3, 2]), ([2, 3], [3]), ([4], [4]), ([2, 1, 2, 3], [4, 3, 2]),
                   ([5, 2, 3], [3, 1]), ([3], [2, 3, 2]), ([2, 0], [0, 3])):
        add("matmul", [rand(dt, sa), rand(dt, sb)], {}, torch.matmul, tol=[1e-5, 1e-5])
add("matmul", [rand("u8", [2, 3]), rand("u8", [3, 2])], {}, torch.matmul)
add("matmul", [rand("f32", [2, 3]), rand("f64", [3, 2])], {}, torch.matmul)
for dt in FLOATS:
    add("linear", [rand(dt, [4, 3]), rand(dt, [5, 3]), rand(dt, [5])], {}, F.linear, tol=[1e-5, 1e-5])
    add("linear", [rand(dt, [2, 4, 3]), rand(dt, [2, 3])], {}, F.linear, tol=[1e-5, 1e-5])
    add("linear", [rand(dt, [3]), rand(dt, [2, 3]), rand(dt, [2])], {}, F.linear, tol=[1e-5, 1e-5])

# --- casts ------------------------------------------------------------------------
for da in ALL:
    for db in ALL:
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

# --- creation -----------------------------------------------------------------------
for dt in ALL:
    add("full", [], {"shape": [2, 3], "value": 1 if dt == "bool" else 3, "dtype": dt},
        lambda dt=dt: torch.full((2, 3), True if dt == "bool" else 3, dtype=DT[dt]))
    add("eye", [], {"n": 3, "m": 2, "dtype": dt}, lambda dt=dt: torch.eye(3, 2, dtype=DT[dt]))
for dt in ["f32", "f64", "i32", "i64"]:
    add("arange", [], {"start": 1, "end": 11, "step": 3, "dtype": dt}, lambda dt=dt: torch.arange(1, 11, 3, dtype=DT[dt]))
add("arange", [], {"start": 0, "end": 1, "step": 0.125, "dtype": "f32"}, lambda: torch.arange(0, 1, 0.125))
add("arange", [], {"start": 5, "end": -3, "step": -2, "dtype": "i64"}, lambda: torch.arange(5, -3, -2))

# --- normalisation, attention, scans, sort/topk, scatter (issue 18, part B) ----
def opt(t):
    return None if t is None else t


for dt in ALL:  # PyTorch refuses the integer and bool ones; so do we
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
    """torch 2.x's F.rms_norm (not in 1.13): x * rsqrt(mean(x^2) + eps) * w."""
    if not x.dtype.is_floating_point:
        raise RuntimeError("rms_norm needs a floating input")
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    dims = tuple(range(-len(shape), 0))
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * w if w is not None else y


for dt in ALL:
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
    """torch 2.x's scaled_dot_product_attention, math path (not in 1.13)."""
    if not q.dtype.is_floating_point:
        raise RuntimeError("attention needs floating inputs")
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, -float("inf"))
    if mask is not None:
        s = s.masked_fill(~mask, -float("inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


for dt in FLOATS + ["i32"]:
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


def distinct(dt, shape):
    """Values without ties (topk's order among ties is unspecified)."""
    n = math.prod(shape)
    x = torch.randperm(n).reshape(shape)
    if DT[dt].is_floating_point:
        return (x.to(torch.float64) / 4 - 3).to(DT[dt])
    return x.to(DT[dt])


for dt in ALL:
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

for dt in ALL:
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
    add("embedding", [torch.tensor([[0, 2], [1, 1]]), rand(dt, [3, 4])], {"padding_idx": 1},
        lambda i, w: F.embedding(i, w, padding_idx=1))
add("embedding", [torch.tensor([3]), rand("f32", [3, 4])], {"padding_idx": None}, lambda i, w: F.embedding(i, w))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pytorch_cases.json")
with open(out, "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
errors = sum(1 for c in cases if "error" in c)
print(f"wrote {len(cases)} cases ({errors} expect an error) to {os.path.normpath(out)}, "
      f"{os.path.getsize(out)} bytes", file=sys.stderr)
