#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch 1.13 side of bench/modules/run: one workload per process.

    torch_module_bench.py <attention|sort|topk|cumsum> <reps> <threads>

Attention is PyTorch 1.13's equivalent of scaled_dot_product_attention
(which 1.13 lacks): softmax(q k^T / sqrt(d)) v. Prints one JSON line like
module_bench.
"""
import json
import math
import sys
import time

import torch


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def main():
    work, reps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    if work == "attention":
        q, k, v = (torch.rand(4, 8, 512, 64) * 2 - 1 for _ in range(3))
        run = lambda: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(64), -1) @ v
    elif work == "sort":
        x = torch.rand(1 << 20) * 2 - 1
        run = lambda: torch.sort(x).values
    elif work == "topk":
        x = torch.rand(1 << 20) * 2 - 1
        run = lambda: torch.topk(x, 100).values
    elif work == "cumsum":
        x = torch.rand(1 << 24) * 2 - 1
        run = lambda: torch.cumsum(x, 0)
    else:
        sys.exit("unknown workload " + work)
    base = status_kib("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = run()
        float(out.reshape(-1)[0])  # the result exists
        times.append((time.perf_counter() - t0) * 1e3)
        del out
    print(json.dumps({"impl": "pytorch", "work": work, "ms": times, "peak_extra_kib": status_kib("VmHWM:") - base}))


main()
