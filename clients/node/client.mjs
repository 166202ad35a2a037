#!/usr/bin/env node
// A bitong client in Node.js that knows only the .proto files: no generated
// code, no Python. It runs a fixed script of checks against a `bitong serve`
// that serves the repository's bundled tools/, prints one JSON line per check
// ({check, ok, detail}) and exits 1 if any check failed (2 on bad usage).
//
//   node client.mjs ADDR [TOOLS_ROOT]   ADDR: unix:/path/to.sock | 127.0.0.1:50151
//
// With TOOLS_ROOT (the folder the server serves), the watch_tools check also
// writes a tool there and deletes it, and waits for WatchTools to say so.
//
// It exists to prove that the contract in proto/bitong/v1/agent.proto is
// enough for a client in another language (tests/clients/test_node_client.py).

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_PROTO = path.resolve(HERE, "../../proto");  // bitong/v1/agent.proto
const LOCAL_PROTO = path.resolve(HERE, "proto");        // grpc/health/v1/health.proto (standard, verbatim)

const SUGGESTION = "此工具尚不在仓库中，需铸渊新建";
const RPC_DEADLINE_MS = 5000;  // every call but the deadline check: a hung server fails a check, not the run

// keepCase: the proto's own snake_case names (exit_code, not exitCode).
// longs: String: int64 arrives as a decimal string, as in protobuf's JSON mapping.
// defaults: unset scalars arrive as 0/""/false instead of missing.
// oneofs: CallEvent carries `event: "chunk" | "result"`, the name of the set field.
// enums: String: OutputChunk.stream arrives as "STDOUT"/"STDERR".
// google/protobuf/struct.proto is not in includeDirs: protobufjs (under
// proto-loader) bundles the well-known types and resolves the import itself.
const LOAD_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [REPO_PROTO, LOCAL_PROTO],
};

// ------------------------------------------------------------ Struct

// google.protobuf.Struct is an ordinary message to proto-loader (no JSON
// wrapper), and the bundled definition spells its fields in camelCase
// (stringValue) even with keepCase. These two functions are the JSON mapping.
function toValue(v) {
  if (v === null || v === undefined) return { nullValue: "NULL_VALUE" };
  if (typeof v === "number") return { numberValue: v };
  if (typeof v === "string") return { stringValue: v };
  if (typeof v === "boolean") return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  if (typeof v === "object") return { structValue: toStruct(v) };
  throw new TypeError(`cannot put a ${typeof v} in a google.protobuf.Value`);
}

function toStruct(obj) {
  return { fields: Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, toValue(v)])) };
}

function fromValue(v) {
  switch (v.kind) {
    case "nullValue": return null;
    case "numberValue": return v.numberValue;
    case "stringValue": return v.stringValue;
    case "boolValue": return v.boolValue;
    case "structValue": return fromStruct(v.structValue);
    case "listValue": return (v.listValue.values || []).map(fromValue);
    default: return undefined;  // an unset Value
  }
}

function fromStruct(s) {
  return Object.fromEntries(Object.entries(s.fields || {}).map(([k, v]) => [k, fromValue(v)]));
}

// ------------------------------------------------------------ plumbing

function loadServices() {
  const agentDef = protoLoader.loadSync("bitong/v1/agent.proto", LOAD_OPTIONS);
  const healthDef = protoLoader.loadSync("grpc/health/v1/health.proto", LOAD_OPTIONS);
  const agent = grpc.loadPackageDefinition(agentDef).bitong.v1;
  const health = grpc.loadPackageDefinition(healthDef).grpc.health.v1;
  return { ToolAgent: agent.ToolAgent, Health: health.Health };
}

