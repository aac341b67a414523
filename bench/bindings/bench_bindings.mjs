// Per-call cost of a file read through each binding, against the harness's own tool reading
// the same file locally, in one run (docs/benchmarks.md, "Bindings"): pi's read tool with
// pi's local operations and with the binding's (bindings/pi, over stdio to asp-agent), and
// OpenCode's read tool file (bindings/opencode) through its shared asp mcp child, and the
// `read` tool that Claude Code calls (as mcp__asp__read) on an `asp mcp` child of the
// default vocabulary, spoken to as Claude Code does (MCP over stdio, one JSON line per
// message); each round takes the four in a fresh random order.
// usage: node bench_bindings.mjs HARNESS_NODE_MODULES BINDINGS SDK_WORK ASP ASP_AGENT [N]
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, symlinkSync, writeFileSync, cpSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const [nodeModules, bindings, sdkWork, asp, agent, nArg] = process.argv.slice(2);
const N = Number(nArg ?? 500);
const root = mkdtempSync(join(tmpdir(), "asp-bench-bind-"));
const project = join(root, "project"), sandbox = join(root, "sandbox");
mkdirSync(project);
mkdirSync(sandbox);
const text = Array.from({ length: 200 }, (_, i) => `line ${i} of a source file, about sixty characters`).join("\n");
writeFileSync(join(project, "a.txt"), text);
writeFileSync(join(sandbox, "a.txt"), text);
writeFileSync(join(project, ".asp.json"), JSON.stringify({
  version: 1, transport: "stdio", cwd: sandbox, stdio: { command: [agent, "--stdio"] } }));
// the pi binding as installed: its files and the SDK beside them
const piDir = join(root, "pi");
cpSync(join(bindings, "pi"), piDir, { recursive: true });
mkdirSync(join(piDir, "node_modules"));
symlinkSync(sdkWork, join(piDir, "node_modules", "asp-sdk"));
process.chdir(project);

const require = createRequire(join(nodeModules, "x.js"));
const { createJiti } = require("jiti");
const jiti = createJiti(import.meta.url, {
  alias: { "@mariozechner/pi-coding-agent": join(nodeModules, "@mariozechner/pi-coding-agent/dist/index.js") } });
const pi = await import(join(nodeModules, "@mariozechner/pi-coding-agent/dist/index.js"));
const { Sandbox } = await jiti.import(join(piDir, "sandbox.ts"));
const { readOperations } = await jiti.import(join(piDir, "operations.ts"));

const local = pi.createReadTool(project);
const sb = await Sandbox.open(project);
const remote = pi.createReadTool(sb.cwd, { operations: readOperations(sb) });
process.env.ASP_BIN = asp;
// the shared child is unref'd (it must not keep a harness alive): keep this loop alive
setInterval(() => {}, 1000);
const oc = await import(join(bindings, "opencode", "asp.js"));
const ocRead = await oc.aspTool("read", { asp, config: join(project, ".asp.json") });
// Claude Code's side of asp mcp: requests answered in order, one JSON line each
const mcp = spawn(asp, ["mcp", "--config", join(project, ".asp.json")],
  { stdio: ["pipe", "pipe", "inherit"] });
const waiting = new Map();
let mcpId = 0, mcpBuf = "";
mcp.stdout.setEncoding("utf8");
mcp.stdout.on("data", (chunk) => {
  mcpBuf += chunk;
  let nl;
  while ((nl = mcpBuf.indexOf("\n")) >= 0) {
    const msg = JSON.parse(mcpBuf.slice(0, nl));
    mcpBuf = mcpBuf.slice(nl + 1);
    const w = waiting.get(msg.id);
    waiting.delete(msg.id);
    if (w) msg.error || msg.result?.isError ? w.reject(new Error(JSON.stringify(msg))) : w.resolve(msg.result);
  }
});
const mcpCall = (method, params) => new Promise((resolve, reject) => {
  const id = ++mcpId;
  waiting.set(id, { resolve, reject });
  mcp.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
});
await mcpCall("initialize", { protocolVersion: "2025-06-18", capabilities: {},
  clientInfo: { name: "bench", version: "1" } });
mcp.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
const file = join(project, "a.txt");
const paths = [
  ["pi read, pi's local operations", () => local.execute("b", { path: file })],
  ["pi read, bindings/pi (stdio asp-agent)", () => remote.execute("b", { path: file })],
  ["OpenCode read, bindings/opencode (asp mcp)",
   () => ocRead.execute({ filePath: file, offset: null, limit: null }, {})],
  ["Claude Code read, asp mcp (mcp__asp__read)",
   () => mcpCall("tools/call", { name: "read", arguments: { file_path: join(sandbox, "a.txt") } })],
];
// rounds in a fresh random order each (seeded), after a warm-up
let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const times = paths.map(() => []);
for (let round = -20; round < N; round++) {
  const order = paths.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const k = Math.floor(rand() * (i + 1));
    [order[i], order[k]] = [order[k], order[i]];
  }
  for (const p of order) {
    const t0 = process.hrtime.bigint();
    await paths[p][1]();
    if (round >= 0) times[p].push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
}
const stats = times.map((t) => {
  t.sort((a, b) => a - b);
  const q = (x) => t[Math.min(t.length - 1, Math.floor(x * t.length))];
  return [q(0.5), q(0.99)];
});
console.log("| call | median | p99 |\n|---|---|---|");
paths.forEach(([name], i) =>
  console.log(`| ${name} | ${stats[i][0].toFixed(3)} ms | ${stats[i][1].toFixed(3)} ms |`));
console.log(`\n${N} rounds; pi binding over pi's local read (median): ${(stats[1][0] - stats[0][0]).toFixed(3)} ms`);
await sb.close();
mcp.stdin.end();
process.exit(0);
