// Teacher-forced next-token figures from llama.cpp itself (node-llama-cpp, prebuilt CPU binaries), for
// hotpath.exporters.llm_precision: for every window of token ids, each position's top-1 next token and
// the log-probability of the token that actually follows, from the model's full softmax (temperature 1,
// no top-k / top-p / min-p: every token of the vocabulary), evaluated with controlledEvaluate.
//
//   stdin  {"windows": [[ids...], ...]}
//   stdout {"windows": [{"top1": [...], "logprob": [...]}, ...]}   (n-1 entries per window of n tokens)
//
// Environment: NODE_LLAMA_CPP_ENTRY (node-llama-cpp's dist/index.js), MODEL (GGUF path), THREADS.
import { pathToFileURL } from "node:url";

const { getLlama } = await import(pathToFileURL(process.env.NODE_LLAMA_CPP_ENTRY).href);
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { windows } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const longest = Math.max(...windows.map((w) => w.length));

const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: process.env.MODEL, gpuLayers: 0 });
const context = await model.createContext({ contextSize: longest + 8, batchSize: longest,
                                            threads: Number(process.env.THREADS || 2) });
const sequence = context.getSequence();
const full = { temperature: 1, topK: 0, topP: 1, minP: 0 };
const CHUNK = 64;
const out = [];
for (const ids of windows) {
  await sequence.clearHistory();
  const top1 = [], logprob = [];
  // In chunks: each position's result holds the whole vocabulary's probabilities (a Map of ~49k entries).
  for (let start = 0; start < ids.length; start += CHUNK) {
    const part = ids.slice(start, start + CHUNK);
    const input = part.map((t, j) => (start + j + 1 < ids.length
      ? [t, { generateNext: { probabilities: true, options: full } }] : t));
    const results = await sequence.controlledEvaluate(input);
    for (let j = 0; j < part.length && start + j + 1 < ids.length; j++) {
      const probabilities = results[j].next.probabilities;   // sorted, most probable first
      top1.push(probabilities.keys().next().value);
      logprob.push(Math.log(probabilities.get(ids[start + j + 1]) ?? 0));
    }
  }
  out.push({ top1, logprob });
}
process.stdout.write(JSON.stringify({ windows: out }));
await context.dispose();
await model.dispose();
