# SPDX-License-Identifier: Apache-2.0
"""The workloads of bench/compare through PyTorch eager (CPU).

Run with /usr/bin/python3 (PyTorch 1.13). Prints JSON in the shape bench/compare
reads: {"benchmarks": [{"name", "real_time" (seconds per iteration), "per_iter", ...}]}.
Sizes mirror bench/common.hpp.
"""
import json
import os
import sys
import threading
import time

import torch

TINY_CHAIN_OPS = 100000
CLIENT_THREADS = 8
OPS_PER_CLIENT = 20000
LARGE = 1 << 24
ROUNDTRIPS = 10000  # per thread, as bench/compare runs bench/op_cost
CHURN = 1000000
CHURN_WARMUP = 100000


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def timed(fn, iters, warmup=1, reps=3):
    """Best of `reps` means over iters/reps runs each (best-of: the machine is shared)."""
    for _ in range(warmup):
        fn()
    per = max(1, iters // reps)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        best = min(best, (time.perf_counter() - t0) / per)
    return best


def main():
    # The Debian build defaults to one thread; use the machine's cores as the
    # C++ sides do.
    torch.set_num_threads(os.cpu_count() or 1)
    out = []
    only = sys.argv[1:]

    def want(name):
        return not only or any(name.startswith(o) for o in only)

    def add(name, seconds, per_iter, **extra):
        out.append(dict(name=name, real_time=seconds, per_iter=per_iter, **extra))

    y = torch.ones(4)

    def chain():
        x = torch.zeros(4)
        for _ in range(TINY_CHAIN_OPS):
            x = x + y
        assert x[0].item() == TINY_CHAIN_OPS
    if want("tiny_op_chain"):
        add("tiny_op_chain", timed(chain, 3), TINY_CHAIN_OPS)

    def threads():
        def client(t):
            a = torch.full((4,), float(t))
            b = torch.ones(4)
            for _ in range(OPS_PER_CLIENT):
                a + b
        ts = [threading.Thread(target=client, args=(t,)) for t in range(CLIENT_THREADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    if want("tiny_op_threads"):
        add("tiny_op_threads", timed(threads, 3, reps=3), CLIENT_THREADS * OPS_PER_CLIENT)

    if want("add_large"):
        a = torch.rand(LARGE)
        b = torch.rand(LARGE)
        add("add_large", timed(lambda: a + b, 9), 3 * LARGE * 4)
    if want("chain_large"):
        x = torch.rand(LARGE) * 2 - 1
        add("chain_large", timed(lambda: (x * 2 + 1).relu(), 6), 2 * LARGE * 4)
    if want("gelu_large"):
        # The values direct_bench's loop reads (bench/direct.hpp): tanh's cost depends on them.
        x = (torch.arange(LARGE) % 1000).float() * 0.001 - 0.5
        add("gelu_large", timed(lambda: 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x))), 5),
            2 * LARGE * 4)

    for n in (256, 512, 1024, 2048):
        if not want("matmul/%d" % n):
            continue
        ma = torch.rand(n, n)
        mb = torch.rand(n, n)
        iters = max(3, int(3e9 / (2 * n ** 3)))
        add("matmul/%d" % n, timed(lambda: ma @ mb, min(iters, 300)), 2 * n ** 3)

    # 16-bit floats: the add PyTorch 1.13's CPU has kernels for (f16 and
    # bf16), and bf16 matmul (f32 accumulation; f16 matmul has no CPU kernel).
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        if want("half_add/" + name):
            a = torch.rand(LARGE).to(dt)
            b = torch.rand(LARGE).to(dt)
            add("half_add/" + name, timed(lambda: a + b, 9), 3 * LARGE * 2)
    for n in (1024, 2048):
        if not want("half_matmul/%d" % n):
            continue
        ma = torch.rand(n, n).to(torch.bfloat16)
        mb = torch.rand(n, n).to(torch.bfloat16)
        add("half_matmul/%d" % n, timed(lambda: ma @ mb, max(3, int(1e9 / (2 * n ** 3)))), 2 * n ** 3)

    lin = [torch.nn.Linear(784, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 10)]
    inp = torch.rand(64, 784)

    def mlp():
        with torch.no_grad():
            h = torch.relu(lin[0](inp))
            h = torch.relu(lin[1](h))
            return lin[2](h)
    if want("mlp"):
        add("mlp", timed(mlp, 300, warmup=20), 1)

    # No second CPU device in PyTorch: a clone is its host-to-host transfer.
    if want("bridge"):
        src = torch.rand(LARGE)
        add("bridge", timed(lambda: src.clone(), 9), LARGE * 4)

    def churn():
        for _ in range(CHURN_WARMUP):
            y + 1
        base = rss_bytes()
        peak = base
        for i in range(CHURN):
            y + 1
            if i % 10000 == 0:
                peak = max(peak, rss_bytes())
        return peak - base
    if want("churn"):
        t0 = time.perf_counter()
        growth = churn()
        add("churn", time.perf_counter() - t0, CHURN + CHURN_WARMUP, rss_growth_mib=growth / (1 << 20))

    # Blocking round trips, as bench/op_cost's roundtrip and threads modes:
    # (x + 1).numpy() on float32[4], from one thread and from 8 at once.
    def roundtrips(n, threads):
        lat = [[] for _ in range(threads)]

        def client(k):
            x = torch.ones(4)
            for _ in range(200):
                (x + 1).numpy()
            for _ in range(n):
                t0 = time.perf_counter_ns()
                (x + 1).numpy()
                lat[k].append((time.perf_counter_ns() - t0) / 1e9)
        workers = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
        return sorted(sum(lat, [])), elapsed
    if want("roundtrip"):
        torch.set_num_threads(1)
        us, _ = roundtrips(ROUNDTRIPS, 1)
        add("roundtrip/p50", us[len(us) // 2], 1)
        add("roundtrip/p99", us[len(us) * 99 // 100], 1)
        us, elapsed = roundtrips(ROUNDTRIPS, 8)
        add("roundtrip/threads8", elapsed / len(us), 1)

    json.dump({"context": {"torch": torch.__version__, "threads": torch.get_num_threads()}, "benchmarks": out},
              sys.stdout, indent=1)


if __name__ == "__main__":
    main()
