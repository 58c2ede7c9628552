#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch 1.13 eager on a model of tests/onnx/models/pytorch (same seeded
weights as export_models.py): latency per forward call, per input shape.

    /usr/bin/python3 bench/onnx/torch_bench.py mlp|transformer_encoder|resnet18 ITERS THREADS SHAPE...   (SHAPE: 1x64)
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "onnx", "pytorch"))
from export_models import Encoder, Mlp, ResNetMini  # noqa: E402


def resnet18():
    """ResNet-18's layers and widths (export_models.ResNetMini at full width),
    seeded as bench/onnx/run exports it."""
    torch.manual_seed(7)
    return ResNetMini(widths=(64, 128, 256, 512), classes=1000)


def main():
    name, iters, threads, shapes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    torch.set_num_threads(threads)
    torch.manual_seed(0 if name == "mlp" else 1)  # the seeds export_models.py uses
    model = (Mlp() if name == "mlp" else resnet18() if name == "resnet18" else Encoder()).eval()
    with torch.no_grad():
        for spec in shapes:
            dims = [int(d) for d in spec.split("x")]
            b = dims[0]
            n = 1
            for d in dims:
                n *= d
            x = torch.sin(torch.arange(n, dtype=torch.float32)).reshape(*dims)
            # warm-up: 50 calls and at least a second, as onnx_bench does
            warm_until = time.perf_counter() + 1.0
            i = 0
            while i < 50 or time.perf_counter() < warm_until:
                model(x).numpy()
                i += 1
            lat = []
            t0 = time.perf_counter()
            for _ in range(iters):
                s = time.perf_counter()
                model(x).numpy()
                lat.append((time.perf_counter() - s) * 1e6)
            total = time.perf_counter() - t0
            lat.sort()
            print(json.dumps({"runtime": "pytorch " + torch.__version__ + " eager", "shape": spec,
                              "median_us": lat[len(lat) // 2], "p99_us": lat[int(len(lat) * 0.99)],
                              "rows_per_s": b * iters / total}))


def small_encoder():
    """A 4-layer nn.TransformerEncoder of d_model 128 (4 heads, feed-forward
    512): its feed-forward products at sequence 16 are 2^20 multiply-adds,
    the size around which the runtime's thresholds sit (PERFORMANCE.md,
    session 28)."""
    torch.manual_seed(11)
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.0,
                                             batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=4)


if __name__ == "__main__":
    if sys.argv[1] == "export-small-encoder":  # export-small-encoder OUT.onnx
        torch.onnx.export(small_encoder().eval(), (torch.randn(1, 16, 128),), sys.argv[2], input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch", 1: "seq"}}, opset_version=14)
    elif sys.argv[1] == "export-resnet18":  # export-resnet18 OUT.onnx
        torch.onnx.export(resnet18().eval(), (torch.randn(1, 3, 224, 224),), sys.argv[2], input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=13)
    else:
        main()
