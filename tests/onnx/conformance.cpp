// SPDX-License-Identifier: Apache-2.0
// ONNX's own backend tests (Debian's libonnx-testdata) on Switchyard devices.
//
//   onnx_conformance --data DIR --folder node --device cpu:0     one ctest case:
//       exit 1 when a case the loader accepts gives wrong outputs or fails
//   onnx_conformance --data DIR --markdown docs/ONNX.md          every folder on
//       cpu:0 and reference:0, the table of pass / fail / unsupported
//
// A case is "unsupported" when loading (or the run, for attributes ONNX
// passes as inputs) fails with Errc::unsupported; its reason is that error.
// A "deviation" is a case whose test data contradicts the op's spec or the
// model itself (kDeviations, each with its reason): it runs, and its
// difference is reported; one that passes fails the run, so the list stays
// true.
// Outputs are compared as ONNX's runner does (numpy assert_allclose): rtol
// 1e-3, atol 1e-7, NaN equal to NaN.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

namespace fs = std::filesystem;
namespace sy = switchyard;

namespace {

enum class Outcome { pass, fail, unsupported, deviation };

// Cases whose expected data is wrong by the spec or contradicts the model.
const std::map<std::string, std::string, std::less<>> kDeviations = {
    {"test_cast_FLOAT_to_BFLOAT16",
     "ONNX 1.12's expected bf16 values truncate the f32 bits; Switchyard rounds to nearest even, as PyTorch, ONNX "
     "Runtime and the Cast spec since opset 24 do (onnx/onnx#3876, #5004)"},
    {"test_castlike_FLOAT_to_BFLOAT16",
     "the data's 'like' is [1] where the model declares [3, 4] (run() refuses it), and the expected bf16 values "
     "truncate (see test_cast_FLOAT_to_BFLOAT16)"},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", "as test_castlike_FLOAT_to_BFLOAT16"},
    {"test_castlike_BFLOAT16_to_FLOAT",
     "the data's 'like' is [1] where the model declares [3, 4]: run() refuses an input that contradicts its declared "
     "shape (as ONNX Runtime does)"},
    {"test_castlike_BFLOAT16_to_FLOAT_expanded", "as test_castlike_BFLOAT16_to_FLOAT"},
    {"test_adam_multiple",
     "the expected data was computed with epsilon 1e-2, but the node sets no epsilon, so the spec's default 1e-6 "
     "applies (ONNX's adam.py; tests/onnx/loader_test.cpp runs the case with epsilon 1e-2 set)"},
};

struct Result {
  Outcome outcome = Outcome::pass;
  std::string reason;
};

constexpr double kRtol = 1e-3, kAtol = 1e-7;  // ONNX's defaults; a case's `tolerance` file may say otherwise
constexpr auto kReadTimeout = std::chrono::seconds(60);

// "onnx: node 'x' (Op): what [path]" -> "Op: what", short enough for a table.
std::string short_reason(std::string what) {
  if (auto p = what.rfind(" ["); p != std::string::npos && what.back() == ']' && what.find('/', p) != std::string::npos)
    what.resize(p);  // a path, not a shape
  if (what.rfind("onnx: ", 0) == 0) what = what.substr(6);
  if (what.rfind("node '", 0) == 0) {
    auto close = what.find("' (");
    if (close != std::string::npos) what = what.substr(close + 2);
  }
  // "(Conv): op Conv is not in ..." -> "Conv: not in the op set"
  if (what.rfind("(", 0) == 0) {
    auto close = what.find("): ");
    if (close != std::string::npos) {
      std::string op = what.substr(1, close - 1), rest = what.substr(close + 3);
      if (rest.find("is not in Switchyard's op set") != std::string::npos) rest = "not in the op set";
      what = op + ": " + rest;
    }
  }
  for (auto& c : what)
    if (c == '|' || c == '\n') c = ' ';
  return what;
}

struct Tolerance {
  double rtol = kRtol, atol = kAtol;
};

std::string compare(const sy::TensorData& got, const sy::TensorData& want, const std::string& name, Tolerance tol) {
  if (got.dtype != want.dtype)
    return "output '" + name + "': dtype " + std::string(sy::name_of(got.dtype)) + ", expected " +
           std::string(sy::name_of(want.dtype));
  if (got.shape != want.shape)
    return "output '" + name + "': shape " + got.shape.to_string() + ", expected " + want.shape.to_string();
  if (sy::is_floating(got.dtype)) {
    auto g = got.to_vector<double>(), w = want.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(w[i]) && std::isnan(g[i])) continue;
      if (std::isinf(w[i]) && g[i] == w[i]) continue;
      if (!(std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i])))
        return "output '" + name + "'[" + std::to_string(i) + "] = " + std::to_string(g[i]) + ", expected " +
               std::to_string(w[i]);
    }
    return "";
  }
  auto g = got.to_vector<int64_t>(), w = want.to_vector<int64_t>();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i])
      return "output '" + name + "'[" + std::to_string(i) + "] = " + std::to_string(g[i]) + ", expected " +
             std::to_string(w[i]);
  return "";
}

