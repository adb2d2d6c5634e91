// ort_forward.js - the reference forward pass of bench/pretrained.py (and of anyone comparing cattr with onnxruntime):
// onnxruntime-node runs MODEL on the inputs a spec names and writes every output as raw little-endian data.
//
//   node bench/ort_forward.js SPEC.json
//
// SPEC.json: {"model": PATH, "outdir": DIR, "inputs": [{"name", "dtype" (float32|float64|int64), "shape", "file"}]}
// writes DIR/out_K.bin and DIR/outputs.json ([{"name", "dtype", "shape", "file"}]). onnxruntime-node comes from npm
// (`npm install --ignore-scripts onnxruntime-node`, its CPU build ships in the package); ORT_NODE names its folder when
// it is not on node's module path.
const fs = require('fs');
const ort = require(process.env.ORT_NODE || 'onnxruntime-node');

function typed(dtype, buf) {
  const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length); // aligned copy
  if (dtype === 'int64') return new BigInt64Array(ab);
  if (dtype === 'float64') return new Float64Array(ab);
  if (dtype === 'float32') return new Float32Array(ab);
  throw new Error(`dtype ${dtype} is not supported`);
}

(async () => {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
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
})().catch((e) => {
  console.error(`ort_forward: ${e.message || e}`);
  process.exit(1);
});
