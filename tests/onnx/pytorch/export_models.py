#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Exports the PyTorch 1.13 models the ONNX loader is checked against.

Each model goes to OUT/<name>/ in the layout of ONNX's backend tests:
model.onnx plus test_data_set_N/{input_K.pb,output_K.pb} (onnx.TensorProto,
written by the small encoder below: the `onnx` Python package is not needed),
so build/tests/onnx/onnx_conformance runs them like ONNX's own cases. Weights
and inputs are seeded; outputs are PyTorch's own (eval mode). A `tolerance`
file holds "rtol atol" for float32 models whose outputs pass through long
reductions (softmax, layer norm).

    /usr/bin/python3 tests/onnx/pytorch/export_models.py tests/onnx/models/pytorch
"""
import os
import struct
import sys

import torch
import torch.nn as nn

ONNX_TYPES = {torch.float32: 1, torch.uint8: 2, torch.int32: 6, torch.int64: 7, torch.bool: 9, torch.float64: 11}


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tensor_proto(t, name):
    """onnx.TensorProto: dims (1), data_type (2), name (8), raw_data (9)."""
    t = t.detach().contiguous().cpu()
    msg = bytearray()
    for d in t.shape:
        msg += varint(1 << 3 | 0) + varint(d)
    msg += varint(2 << 3 | 0) + varint(ONNX_TYPES[t.dtype])
    nb = name.encode()
    msg += varint(8 << 3 | 2) + varint(len(nb)) + nb
    raw = t.numpy().tobytes()
    msg += varint(9 << 3 | 2) + varint(len(raw)) + raw
    return bytes(msg)


def export(out_dir, name, model, input_sets, input_names, output_names, dynamic_axes, opset, tolerance=None):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model.eval()
    # Exported with gradients on: under no_grad, 1.13's TransformerEncoderLayer
    # takes its fused fast path, which has no ONNX export.
    torch.onnx.export(model, tuple(input_sets[0]), os.path.join(d, "model.onnx"), input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes, opset_version=opset,
                      do_constant_folding=True)
    with torch.no_grad():
        for i, inputs in enumerate(input_sets):
            s = os.path.join(d, "test_data_set_%d" % i)
            os.makedirs(s, exist_ok=True)
            outs = model(*inputs)
            if not isinstance(outs, tuple):
                outs = (outs,)
            for k, (x, n) in enumerate(zip(inputs, input_names)):
                open(os.path.join(s, "input_%d.pb" % k), "wb").write(tensor_proto(x, n))
            for k, (y, n) in enumerate(zip(outs, output_names)):
                open(os.path.join(s, "output_%d.pb" % k), "wb").write(tensor_proto(y, n))
    if tolerance:
        open(os.path.join(d, "tolerance"), "w").write("%g %g\n" % tolerance)
    print("wrote", d)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)


class Encoder(nn.Module):
    """A 2-layer transformer encoder (post-norm, ReLU feed-forward)."""

    def __init__(self, d=32, heads=4, ff=64):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


class GptStep(nn.Module):
    """A GPT-style decoder over token ids with a causal mask; returns the
    next-token logits of the last position."""

    def __init__(self, vocab=50, d=32, heads=4, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        b, t = ids.shape
        pos = torch.arange(t, device=ids.device).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos)
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(h.shape[-1], dim=-1)
        dh = h.shape[-1] // self.heads
        q = q.reshape(b, t, self.heads, dh).transpose(1, 2)
        k = k.reshape(b, t, self.heads, dh).transpose(1, 2)
        v = v.reshape(b, t, self.heads, dh).transpose(1, 2)
        att = q @ k.transpose(-2, -1) / (dh ** 0.5)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return self.head(self.lnf(x))[:, -1, :]


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2), nn.Conv2d(6, 16, 5),
                                      nn.Tanh(), nn.AvgPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(400, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(),
                                        nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class EinsumMix(nn.Module):
    """Einsum forms the exporters emit: batched matmul, diagonal, transpose
    with a sum, ellipsis broadcast, outer product, attention scores."""

    def forward(self, a, b, c):
        return (torch.einsum("bij,bjk->bik", a, b), torch.einsum("ii->i", c), torch.einsum("bij->jb", a),
                torch.einsum("...ij,...jk->...ik", a, b), torch.einsum("i,j->ij", c[0], c[1]),
                torch.einsum("bqd,bkd->bqk", a, a))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNetMini(nn.Module):
    """ResNet-18's structure (stem conv 7x7/2 + max pool, basic blocks with
    projection shortcuts, global average pool, linear) at small widths, with
    non-trivial batch-norm statistics, so the export stays small."""

    def __init__(self, widths=(8, 16, 32, 64), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class RecurrentExact(nn.Module):
    """A bidirectional two-layer RNN with nonlinearity='relu' (exported as
    RNN with activations Relu), and int64 truncating division, fmod and
    clamp on values above 2^53, which must stay exact."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(6, 5, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True)

    def forward(self, x, a, b):
        y, _ = self.rnn(x)
        return y, torch.div(a, b, rounding_mode="trunc"), torch.fmod(a, b), a.clamp(-5, 2**60 + 2)


