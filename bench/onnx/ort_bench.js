// ONNX Runtime (CPU provider, onnxruntime-node) on one model: latency of
// session.run with host inputs -> host outputs, per batch size.
//   node bench/onnx/ort_bench.js MODEL.onnx ITERS THREADS SHAPE...   (SHAPE: 1x64, 1x128x32, ...)
const ort = require('onnxruntime-node');

async function main() {
  const [model, iters, threads, ...shapes] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const input = session.inputNames[0];
  for (const spec of shapes) {
    const dims = spec.split('x').map(Number);
    const b = dims[0];
    const data = Float32Array.from({length: dims.reduce((a, d) => a * d, 1)}, (_, i) => Math.sin(i));
    const feeds = {[input]: new ort.Tensor('float32', data, dims)};
    // warm-up: 50 calls and at least a second, as onnx_bench does
    const warmUntil = process.hrtime.bigint() + 1000000000n;
    for (let i = 0; i < 50 || process.hrtime.bigint() < warmUntil; ++i) await session.run(feeds);
    const lat = [];
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < Number(iters); ++i) {
      const s = process.hrtime.bigint();
      await session.run(feeds);
      lat.push(Number(process.hrtime.bigint() - s) / 1e3);
    }
    const total = Number(process.hrtime.bigint() - t0) / 1e9;
    lat.sort((a, b) => a - b);
    console.log(JSON.stringify({runtime: 'onnxruntime-node 1.30.0', shape: spec, median_us: lat[Math.floor(lat.length / 2)],
      p99_us: lat[Math.floor(lat.length * 0.99)], rows_per_s: b * Number(iters) / total}));
  }
}
main();