// Random ops: ONNX's expected values came from numpy's random stream, which
// no runtime reproduces. These cases are held to what the op promises
// instead: the expected dtype and shape; Bernoulli's values 0 or 1 (1 where
// the probability is 1, 0 where it is 0); training Dropout's x / (1 - ratio)
// where kept and 0 where dropped (where the mask, when returned, says), with
// both outcomes seen among 20 or more elements.
const std::set<std::string, std::less<>> kRandomCases = {"test_bernoulli",
                                                         "test_bernoulli_double",
                                                         "test_bernoulli_double_expanded",
                                                         "test_bernoulli_expanded",
                                                         "test_bernoulli_seed",
                                                         "test_bernoulli_seed_expanded",
                                                         "test_training_dropout",
                                                         "test_training_dropout_default",
                                                         "test_training_dropout_default_mask",
                                                         "test_training_dropout_mask"};

std::string check_random(const std::string& name, const std::vector<sy::TensorData>& in,
                         const std::vector<sy::TensorData>& got, const std::vector<sy::TensorData>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].dtype != want[i].dtype)
      return "output " + std::to_string(i) + ": dtype " + std::string(sy::name_of(got[i].dtype)) + ", expected " +
             std::string(sy::name_of(want[i].dtype));
    if (got[i].shape != want[i].shape)
      return "output " + std::to_string(i) + ": shape " + got[i].shape.to_string() + ", expected " +
             want[i].shape.to_string();
  }
  const auto y = got.at(0).to_vector<double>();
  const auto x = in.at(0).to_vector<double>();
  size_t ones = 0;
  if (name.rfind("test_bernoulli", 0) == 0) {
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] != 0 && y[i] != 1) return "y[" + std::to_string(i) + "] = " + std::to_string(y[i]) + ", not 0 or 1";
      if ((x[i] == 1 && y[i] != 1) || (x[i] == 0 && y[i] != 0))
        return "y[" + std::to_string(i) + "] = " + std::to_string(y[i]) + " where the probability is " +
               std::to_string(x[i]);
      ones += y[i] == 1 ? 1 : 0;
    }
  } else {
    const double ratio = in.size() > 1 ? in[1].to_vector<double>().at(0) : 0.5;
    const double scale = 1.0 / (1.0 - ratio);
    const std::vector<int64_t> mask = got.size() > 1 ? got[1].to_vector<int64_t>() : std::vector<int64_t>{};
    for (size_t i = 0; i < y.size(); ++i) {
      const double kept_value = x[i] * scale;
      const bool kept = mask.empty() ? y[i] != 0 : mask[i] != 0;
      if (kept ? std::abs(y[i] - kept_value) > 1e-6 * std::abs(kept_value) : y[i] != 0)
        return "y[" + std::to_string(i) + "] = " + std::to_string(y[i]) +
               " is neither 0 nor x / (1 - ratio) = " + std::to_string(kept_value) +
               (mask.empty() ? ""
                : kept       ? " (mask: kept)"
                             : " (mask: dropped)");
      ones += kept ? 1 : 0;
    }
  }
  if (y.size() >= 20 && (ones == 0 || ones == y.size()))
    return std::to_string(ones) + " of " + std::to_string(y.size()) + " elements kept: not random";
  return "";
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) found.emplace_back(std::stoi(n.substr(prefix.size())), e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [i, p] : found) out.push_back(p);
  return out;
}

