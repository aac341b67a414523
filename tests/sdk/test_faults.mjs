#!/usr/bin/env node
// Fault injection through the TypeScript SDK's stdio client (docs/faults.md); the same
// checks as test_faults.py: a SIGSTOPped asp-agent, a wedged responder, one answering
// the wrong id, one answering garbage. Nothing hangs; the next call reconnects.
//
// usage: node test_faults.mjs SDK_DIR AGENT
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { report, attempt, finish, stopProcess } from "./tap.mjs";

const [sdk, agent] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const fake = path.join(path.dirname(fileURLToPath(import.meta.url)), "fake_responder.py");

async function readPid(file, old = 0) {
  const end = performance.now() + 10000;
  while (performance.now() < end) {
    try {
      const pid = Number(fs.readFileSync(file, "utf8").trim() || 0);
      if (pid && pid !== old) return pid;
    } catch {
      // not written yet
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  return 0;
}

function signal(pid, sig) {
  try {
    process.kill(pid, sig);
  } catch {
    // the client killed it already
  }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "asp-faults-"));
const pidfile = path.join(tmp, "pid");
let c = await asp.Client.stdio(["/bin/sh", "-c", `echo $$ > ${pidfile}; exec ${agent} --stdio`], { call_timeout_ms: 300 });
await c.hello();
let pid = await readPid(pidfile);
await stopProcess(pid);
let [code, msg, took] = await attempt(() => c.stat({ path: "/" }));
report(code === "timeout" && took >= 250 && took < 5000 && msg.includes("stat") && msg.includes("300 ms"),
  "a stopped agent: the call fails with timeout naming the op and the limit", JSON.stringify([code, msg, took]));
[code, msg, took] = await attempt(() => c.stat({ path: "/" }));
report(code === "transport_error" && took < 8000 && msg.includes("second missed deadline"),
  "a second missed deadline closes the connection", JSON.stringify([code, msg, took]));
signal(pid, "SIGCONT");
[code, msg] = await attempt(() => c.stat({ path: "/" }));
const pid2 = await readPid(pidfile, pid);
report(code === "ok" && pid2 && pid2 !== pid, "the next call starts a new agent", JSON.stringify([code, msg]));
pid = pid2;

[code, msg] = await attempt(() => c.exec({ command: "sleep 0.8" }));
report(code === "ok", "an exec without a timeout outlives call_timeout_ms", JSON.stringify([code, msg]));
const pending = attempt(() => c.exec({ command: "sleep 30" }));
await stopProcess(pid); // before or after the exec arrives: the probe goes unanswered
[code, msg] = await pending;
report(code === "transport_error" && msg.includes("liveness probe"),
  "an exec on a stopped agent ends when the probe is not answered", JSON.stringify([code, msg]));
signal(pid, "SIGCONT");
await c.close();

for (const [mode, want] of [["wrongid", "no call is waiting for"], ["garbage", "bad message"]]) {
  c = await asp.Client.stdio(["/usr/bin/python3", fake, path.join(tmp, `counter-${mode}`), mode]);
  await c.hello(); // answered: the fake misbehaves at the first other request
  [code, msg, took] = await attempt(() => c.stat({ path: "/" }));
  report(code === "protocol_error" && took < 5000 && msg.includes(want),
    `${mode}: the call fails with protocol_error at once, saying why`, JSON.stringify([code, msg]));
  [code, msg] = await attempt(() => c.stat({ path: "/" }));
  report(code === "unsupported", `${mode}: the next call reconnects`, JSON.stringify([code, msg]));
  await c.close();
}

c = await asp.Client.stdio(["/usr/bin/python3", fake, path.join(tmp, "counter-silent"), "silent"], { call_timeout_ms: 200 });
[code, msg, took] = await attempt(() => c.stat({ path: "/" }));
report(code === "timeout" && took < 5000, "a wedged responder: timeout", JSON.stringify([code, msg]));
await c.close();
fs.rmSync(tmp, { recursive: true, force: true });

finish();
