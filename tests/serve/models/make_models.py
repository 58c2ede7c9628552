# SPDX-License-Identifier: Apache-2.0
"""Writes the tiny ONNX models of tests/serve/onnx_batching_test.cpp into this folder.

    /usr/bin/python3 tests/serve/models/make_models.py   # needs the onnx package (1.12 or later)

Each model has a dynamic axis 0 on every input and output, so the server's
structural check would batch all of them; only some are batch-invariant:

  center.onnx     y = x - ReduceMean(x, axis 0)          rows see each other
  cumsum0.onnx    y = CumSum(x, axis 0)                  rows see each other
  gru_seqfirst    y = GRU(x)[:, 0], x [T, B, 2]          axis 0 is time, not the batch
  flat.onnx       y = Reshape(x [N, 3], [-1])            y has 3N entries
  halve.onnx      y = x[0::2]                            y has ceil(N / 2) rows
  pairs.onnx      y = Reshape(x [N, S], [-1, 2])         batch-invariant when S = 2 (as probed), not for S = 4
  gather_el.onnx  y = GatherElements(x [N, 5], i [N, 2], axis 1)   batch-invariant; i is the request's data
"""
import os

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, nodes, ins, outs, inits=()):
    graph = h.make_graph(nodes, name, ins, outs, initializer=list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)], producer_name="make_models.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    with open(os.path.join(HERE, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def ints(name, values):
    return nh.from_array(np.array(values, dtype=np.int64), name)


def main():
    f32 = lambda name, dims: h.make_tensor_value_info(name, TP.FLOAT, dims)
    x3 = f32("x", ("N", 3))
    save("center", [h.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[0], keepdims=1),
                    h.make_node("Sub", ["x", "m"], ["y"], name="sub")], [x3], [f32("y", ("N", 3))])
    save("cumsum0", [h.make_node("CumSum", ["x", "axis"], ["y"], name="cumsum")], [x3], [f32("y", ("N", 3))],
         [ints("axis", 0)])
    # ONNX GRU in its default layout: X [seq, batch, input], Y [seq, directions, batch, hidden]
    # (PyTorch's nn.GRU with batch_first=False exports this).
    rng = np.random.default_rng(7)
    hidden, width = 2, 2
    w = rng.uniform(-1, 1, (1, 3 * hidden, width)).astype(np.float32)
    r = rng.uniform(-1, 1, (1, 3 * hidden, hidden)).astype(np.float32)
    b = rng.uniform(-1, 1, (1, 6 * hidden)).astype(np.float32)
    save("gru_seqfirst", [h.make_node("GRU", ["x", "W", "R", "B"], ["Y"], name="gru", hidden_size=hidden),
                          h.make_node("Squeeze", ["Y", "one"], ["y"], name="squeeze")],
         [f32("x", ("T", "B", width))], [f32("y", ("T", "B", hidden))],
         [nh.from_array(w, "W"), nh.from_array(r, "R"), nh.from_array(b, "B"), ints("one", [1])])
    save("flat", [h.make_node("Reshape", ["x", "shape"], ["y"], name="flatten")], [x3], [f32("y", ("M",))],
         [ints("shape", [-1])])
    save("halve", [h.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"], name="every_other")],
         [x3], [f32("y", ("K", 3))],
         [ints("starts", [0]), ints("ends", [1 << 40]), ints("axes", [0]), ints("steps", [2])])
    save("pairs", [h.make_node("Reshape", ["x", "shape"], ["y"], name="pairs")], [f32("x", ("N", "S"))],
         [f32("y", ("M", 2))], [ints("shape", [-1, 2])])
    save("gather_el", [h.make_node("GatherElements", ["x", "i"], ["y"], name="pick", axis=1)],
         [f32("x", ("N", 5)), h.make_tensor_value_info("i", TP.INT64, ("N", 2))], [f32("y", ("N", 2))])


if __name__ == "__main__":
    main()