Result run_case(const fs::path& dir, const sy::Device& device) {
  try {
    auto model = sy::onnx::Model::load((dir / "model.onnx").string(), device);
    Tolerance tol;
    if (std::ifstream tf(dir / "tolerance"); tf) tf >> tol.rtol >> tol.atol;
    auto sets = numbered(dir, "test_data_set_");
    if (sets.empty()) return {Outcome::fail, "no test_data_set_N folder"};
    for (const auto& set : sets) {
      auto in_files = numbered(set, "input_");
      auto out_files = numbered(set, "output_");
      const auto& ins = model.inputs();
      if (in_files.size() > ins.size())
        return {Outcome::fail,
                std::to_string(in_files.size()) + " inputs given, the model takes " + std::to_string(ins.size())};
      // Sequences and optionals (input_N.pb a SequenceProto or an
      // OptionalProto) go through infer_values(); tensor-only models
      // through run(), as users call it.
      const auto& decl = model.outputs();
      auto is_tensor = [](const sy::onnx::ValueInfo& v) { return v.kind == sy::onnx::ValueKind::tensor; };
      if (std::all_of(ins.begin(), ins.end(), is_tensor) && std::all_of(decl.begin(), decl.end(), is_tensor)) {
        sy::onnx::DataMap inputs;
        std::vector<sy::TensorData> given, got, expected;
        for (size_t i = 0; i < in_files.size(); ++i) {
          given.push_back(sy::onnx::read_tensor_proto(in_files[i].string(), ins[i].dtype));
          inputs.emplace(ins[i].name, given.back());
        }
        // Three runs: the first builds the signature's plan, the second
        // is recorded, the third replays the recording (Recording): each
        // must give the expected outputs.
        for (int run = 1; run <= 3; ++run) {
          const std::string which = run == 1 ? "" : run == 2 ? "run 2 (recorded): " : "run 3 (a replay): ";
          auto outs = model.run(inputs);
          const bool random = kRandomCases.count(dir.filename().string()) != 0;
          got.clear();
          expected.clear();
          for (size_t i = 0; i < out_files.size() && i < decl.size(); ++i) {
            auto want = sy::onnx::read_tensor_proto(out_files[i].string(), decl[i].dtype);
            auto it = outs.find(decl[i].name);
            if (it == outs.end()) return {Outcome::fail, which + "output '" + decl[i].name + "' missing"};
            auto f = it->second.read();
            if (!f.wait_for(kReadTimeout))
              return {Outcome::fail, which + "output '" + decl[i].name + "' not ready after 60 s"};
            if (random) {
              got.push_back(f.get());
              expected.push_back(std::move(want));
            } else if (auto diff = compare(f.get(), want, decl[i].name, tol); !diff.empty()) {
              return {Outcome::fail, which + diff};
            }
          }
          if (random)
            if (auto wrong = check_random(dir.filename().string(), given, got, expected); !wrong.empty())
              return {Outcome::fail, which + "random op: " + wrong};
        }
        continue;
      }
      sy::onnx::HostValueMap inputs;
      for (size_t i = 0; i < in_files.size(); ++i)
        inputs.emplace(ins[i].name, sy::onnx::read_value_proto(in_files[i].string(), ins[i].kind));
      auto f = model.infer_values(inputs);
      if (!f.wait_for(kReadTimeout)) return {Outcome::fail, "outputs not ready after 60 s"};
      auto outs = f.get();
      for (size_t i = 0; i < out_files.size() && i < decl.size(); ++i) {
        auto want = sy::onnx::read_value_proto(out_files[i].string(), decl[i].kind);
        const std::string& name = decl[i].name;
        auto it = outs.find(name);
        if (it == outs.end()) return {Outcome::fail, "output '" + name + "' missing"};
        const auto& got = it->second;
        if (want.is_none() || got.is_none()) {
          if (want.is_none() != got.is_none())
            return {Outcome::fail, "output '" + name + "': " + (got.is_none() ? "none" : "a value") + ", expected " +
                                       (want.is_none() ? "none" : "a value")};
        } else if (want.is_sequence()) {
          if (!got.is_sequence()) return {Outcome::fail, "output '" + name + "': a tensor, expected a sequence"};
          if (got.items().size() != want.items().size())
            return {Outcome::fail, "output '" + name + "': " + std::to_string(got.items().size()) +
                                       " tensors, expected " + std::to_string(want.items().size())};
          for (size_t k = 0; k < want.items().size(); ++k)
            if (auto diff = compare(got.items()[k], want.items()[k], name + "[" + std::to_string(k) + "]", tol);
                !diff.empty())
              return {Outcome::fail, diff};
        } else {
          if (!got.is_tensor()) return {Outcome::fail, "output '" + name + "': a sequence, expected a tensor"};
          if (auto diff = compare(got.tensor(), want.tensor(), name, tol); !diff.empty()) return {Outcome::fail, diff};
        }
      }
    }
    return {};
  } catch (const sy::Error& e) {
    return {e.code() == sy::Errc::unsupported ? Outcome::unsupported : Outcome::fail, short_reason(e.what())};
  } catch (const std::exception& e) {
    return {Outcome::fail, short_reason(e.what())};
  }
}

