// llama.cpp (node-llama-cpp, prebuilt CPU binaries) behind the same NDJSON streaming endpoint as the
// FastAPI alternative, for hotpath.sweeps.generation_compare.
//
//   POST /generate {"tokens": [ids...], "max_tokens": n}  -> one JSON line per generated token
//   POST /v1/completions {"prompt": text, "max_tokens": n, "min_tokens": m, "stream": true}
//                                                          -> OpenAI text completion chunks (SSE, [DONE]): what
//                                                             genai-perf --endpoint-type completions drives
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

// OpenAI /v1/completions, streamed: the prompt text tokenized by llama.cpp; end-of-generation tokens are
// skipped until min_tokens (genai-perf's fixed output length), then stop the stream.
async function completions(body, res) {
  const maxTokens = Number(body.max_tokens || 16);
  const minTokens = Number(body.min_tokens || 0);
  const prompt = Array.isArray(body.prompt) ? body.prompt.join("") : body.prompt;  // OpenAI allows a list
  if (typeof prompt !== "string" || !prompt || !(maxTokens >= 1)) {
    res.writeHead(400, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: { message: "prompt must be a non-empty string and max_tokens >= 1" } }));
    return;
  }
  const id = `cmpl-${Date.now()}`, created = Math.floor(Date.now() / 1000);
  const chunk = (text, finish) => "data: " + JSON.stringify({ id, object: "text_completion", created,
    model: body.model || "llama.cpp", choices: [{ index: 0, text, finish_reason: finish }] }) + "\n\n";
  const sequence = await acquire();
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  const generated = [];
  let sent = 0, finish = "length";
  try {
    for await (const token of sequence.evaluate(model.tokenize(prompt), { temperature: 0 })) {
      if (model.isEogToken(token) && generated.length >= minTokens) { finish = "stop"; break; }
      generated.push(token);
      const text = model.detokenize(generated);
      res.write(chunk(text.slice(sent), null));
      sent = text.length;
      if (generated.length >= maxTokens) break;
    }
  } finally {
    res.end(chunk("", finish) + "data: [DONE]\n\n");
    await release(sequence);
  }
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/health") {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ ready: true, sequences }));
    return;
  }
  const route = { "/generate": generate, "/v1/completions": completions }[req.url];
  if (req.method !== "POST" || !route) {
    res.writeHead(404);
    res.end();
    return;
  }
  let data = "";
  req.on("data", (chunk) => { data += chunk; });
  req.on("end", () => {
    let body;
    try { body = JSON.parse(data); } catch { res.writeHead(400); res.end("body is not JSON"); return; }
    route(body, res).catch((err) => {
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
