// ort_forward.js - onnxruntime's forward pass, the reference of bench/pretrained.py and tests/python/test_ops_ort.py:
// onnxruntime-node runs each model a spec names on its inputs and writes every output as raw little-endian data.
//
//   node bench/ort_forward.js SPEC.json
//
// SPEC.json: one spec or a list of them, each {"model": PATH, "outdir": DIR, "inputs": [{"name", "dtype" (float32 |
// float64 | int64), "shape", "file"}]}; writes DIR/out_K.bin and DIR/outputs.json ([{"name", "dtype", "shape",
// "file"}], or {"error": MESSAGE} when onnxruntime refuses the model or its inputs). Exits 1 when a single spec fails.
// onnxruntime-node comes from npm (`npm install --ignore-scripts onnxruntime-node`: its CPU build ships in the
// package); ORT_NODE names its folder when it is not on node's module path.
const fs = require('fs');
const ort = require(process.env.ORT_NODE || 'onnxruntime-node');

function typed(dtype, buf) {
  const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length); // aligned copy
  if (dtype === 'int64') return new BigInt64Array(ab);
  if (dtype === 'float64') return new Float64Array(ab);
  if (dtype === 'float32') return new Float32Array(ab);
  throw new Error(`dtype ${dtype} is not supported`);
}

async function one(spec) {
  try {
    const sess = await ort.InferenceSession.create(spec.model);
    const feeds = {};
    for (const i of spec.inputs) feeds[i.name] = new ort.Tensor(i.dtype, typed(i.dtype, fs.readFileSync(i.file)), i.shape);
    const out = await sess.run(feeds);
    const meta = sess.outputNames.map((n, k) => {
      const t = out[n];
      const file = `${spec.outdir}/out_${k}.bin`;
      fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      return {name: n, dtype: t.type, shape: t.dims, file};
    });
    fs.writeFileSync(`${spec.outdir}/outputs.json`, JSON.stringify(meta));
    return true;
  } catch (e) {
    fs.writeFileSync(`${spec.outdir}/outputs.json`, JSON.stringify({error: String(e.message || e)}));
    return false;
  }
}

(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  if (Array.isArray(spec)) {
    for (const s of spec) await one(s);
  } else if (!(await one(spec))) {
    console.error(`ort_forward: ${JSON.parse(fs.readFileSync(`${spec.outdir}/outputs.json`, 'utf8')).error}`);
    process.exit(1);
  }
})().catch((e) => {
  console.error(`ort_forward: ${e.message || e}`);
  process.exit(1);
});
