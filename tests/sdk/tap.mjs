// The TAP-like lines and the tally the TypeScript SDK tests share, starting a listening
// agent and stopping a process.
import { spawn } from "node:child_process";
import fs from "node:fs";
let passed = 0,
  failed = 0;

export function report(ok, name, detail = "") {
  if (ok) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    console.log(`FAIL - ${name} ${detail}`);
  }
}

/** Runs `fn`; a throw (with its stack) is a failure of `what`. */
export async function test(what, fn) {
  try {
    await fn();
    report(true, what);
  } catch (e) {
    report(false, `${what}:`, `${e?.stack ?? e}`);
  }
}

/** [code or "ok", message, milliseconds] of one call. */
export async function attempt(fn) {
  const t0 = performance.now();
  try {
    await fn();
    return ["ok", "", performance.now() - t0];
  } catch (e) {
    return [e.code, e.message, performance.now() - t0];
  }
}

function stopped(pid) {
  let tids;
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return false;
  }
  const states = [];
  for (const tid of tids) {
    try {
      states.push(fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, "latin1").split(")").pop()[1]);
    } catch {
      // a thread that just exited
    }
  }
  return states.length > 0 && states.every((s) => s === "T" || s === "t");
}

/**
 * SIGSTOP to `pid`, resolving once every thread has stopped: kill() returns when the
 * signal is queued, and a thread not yet reached can still answer a request.
 */
export async function stopProcess(pid, ms = 10000) {
  process.kill(pid, "SIGSTOP");
  const end = performance.now() + ms;
  while (!stopped(pid)) {
    if (performance.now() > end) throw new Error(`process ${pid} did not stop within ${ms} ms of SIGSTOP`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/**
 * `asp-agent --listen 127.0.0.1:0` and its URL, read from the line it logs (the kernel
 * picks the port, so no other test takes it first); null when the agent was built without
 * HTTP support. Exits 1 when it does not come up within 60 s.
 */
export async function startListener(agent) {
  const p = spawn(agent, ["--listen", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const url = await new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), 60000);
    p.stderr.on("data", (d) => {
      log += d;
      process.stderr.write(d);
      const m = /^asp-agent: listening on (http:\/\/\S+)/m.exec(log);
      if (m) {
        clearTimeout(t);
        resolve(m[1]);
      }
    });
    p.on("exit", () => {
      clearTimeout(t);
      resolve(null);
    });
  });
  if (url) return [p, url];
  p.kill("SIGKILL");
  if (log.includes("not built with HTTP support")) return null;
  console.log(`the agent did not start within 60 s: ${log}`);
  process.exit(1);
}

/** The closing line; the exit code says whether anything failed. */
export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}