std::vector<fs::path> cases(const fs::path& folder, const std::string& filter) {
  std::vector<fs::path> out;
  if (!fs::exists(folder)) return out;
  for (const auto& e : fs::directory_iterator(folder))
    if (fs::exists(e.path() / "model.onnx") && e.path().filename().string().find(filter) != std::string::npos)
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

const char* label(Outcome o) {
  switch (o) {
    case Outcome::pass:
      return "pass";
    case Outcome::fail:
      return "FAIL";
    case Outcome::unsupported:
      return "unsupported";
    case Outcome::deviation:
      return "deviation";
  }
  return "?";
}

// What keeps the unsupported cases out, by cause (hand-written: keep in step
// with the table the run generates below it).
constexpr const char* kBlocked = R"(## What is not supported, and why

- **Convolution and pooling**: Conv, ConvTranspose, MaxPool (with Indices, row- or column-major; pads wider than
  half the kernel are applied to the input first, integer inputs pooled in f64), AveragePool, LpPool and
  GlobalAverage/MaxPool run on the native ops of issue #18 (LeNet-5 and a ResNet-18-shaped export pass); MaxUnpool
  is a scatter, LRN a sum of shifted channel slices, GridSample and RoiAlign gathers of weighted taps.
- **Quantization** (issue #17's u8/i8): QuantizeLinear and DequantizeLinear (per tensor and per axis),
  DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv are compositions of public
  ops: integer products in i32 (matmul) or f64 (conv, exact for 8-bit operands), rounding half to even, then
  saturation; their outputs match ONNX's bit for bit.
- **Dtypes Switchyard lacks** (UINT16, UINT32, UINT64, STRING, complex, float8): no issue. FLOAT16, BFLOAT16,
  INT8 and INT16 load (issue #17); ONNX 1.12's BFLOAT16 cast cases store their data as UINT16 bit patterns, which
  `read_tensor_proto(path, dtype)` reads as bf16 when the model declares bf16. Their expected f32 -> bf16 values
  truncate, and the CastLike ones give 'like' a shape the model contradicts: deviations, listed with the reason.
  BitShift runs on UINT8 only, so its 16/32/64-bit cases are refused.
- **Data-dependent output shapes** (NonZero, Unique, Compress, NonMaxSuppression) run: they read their input on
  the host (a sync when the device computed it; the model is then replanned on every run).
- **Control flow**: If, Loop and Scan run their subgraphs (which read outer values). **Sequences and optionals**
  (issue #19) are values of the loader: a sequence a list of tensors, an optional empty or one value; they pass
  through If branches and loop-carried values, and the Sequence* and Optional* ops, SplitToSequence,
  ConcatFromSequence and SequenceMap run on them. **Maps** (and sparse tensors) have no counterpart and are refused.
- **Random ops** (Bernoulli, RandomUniform(Like), RandomNormal(Like), Dropout in training mode) run on the
  device's random stream (`Device::seed` restarts it; a node's `seed` attribute does not make its values repeat).
  No runtime reproduces the values ONNX's cases expect (numpy's stream), so those ten cases pass when their outputs
  keep the op's promise instead: the expected dtype and shape, Bernoulli's 0 or 1 (1 at probability 1, 0 at 0),
  Dropout's x / (1 - ratio) where kept and 0 where dropped, as its mask says, and both outcomes among 20 or more
  elements. Training: BatchNormalization's `training_mode=1` (batch statistics, updated running statistics) and
  the ai.onnx.preview.training domain's optimizers (Adagrad, Adam, Momentum) run; its Gradient (automatic
  differentiation) is out of scope.
- **Strings**: TfIdfVectorizer runs on integer tokens; its string pools, like every STRING value, are refused.
- **Not mapped yet** (opset 18 and later, beyond the supported opsets): CenterCropPad, Col2Im.
- **Opset**: 7-17 of the default domain, and 6 (binary ops' `broadcast`/`axis` are honoured; its other
  differences from 7 are attributes the loader refuses when present); 1-5 node by node where ONNX's schema
  registry shows the node's op defined there as in opset 6. Models of other domains only (training ops) are
  refused.

)";