function unary(client, method, request, deadlineMs = RPC_DEADLINE_MS) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + deadlineMs }, (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

function streamCall(client, request, deadlineMs = RPC_DEADLINE_MS) {
  return new Promise((resolve, reject) => {
    const events = [];
    const call = client.StreamCall(request, { deadline: Date.now() + deadlineMs });
    call.on("data", (event) => events.push(event));
    call.on("error", reject);
    call.on("end", () => resolve(events));
  });
}

// WatchTools as an async iterator of ToolsChanged: the first message is the current state
// (initial: true, every tool in added), then added/changed/removed at every registry swap.
// The stream has no deadline (it runs until cancelled); call.cancel() ends it.
export function watchTools(client) {
  const call = client.WatchTools({});
  const queue = [];
  const waiting = [];
  let ended = null;
  const settle = () => {
    while (waiting.length && (queue.length || ended)) {
      const { resolve, reject } = waiting.shift();
      if (queue.length) resolve({ value: queue.shift(), done: false });
      else if (ended.error) reject(ended.error);
      else resolve({ value: undefined, done: true });
    }
  };
  call.on("data", (change) => { queue.push(change); settle(); });
  call.on("error", (error) => { ended = { error: error.code === grpc.status.CANCELLED ? null : error }; settle(); });
  call.on("end", () => { ended = ended || { error: null }; settle(); });
  return {
    call,
    next: () => new Promise((resolve, reject) => { waiting.push({ resolve, reject }); settle(); }),
    [Symbol.asyncIterator]() { return this; },
    return: async () => { call.cancel(); return { value: undefined, done: true }; },
  };
}

// The next change, or a CheckFailed when none comes within ms.
function nextWithin(watch, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`no WatchTools message within ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([watch.next(), timeout]).finally(() => clearTimeout(timer));
}

const WATCHED_TOOL = `name: node-watched
display: node watched
intent: a tool the Node client writes to watch it appear
method: run
executor: shell
command: echo hello
params_schema: {}
constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }
author: node-client
created: 2026-12-03
why: the WatchTools check of clients/node/client.mjs
`;

class CheckFailed extends Error {}

function expect(cond, what, detail) {
  if (!cond) throw new CheckFailed(`${what}; got ${JSON.stringify(detail)}`);
}

const text = (buf) => Buffer.from(buf).toString("utf8");

// The fields a check reports: bytes as text, the rest as the client received them.
function summary(r) {
  return {
    ok: r.ok, found: r.found, tool: r.tool, exit_code: r.exit_code, signal: r.signal,
    timed_out: r.timed_out, truncated: r.truncated, output: text(r.output), stderr: text(r.stderr),
    error: r.error, suggestion: r.suggestion, duration_ms: r.duration_ms,
  };
}

// ListTools a page at a time (500 tools by default) until next_page_token is empty; errors come on the first.
async function listAll(agent) {
  const first = await unary(agent, "ListTools", {});
  const tools = [...first.tools];
  let token = first.next_page_token;
  while (token) {
    const page = await unary(agent, "ListTools", { page_token: token });
    tools.push(...page.tools);
    token = page.next_page_token;
  }
  return { tools, errors: first.errors };
}

// ------------------------------------------------------------ the script

function checks(agent, health, toolsRoot) {
  return [
    ["health", async () => {
      const overall = await unary(health, "Check", { service: "" });
      const service = await unary(health, "Check", { service: "bitong.v1.ToolAgent" });
      expect(overall.status === "SERVING" && service.status === "SERVING", "both statuses SERVING",
        { overall: overall.status, service: service.status });
      return { "": overall.status, "bitong.v1.ToolAgent": service.status };
    }],

    ["list_tools", async () => {
      const reply = await listAll(agent);
      const names = reply.tools.map((t) => t.name);
      expect(names.includes("shell-exec"), "shell-exec among the tools", names);
      const shell = reply.tools.find((t) => t.name === "shell-exec");
      // int64 comes as a decimal string; map<string, ParamSpec> as a plain object.
      expect(shell.constraints.timeout_ms === "30000", "constraints.timeout_ms is the string \"30000\"",
        shell.constraints);
      expect(shell.params_schema.cmd && shell.params_schema.cmd.required === true, "params_schema.cmd required",
        shell.params_schema);
      expect(shell.params_schema.cwd.default.kind === "stringValue" && fromValue(shell.params_schema.cwd.default) === ".",
        "params_schema.cwd.default is the Value \".\"", shell.params_schema.cwd);
      return { tools: names, load_errors: reply.errors.length };
    }],

    ["match", async () => {
      const intent = "执行一条shell命令 uname -a";
      const reply = await unary(agent, "Match", { intent, top_k: 3 });
      const top = reply.candidates[0];
      expect(reply.found && top && top.name === "shell-exec" && top.tool.name === "shell-exec",
        "found, shell-exec first", reply);
      expect(typeof top.score === "number" && top.score > 0 && top.score <= 1, "a score in (0, 1]", top.score);
      return { intent, candidates: reply.candidates.map((c) => [c.name, c.score]), matched_terms: top.matched_terms };
    }],

    ["match_none", async () => {
      const reply = await unary(agent, "Match", { intent: "给我讲个关于程序员的笑话" });
      expect(!reply.found && reply.suggestion === SUGGESTION, "found false with the suggestion", reply);
      return { found: reply.found, suggestion: reply.suggestion };
    }],

    ["call_ok", async () => {
      const r = await unary(agent, "Call", { tool: "shell-exec", params: toStruct({ cmd: "echo hello" }) });
      expect(Buffer.isBuffer(r.output), "output is bytes (a Buffer)", typeof r.output);
      expect(r.ok && r.found && text(r.output) === "hello\n" && r.exit_code === 0 && !r.timed_out,
        "ok, output \"hello\\n\", exit_code 0", summary(r));
      return summary(r);
    }],

    ["call_failing", async () => {
      const r = await unary(agent, "Call", { tool: "shell-exec", params: toStruct({ cmd: "echo out; echo boom >&2; exit 7" }) });
      expect(!r.ok && r.found && r.exit_code === 7 && text(r.stderr) === "boom\n" && text(r.output) === "out\n"
        && r.error !== "", "ok false, the real stderr and exit code 7, error in words", summary(r));
      return summary(r);
    }],

    ["call_unknown_tool", async () => {
      const r = await unary(agent, "Call", { tool: "no-such-tool", params: toStruct({}) });
      expect(!r.ok && !r.found && r.suggestion === SUGGESTION, "found false with the suggestion", summary(r));
      return summary(r);
    }],

    ["call_param_errors", async () => {
      const r = await unary(agent, "Call", { tool: "shell-exec", params: toStruct({}) });
      expect(!r.ok && r.found && r.param_errors.some((e) => e.param === "cmd"), "a param_error for cmd",
        { ...summary(r), param_errors: r.param_errors });
      return { error: r.error, param_errors: r.param_errors };
    }],

    ["call_struct_types", async () => {
      // A bool and a number inside params: the Struct encoding beyond strings.
      const params = { path: "/tmp", recursive: false, not_modified_days: 0 };
      const r = await unary(agent, "Call", { tool: "file-stats", params: toStruct(params) });
      expect(r.ok, "file-stats ok", summary(r));
      const out = JSON.parse(text(r.output));
      expect(out.recursive === false && out.not_modified_days === 0 && Number.isInteger(out.file_count),
        "the handler saw recursive=false, not_modified_days=0", out);
      return { params, output: out };
    }],

    ["stream_call", async () => {
      const cmd = "printf 'out1\\n'; printf 'err1\\n' >&2; sleep 0.05; printf 'out2\\n'; printf 'err2\\n' >&2";
      const events = await streamCall(agent, { tool: "shell-exec", params: toStruct({ cmd }) });
      const last = events[events.length - 1];
      expect(last && last.event === "result", "the last event is the result", events.map((e) => e.event));
      const chunks = events.slice(0, -1);
      expect(chunks.every((e) => e.event === "chunk"), "only chunks before it", events.map((e) => e.event));
      const out = Buffer.concat(chunks.filter((e) => e.chunk.stream === "STDOUT").map((e) => e.chunk.data));
      const err = Buffer.concat(chunks.filter((e) => e.chunk.stream === "STDERR").map((e) => e.chunk.data));
      const r = last.result;
      const detail = { chunks: chunks.length, stdout: text(out), stderr: text(err),
        streamed_stdout_bytes: r.streamed_stdout_bytes, streamed_stderr_bytes: r.streamed_stderr_bytes,
        ok: r.ok, exit_code: r.exit_code };
      expect(r.ok && r.exit_code === 0 && text(out) === "out1\nout2\n" && text(err) === "err1\nerr2\n",
        "ok, stdout and stderr as written", detail);
      expect(r.streamed_stdout_bytes === String(out.length) && r.streamed_stderr_bytes === String(err.length),
        "streamed byte counts match the chunks", detail);
      return detail;
    }],

    ["call_deadline", async () => {
      // The gRPC deadline (800 ms) is shorter than the tool's timeout_ms (30000)
      // and the sleep: the server stops the process just before it and still answers.
      const started = Date.now();
      const r = await unary(agent, "Call", { tool: "shell-exec", params: toStruct({ cmd: "echo started; sleep 5" }) }, 800);
      const elapsed = Date.now() - started;
      expect(r.timed_out && !r.ok && text(r.output) === "started\n" && elapsed < 3000,
        "timed_out with the output so far, well before the sleep ends", { ...summary(r), elapsed_ms: elapsed });
      return { ...summary(r), elapsed_ms: elapsed };
    }],

    ["watch_tools", async () => {
      const watch = watchTools(agent);
      try {
        const first = (await nextWithin(watch, RPC_DEADLINE_MS, "the current state")).value;
        expect(first.initial && first.added.includes("shell-exec") && first.tool_count === first.added.length,
          "the first message is the current state: initial, every tool added", first);
        const detail = { generation: first.generation, tools: first.tool_count };
        if (!toolsRoot) return detail;
        const folder = path.join(toolsRoot, "node-watched");
        fs.mkdirSync(folder);
        try {
          fs.writeFileSync(path.join(folder, "TOOL.hdlp"), WATCHED_TOOL);
          const added = (await nextWithin(watch, RPC_DEADLINE_MS, "node-watched added")).value;
          expect(added.added.length === 1 && added.added[0] === "node-watched" && !added.initial,
            "node-watched added", added);
        } finally {
          fs.rmSync(folder, { recursive: true, force: true });
        }
        const removed = (await nextWithin(watch, RPC_DEADLINE_MS, "node-watched removed")).value;
        expect(removed.removed.length === 1 && removed.removed[0] === "node-watched", "node-watched removed", removed);
        // int64 generation arrives as a decimal string (longs: String)
        expect(BigInt(removed.generation) > BigInt(first.generation), "the generation grew", removed);
        return { ...detail, added: "node-watched", removed: "node-watched", generation_after: removed.generation };
      } finally {
        await watch.return();
      }
    }],
  ];
}

async function main() {
  const address = process.argv[2];
  const toolsRoot = process.argv[3];
  if (!address || process.argv.length > 4) {
    process.stderr.write("usage: node client.mjs ADDR [TOOLS_ROOT]   (ADDR: unix:/path/to.sock or HOST:PORT)\n");
    return 2;
  }
  const { ToolAgent, Health } = loadServices();
  const credentials = grpc.credentials.createInsecure();
  const agent = new ToolAgent(address, credentials);
  const health = new Health(address, credentials);
  let failed = 0;
  for (const [check, run] of checks(agent, health, toolsRoot)) {
    let line;
    try {
      line = { check, ok: true, detail: await run() };
    } catch (err) {
      failed += 1;
      const detail = err instanceof CheckFailed ? err.message
        : `${err.code !== undefined ? `gRPC ${grpc.status[err.code]}: ` : ""}${err.details || err.message}`;
      line = { check, ok: false, detail };
    }
    process.stdout.write(JSON.stringify(line) + "\n");
  }
  agent.close();
  health.close();
  return failed ? 1 : 0;
}

// Run as a script (node client.mjs ...); imported, it only lends its functions (watchTools).
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main();
}