class RecurrentLens(nn.Module):
    """A two-layer bidirectional LSTM, a bidirectional GRU and a tanh RNN,
    sequence-first. Exported without lengths; export_recurrent_lens then wires
    a `lens` input into every recurrent node's sequence_lens and takes the
    expected outputs from PyTorch's packed sequences (padded steps 0, each
    direction's state from the entry's own steps only)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 5, num_layers=2, bidirectional=True)
        self.gru = nn.GRU(6, 4, bidirectional=True)
        self.rnn = nn.RNN(6, 3)

    def forward(self, x):
        y1, (h1, c1) = self.lstm(x)
        y2, h2 = self.gru(x)
        y3, h3 = self.rnn(x)
        return y1, h1, c1, y2, h2, y3, h3

    def packed(self, x, lens):
        pack = lambda: nn.utils.rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
        unpack = lambda y: nn.utils.rnn.pad_packed_sequence(y, total_length=x.shape[0])[0]
        y1, (h1, c1) = self.lstm(pack())
        y2, h2 = self.gru(pack())
        y3, h3 = self.rnn(pack())
        return unpack(y1), h1, c1, unpack(y2), h2, unpack(y3), h3


def export_recurrent_lens(out_dir):
    import onnx  # only here: the other cases need no onnx package
    name, model = "recurrent_lens", RecurrentLens().eval()
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    outputs = ["y_lstm", "h_lstm", "c_lstm", "y_gru", "h_gru", "y_rnn", "h_rnn"]
    axes = {"x": {0: "seq", 1: "batch"}}
    for o in outputs:
        axes[o] = {0: "seq", 1: "batch"} if o.startswith("y") else {1: "batch"}
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(model, (torch.randn(5, 3, 6),), path, input_names=["x"], output_names=outputs,
                      dynamic_axes=axes, opset_version=14)
    m = onnx.load(path)
    m.graph.input.append(onnx.helper.make_tensor_value_info("lens", onnx.TensorProto.INT32, ["batch"]))
    wired = 0
    for node in m.graph.node:
        if node.op_type in ("LSTM", "GRU", "RNN"):
            while len(node.input) < 5:
                node.input.append("")
            node.input[4] = "lens"
            wired += 1
    assert wired == 4, wired  # two LSTM layers, the GRU, the RNN
    onnx.save(m, path)
    cases = [(torch.randn(5, 3, 6), torch.tensor([5, 2, 4], dtype=torch.int32)),
             (torch.randn(3, 4, 6), torch.tensor([1, 3, 3, 2], dtype=torch.int32)),
             (torch.randn(4, 2, 6), torch.tensor([4, 4], dtype=torch.int32))]
    with torch.no_grad():
        for i, (x, lens) in enumerate(cases):
            s = os.path.join(d, "test_data_set_%d" % i)
            os.makedirs(s, exist_ok=True)
            open(os.path.join(s, "input_0.pb"), "wb").write(tensor_proto(x, "x"))
            open(os.path.join(s, "input_1.pb"), "wb").write(tensor_proto(lens, "lens"))
            for k, (y, n) in enumerate(zip(model.packed(x, lens.long()), outputs)):
                open(os.path.join(s, "output_%d.pb" % k), "wb").write(tensor_proto(y, n))
    open(os.path.join(d, "tolerance"), "w").write("1e-3 1e-5\n")
    print("wrote", d)


class LstmOpset7(nn.Module):
    """A batch-first LSTM without an initial state, exported at opset 7:
    PyTorch fills the state with the experimental ConstantFill there."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 3, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h, c


