// llama.cpp (node-llama-cpp, prebuilt CPU binaries) behind the same NDJSON streaming endpoint as the
// FastAPI alternative, for hotpath.perf.generation_compare.
//
//   POST /generate {"tokens": [ids...], "max_tokens": n}  -> one JSON line per generated token
//   GET  /health                                          -> 200 once the model is loaded
//
// The prompt arrives as token ids (hotpath's chat template and tokenizer, the same vocabulary as
// the GGUF file), so both systems evaluate the very same prompt tokens. Greedy (temperature 0),
// stops at an end-of-generation token or max_tokens. One context with SEQUENCES sequences: each
// request takes a free sequence and node-llama-cpp batches the sequences' evaluations together.
//
// Environment: NODE_LLAMA_CPP_ENTRY (file path of node-llama-cpp's dist/index.js), MODEL (GGUF path),
// PORT, SEQUENCES (default 8), CONTEXT_SIZE (tokens per sequence, default 512), THREADS (default 2).
import http from "node:http";
import { pathToFileURL } from "node:url";

const { getLlama } = await import(pathToFileURL(process.env.NODE_LLAMA_CPP_ENTRY).href);
const sequences = Number(process.env.SEQUENCES || 8);
const perSequence = Number(process.env.CONTEXT_SIZE || 512);
const threads = Number(process.env.THREADS || 2);

const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath: process.env.MODEL, gpuLayers: 0 });
const context = await model.createContext({ sequences, contextSize: sequences * perSequence, threads,
                                            batchSize: 512 });
const free = [];
for (let i = 0; i < sequences; i++) free.push(context.getSequence());
const waiting = [];

function acquire() {
  if (free.length) return Promise.resolve(free.pop());
  return new Promise((resolve) => waiting.push(resolve));
}

async function release(sequence) {
  await sequence.clearHistory();
  const next = waiting.shift();
  if (next) next(sequence); else free.push(sequence);
}

async function generate(body, res) {
  const tokens = body.tokens;
  const maxTokens = Number(body.max_tokens || 128);
  if (!Array.isArray(tokens) || tokens.length === 0 || !(maxTokens >= 1)) {
    res.writeHead(400, { "Content-Type": "text/plain" });
    res.end("tokens must be a non-empty array and max_tokens >= 1");
    return;
  }
  const sequence = await acquire();
  res.writeHead(200, { "Content-Type": "application/x-ndjson" });
  let produced = 0;
  try {
    for await (const token of sequence.evaluate(tokens, { temperature: 0 })) {
      if (model.isEogToken(token)) break;
      res.write(JSON.stringify({ token }) + "\n");
      if (++produced >= maxTokens) break;
    }
  } finally {
    res.end(JSON.stringify({ finish: produced >= maxTokens ? "length" : "stop", completion_tokens: produced }) + "\n");
    await release(sequence);
  }
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/health") {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ ready: true, sequences }));
    return;
  }
  if (req.method !== "POST" || req.url !== "/generate") {
    res.writeHead(404);
    res.end();
    return;
  }
  let data = "";
  req.on("data", (chunk) => { data += chunk; });
  req.on("end", () => {
    let body;
    try { body = JSON.parse(data); } catch { res.writeHead(400); res.end("body is not JSON"); return; }
    generate(body, res).catch((err) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(err && err.stack || err));
    });
  });
});
server.listen(Number(process.env.PORT), "127.0.0.1", () => {
  process.stderr.write(`llama.cpp (node-llama-cpp) on 127.0.0.1:${process.env.PORT}, ${sequences} sequences\n`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, async () => {
    server.close();
    await context.dispose();
    await model.dispose();
    process.exit(0);
  });
}
