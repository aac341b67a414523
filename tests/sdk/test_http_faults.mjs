#!/usr/bin/env node
// The TypeScript SDK's HTTP client keeps the deadlines of docs/faults.md against a real
// `asp-agent --listen` on loopback that is SIGSTOPped; the same checks as
// test_http_faults.py: a call fails with timeout naming the op and the limit, exec's limit
// is its timeout_ms + call_timeout_ms, an exec without one is probed with hello
// (answered: it waits on; unanswered: transport_error), and after SIGCONT calls work
// again. Exits 77 when the agent has no HTTP support.
//
// usage: node test_http_faults.mjs SDK_DIR AGENT
import { pathToFileURL } from "node:url";
import { report, attempt, finish, startListener, stopProcess } from "./tap.mjs";

const [sdk, agent] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const LIMIT_MS = 300;

/** A call bounded by the test itself, so a client that hangs fails instead of waiting. */
function bounded(p, ms = 15000) {
  let t;
  const guard = new Promise((_, reject) => {
    t = setTimeout(() => reject(Object.assign(new Error(`still waiting after ${ms} ms`), { code: "hung" })), ms);
  });
  return Promise.race([p, guard]).finally(() => clearTimeout(t));
}

const started = await startListener(agent);
if (!started) {
  console.log("asp-agent --listen is not available");
  process.exit(77);
}
const [listener, url] = started;
let exited = listener.exitCode !== null;
listener.on("exit", () => (exited = true));

/** fn() while the agent is stopped; it continues whatever happens. */
async function stopped(fn) {
  await stopProcess(listener.pid);
  try {
    return await fn();
  } finally {
    listener.kill("SIGCONT");
  }
}

try {
  const c = asp.Client.http(url, undefined, { call_timeout_ms: LIMIT_MS });
  let [code, msg, took] = await attempt(() => bounded(c.stat({ path: "/" })));
  report(code === "ok", "a call answered in time", JSON.stringify([code, msg]));
  [code, msg] = await attempt(() => bounded(c.hello()));
  report(code === "ok", "hello answered", JSON.stringify([code, msg]));
  [code, msg] = await stopped(() => attempt(() => bounded(c.hello())));
  report(code === "ok", "hello again is answered from the cache, agent stopped", JSON.stringify([code, msg]));
  [code, msg] = await attempt(() => bounded(c.exec({ command: "sleep 0.8" })));
  report(code === "ok", "an exec without timeout outlives call_timeout_ms (probes answered)", JSON.stringify([code, msg]));
  [code, msg] = await attempt(() => bounded(c.exec({ command: "sleep 0.5", timeout_ms: 2 ** 33 })));
  report(code === "ok", "an exec whose deadline is past 2^31 ms waits for its answer", JSON.stringify([code, msg]));
  [code, msg, took] = await stopped(() => attempt(() => bounded(c.stat({ path: "/" }))));
  report(code === "timeout" && took >= 250 && took < 5000 && msg.includes("stat") && msg.includes("300 ms"),
    "a stopped agent: timeout naming the op and the limit", JSON.stringify([code, msg, took]));
  [code, msg, took] = await stopped(() => attempt(() => bounded(c.exec({ command: "true", timeout_ms: 200 }))));
  report(code === "timeout" && took >= 450 && took < 6000 && msg.includes("exec") && msg.includes("500 ms") && msg.includes("timeout_ms 200"),
    "exec's limit is its timeout_ms + call_timeout_ms", JSON.stringify([code, msg, took]));
  [code, msg, took] = await stopped(() => attempt(() => bounded(c.exec({ command: "sleep 30" }))));
  report(code === "transport_error" && msg.includes("liveness probe") && took < 8000,
    "an exec without timeout on a stopped agent ends when the probe is not answered", JSON.stringify([code, msg, took]));
  [code, msg] = await stopped(() => attempt(() => bounded(c.hello())));
  report(code === "timeout", "after a transport_error hello is asked again", JSON.stringify([code, msg]));
  [code, msg] = await attempt(() => bounded(c.stat({ path: "/" })));
  report(code === "ok", "after SIGCONT calls work again", JSON.stringify([code, msg]));
  const codes = await stopped(() => Promise.all([1, 2, 3, 4].map(() => attempt(() => bounded(c.stat({ path: "/" }))).then((r) => r[0]))));
  report(codes.every((x) => x === "timeout"), "4 concurrent calls each time out", JSON.stringify(codes));
  [code, msg] = await attempt(() => bounded(c.stat({ path: "/" })));
  report(code === "ok", "and then calls work again", JSON.stringify([code, msg]));
  await c.close();

  // The deadline comes from .asp.json as well.
  const fs = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "asp-http-faults-"));
  const cfgPath = path.join(tmp, "asp.json");
  fs.writeFileSync(cfgPath, JSON.stringify({ version: 1, transport: "http", call_timeout_ms: LIMIT_MS, http: { url } }));
  const d = await asp.Client.fromConfig(cfgPath);
  [code, msg, took] = await stopped(() => attempt(() => bounded(d.stat({ path: "/" }))));
  report(code === "timeout" && took < 5000 && msg.includes("300 ms"), "fromConfig: call_timeout_ms from .asp.json", JSON.stringify([code, msg, took]));
  await d.close();
  fs.rmSync(tmp, { recursive: true, force: true });
} finally {
  listener.kill("SIGCONT");
  listener.kill("SIGTERM");
  const t = setTimeout(() => listener.kill("SIGKILL"), 10000);
  if (!exited) await new Promise((r) => listener.once("exit", r));
  clearTimeout(t);
}
finish();
