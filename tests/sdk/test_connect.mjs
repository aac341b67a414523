#!/usr/bin/env node
// The TypeScript SDK's connections (connect as a Node.js Duplex) against a real asp-agent
// over stdio, to an echo server on loopback; the same checks as test_connect.py.
// usage: node test_connect.mjs SDK_DIR AGENT
import * as crypto from "node:crypto";
import * as net from "node:net";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { test, finish } from "./tap.mjs";

const [sdk, agentArg] = process.argv.slice(2);
const agent = path.resolve(agentArg);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);

function assert(cond, msg = "assertion failed") {
  if (!cond) throw new Error(msg);
}

const echo = net.createServer((s) => {
  s.on("error", () => {}); // destroy() resets: the server sees ECONNRESET
  s.pipe(s);
});
await new Promise((r) => echo.listen(0, "127.0.0.1", r));
const port = echo.address().port;
const refused = net.createServer();
await new Promise((r) => refused.listen(0, "127.0.0.1", r));
const refusedPort = refused.address().port;
await new Promise((r) => refused.close(r)); // nothing listens there any more

const data = crypto.randomBytes(3 << 20);
const digest = crypto.createHash("sha256").update(data).digest("hex");

await test("a Duplex: 3 MiB echoed intact, end() half-closes, 'end' after the peer's", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    const conn = await c.openConnection(port);
    const h = crypto.createHash("sha256");
    let n = 0;
    const done = new Promise((resolve, reject) => {
      conn.on("data", (d) => {
        h.update(d);
        n += d.length;
      });
      conn.on("end", resolve);
      conn.on("error", reject);
    });
    conn.end(data);
    await done;
    assert(n === data.length && h.digest("hex") === digest, `${n} bytes came`);
  } finally {
    await c.close();
  }
});

await test("a refused port rejects with io_error naming it", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    await c.openConnection(refusedPort);
    throw new Error("expected a refusal");
  } catch (e) {
    assert(e instanceof asp.AspError && e.code === "io_error" && /refused/.test(e.message), String(e));
  } finally {
    await c.close();
  }
});

await test("destroy() resets the connection (exit by KILL)", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    const conn = await c.openConnection(port);
    conn.write("ping");
    const first = await new Promise((r) => conn.once("data", r));
    assert(String(first) === "ping", `got ${first}`);
    await new Promise((r) => conn.destroy() && conn.once("close", r));
    const w = await c.proc_wait({ proc: conn.proc, timeout_ms: 15000 });
    assert(w.signal === "KILL", `signal ${w.signal}`);
  } finally {
    await c.close();
  }
});

echo.close();
finish();