int usage() {
  std::cerr << "usage: onnx_conformance [--data DIR] (--folder NAME --device DEV | --markdown FILE [--models DIR]) "
               "[--filter S] [--verbose] [--strict: unsupported fails too]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data", models, folder, device_name, markdown, filter;
  bool verbose = false, strict = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data")
      data = next();
    else if (a == "--models")
      models = next();
    else if (a == "--folder")
      folder = next();
    else if (a == "--device")
      device_name = next();
    else if (a == "--markdown")
      markdown = next();
    else if (a == "--filter")
      filter = next();
    else if (a == "--verbose")
      verbose = true;
    else if (a == "--strict")
      strict = true;
    else
      return usage();
  }
  if (!fs::exists(data)) {
    std::cerr << "no ONNX test data at " << data << " (scripts/setup installs libonnx-testdata)\n";
    return 1;
  }
  if (markdown.empty() && (folder.empty() || device_name.empty())) return usage();

  // (data folder, subfolder): ONNX's own cases, then our PyTorch exports.
  std::vector<std::pair<std::string, std::string>> folders;
  if (markdown.empty()) {
    folders.emplace_back(data, folder);
  } else {
    for (const char* f : {"node", "pytorch-converted", "pytorch-operator", "simple"}) folders.emplace_back(data, f);
    if (!models.empty()) folders.emplace_back(models, "pytorch");
  }
  const std::vector<std::string> devices =
      markdown.empty() ? std::vector<std::string>{device_name} : std::vector<std::string>{"cpu:0", "reference:0"};
  // A GPU device is optional: without one the case is skipped (ctest
  // SKIP_RETURN_CODE 77) with the reason, as the other gpu tests.
  std::vector<std::string> start = devices;
  for (auto& d : start)
    if (d.rfind("cuda:", 0) == 0) d = "cuda:*";
  sy::Runtime rt({.devices = start});
  for (const auto& d : devices) {
    try {
      (void)rt.device(d);
    } catch (const sy::Error&) {
      std::cout << "skipped: " << d << " is not available";
      for (const auto& why : rt.unavailable()) std::cout << " (" << why << ")";
      std::cout << "\n";
      return 77;
    }
  }

  struct Row {
    std::string folder, name;
    std::vector<Result> per_device;
  };
  std::vector<Row> rows;
  int failed = 0;
  for (const auto& [root, f] : folders) {
    for (const auto& dir : cases(fs::path(root) / f, filter)) {
      Row row{f, dir.filename().string(), {}};
      for (const auto& d : devices) {
        Result r = run_case(dir, rt.device(d));
        if (auto known = kDeviations.find(row.name); known != kDeviations.end()) {
          if (r.outcome == Outcome::fail)
            r = {Outcome::deviation, known->second + " (here: " + r.reason + ")"};
          else
            r = {Outcome::fail, "listed as a deviation (" + known->second + ") but " + label(r.outcome)};
        }
        // Our own exports are models the loader claims: a refusal fails too.
        if (r.outcome == Outcome::fail || (strict && r.outcome == Outcome::unsupported)) ++failed;
        if (verbose || r.outcome == Outcome::fail || (strict && r.outcome == Outcome::unsupported))
          std::cout << label(r.outcome) << " " << f << "/" << row.name << " on " << d << (r.reason.empty() ? "" : ": ")
                    << r.reason << "\n";
        row.per_device.push_back(std::move(r));
      }
      rows.push_back(std::move(row));
    }
  }
  std::map<std::string, std::array<int, 4>> counts;  // folder -> pass/fail/unsupported/deviation (first device)
  for (const auto& r : rows) ++counts[r.folder][static_cast<int>(r.per_device[0].outcome)];
  for (const auto& [f, c] : counts)
    std::cout << f << " on " << devices[0] << ": " << c[0] << " pass, " << c[1] << " fail, " << c[2] << " unsupported, "
              << c[3] << " deviations from wrong test data\n";

  if (!markdown.empty()) {
    std::ofstream md(markdown);
    md << "# ONNX conformance\n\n"
       << "Generated by `scripts/onnx-conformance` (`build/tests/onnx/onnx_conformance --markdown docs/ONNX.md "
          "--models tests/onnx/models`) from ONNX 1.12's backend tests (Debian's `libonnx-testdata`, `"
       << data
       << "`) and the PyTorch 1.13 exports in `tests/onnx/models/pytorch` (folder `pytorch`, written by "
          "`tests/onnx/pytorch/export_models.py`, each compared with PyTorch's own outputs). Outputs are compared as "
          "ONNX's runner does: rtol 1e-3, atol 1e-7 (a case's `tolerance` file may say otherwise: the transformer "
          "and GPT exports use atol 1e-5), NaN equals NaN, integers exactly. A model with tensor inputs and outputs "
          "runs each data set three times (the first run plans the signature, the second is recorded, the third "
          "replays the recording), and every run is compared. *unsupported*: the loader (or, for an "
          "attribute ONNX passes as an input, the run) refused the model with `Errc::unsupported`; the reason is "
          "its message (the node's name is left out here). *deviation*: the case's expected data contradicts the op's "
          "spec or the model (listed in `tests/onnx/conformance.cpp` with the reason, shown below). ctest (label "
          "`onnx`) fails on any *FAIL*.\n\n";
    md << kBlocked;
    md << "## Summary\n\n| folder | pass | fail | unsupported | deviation |\n|---|---|---|---|---|\n";
    for (const auto& [f, c] : counts)
      md << "| " << f << " | " << c[0] << " | " << c[1] << " | " << c[2] << " | " << c[3] << " |\n";
    // Unsupported reasons grouped, so the list of what is missing reads at a glance.
    std::map<std::string, int> reasons;
    for (const auto& r : rows)
      if (r.per_device[0].outcome == Outcome::unsupported) {
        std::string why = r.per_device[0].reason;
        if (auto q = why.find(" is not in Switchyard's op set"); q != std::string::npos)
          why = why.substr(0, q) + " (op)";
        ++reasons[why];
      }
    md << "\n## Why cases are unsupported (count of cases)\n\n| reason | cases |\n|---|---|\n";
    std::vector<std::pair<int, std::string>> sorted;
    for (const auto& [why, n] : reasons) sorted.emplace_back(-n, why);
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [n, why] : sorted) md << "| " << why << " | " << -n << " |\n";
    md << "\n## Every case\n\n| folder | test |";
    for (const auto& d : devices) md << " " << d << " |";
    md << " reason |\n|---|---|";
    for (size_t i = 0; i < devices.size(); ++i) md << "---|";
    md << "---|\n";
    for (const auto& r : rows) {
      md << "| " << r.folder << " | " << r.name << " |";
      std::string reason;
      for (const auto& d : r.per_device) {
        md << " " << label(d.outcome) << " |";
        if (reason.empty() && !d.reason.empty()) reason = d.reason;
      }
      md << " " << reason << " |\n";
    }
  }
  return failed == 0 ? 0 : 1;
}
