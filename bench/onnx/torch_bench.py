#!/usr/bin/env python3
"""PyTorch 1.13 eager on the MLP of tests/onnx/models/pytorch/mlp (same seeded
weights as export_models.py): latency per forward call, per batch size.

    /usr/bin/python3 bench/onnx/torch_bench.py ITERS THREADS BATCH...
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "onnx", "pytorch"))
from export_models import Mlp  # noqa: E402


def main():
    iters, threads, batches = int(sys.argv[1]), int(sys.argv[2]), [int(b) for b in sys.argv[3:]]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Mlp().eval()
    with torch.no_grad():
        for b in batches:
            x = torch.sin(torch.arange(b * 64, dtype=torch.float32)).reshape(b, 64)
            for _ in range(50):
                model(x).numpy()
            lat = []
            t0 = time.perf_counter()
            for _ in range(iters):
                s = time.perf_counter()
                model(x).numpy()
                lat.append((time.perf_counter() - s) * 1e6)
            total = time.perf_counter() - t0
            lat.sort()
            print(json.dumps({"runtime": "pytorch " + torch.__version__ + " eager", "batch": b,
                              "median_us": lat[len(lat) // 2], "p99_us": lat[int(len(lat) * 0.99)],
                              "rows_per_s": b * iters / total}))


if __name__ == "__main__":
    main()