class TopKOld(nn.Module):
    """topk at opset 9, where TopK takes k as an attribute."""

    def forward(self, x):
        values, indices = torch.topk(x, 3, 1)
        return values, indices


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/onnx/models/pytorch"
    torch.manual_seed(0)
    export(out, "mlp", Mlp(), [[torch.randn(1, 64)], [torch.randn(64, 64)]], ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}}, 13)
    torch.manual_seed(1)
    export(out, "transformer_encoder", Encoder(), [[torch.randn(2, 8, 32)], [torch.randn(1, 16, 32)]], ["x"], ["y"],
           {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, 14, tolerance=(1e-3, 1e-5))
    torch.manual_seed(2)
    export(out, "gpt_step", GptStep(), [[torch.randint(0, 50, (2, 7))], [torch.randint(0, 50, (1, 12))]], ["ids"],
           ["logits"], {"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch"}}, 14, tolerance=(1e-3, 1e-5))
    torch.manual_seed(3)
    export(out, "lenet5", LeNet5(), [[torch.randn(2, 1, 28, 28)]], ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}}, 13)
    torch.manual_seed(5)
    export(out, "einsum_mix", EinsumMix(), [[torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(3, 3)]],
           ["a", "b", "c"], ["y1", "y2", "y3", "y4", "y5", "y6"], None, 13)
    torch.manual_seed(6)
    export(out, "resnet_mini", ResNetMini(), [[torch.randn(2, 3, 32, 32)], [torch.randn(1, 3, 24, 40)]], ["x"], ["y"],
           {"x": {0: "batch", 2: "h", 3: "w"}, "y": {0: "batch"}}, 13, tolerance=(1e-3, 1e-5))
    torch.manual_seed(8)
    big = torch.tensor([2**60 + 1, -(2**60 + 1), 7, -7, 2**53 + 1])
    export(out, "recurrent_exact", RecurrentExact(),
           [[torch.randn(2, 4, 6), big, torch.tensor([7, 7, -2, 2, 3])],
            [torch.randn(3, 2, 6), big.flip(0), torch.tensor([-3, 5, 9, -9, 1])]], ["x", "a", "b"],
           ["y", "q", "r", "c"], {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, 14,
           tolerance=(1e-3, 1e-5))
    torch.manual_seed(10)
    export_recurrent_lens(out)
    torch.manual_seed(11)
    export(out, "lstm_opset7", LstmOpset7(), [[torch.randn(2, 5, 4)], [torch.randn(3, 2, 4)]], ["x"], ["y", "h", "c"],
           {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}, "h": {1: "batch"}, "c": {1: "batch"}}, 7,
           tolerance=(1e-3, 1e-5))
    torch.manual_seed(9)
    export(out, "topk_opset9", TopKOld(), [[torch.randn(2, 6)], [torch.randn(4, 6)]], ["x"], ["values", "indices"],
           {"x": {0: "batch"}, "values": {0: "batch"}, "indices": {0: "batch"}}, 9)
    try:
        import torchvision  # noqa: F401
        torch.manual_seed(4)
        export(out, "resnet18", torchvision.models.resnet18(num_classes=10), [[torch.randn(1, 3, 64, 64)]], ["x"], ["y"],
               {"x": {0: "batch"}, "y": {0: "batch"}}, 13)
    except ImportError:
        print("torchvision missing: no resnet18 (it needs Conv/MaxPool anyway, issue 18)")


if __name__ == "__main__":
    main()
