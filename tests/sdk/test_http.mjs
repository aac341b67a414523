#!/usr/bin/env node
// The TypeScript SDK's HTTP client against a listener that wants a token; the same
// checks as test_http.py. usage: node test_http.mjs SDK_DIR URL TOKEN
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { test as check, finish } from "./tap.mjs";

const [sdk, url, token] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const dec = new TextDecoder();
const assert = (c, m = "assertion failed") => {
  if (!c) throw new Error(m);
};
async function codeOf(p) {
  try {
    await p;
  } catch (e) {
    return e.code;
  }
  return "ok";
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "asp-sdk-http-"));

await check("bearer token accepted", async () => {
  const c = asp.Client.http(url, token);
  assert((await c.hello()).protocol === 2);
  assert(dec.decode((await c.exec({ argv: ["printf", "hi"] })).stdout) === "hi");
  await c.close();
});
await check("a wrong or missing token is unauthorized", async () => {
  assert((await codeOf(asp.Client.http(url, "nope").hello())) === "unauthorized");
  assert((await codeOf(asp.Client.http(url).hello())) === "unauthorized");
});
await check("fromConfig: token from token_env, cwd applied", async () => {
  const p = path.join(tmp, "env.json");
  fs.writeFileSync(p, JSON.stringify({ version: 1, transport: "http", cwd: tmp, http: { url, token_env: "ASP_SDK_TEST_TOKEN" } }));
  process.env.ASP_SDK_TEST_TOKEN = token;
  const c = await asp.Client.fromConfig(p);
  await c.write({ path: "f.txt", data: "over http" });
  assert(fs.readFileSync(path.join(tmp, "f.txt"), "utf8") === "over http");
  await c.close();
});
await check("fromConfig: token from token_file (one newline stripped); websocket false: spawn unsupported", async () => {
  fs.writeFileSync(path.join(tmp, "token"), `${token}\n`);
  const p = path.join(tmp, "file.json");
  fs.writeFileSync(p, JSON.stringify({ version: 1, transport: "http", http: { url, token_file: "token", websocket: false } }));
  const c = await asp.Client.fromConfig(p);
  assert(dec.decode((await c.read({ path: path.join(tmp, "f.txt") })).data) === "over http");
  assert((await codeOf(c.spawn({ argv: ["true"] }))) === "unsupported");
  await c.close();
});
await check("80 overlapping calls on one HTTP client", async () => {
  const c = asp.Client.http(url, token);
  const rs = await Promise.all(Array.from({ length: 80 }, (_, i) => c.exec({ argv: ["printf", `${i}`] })));
  assert(rs.every((r, i) => dec.decode(r.stdout) === `${i}`));
  await c.close();
});
await check("40 calls in flight that wait for one another (a tree_write's pieces, last first)", async () => {
  // Each piece waits at its offset for the ones before it while it holds a connection: a
  // client capped at a few sockets would queue the first pieces behind the waiting ones.
  const tar = await import(pathToFileURL(`${sdk}/dist/tar.js`).href);
  const body = new Uint8Array(20480).map((_, i) => i & 255);
  const stream = Buffer.concat([tar.tarHeader({ type: "file", path: "f", mode: 0o644, mtime: 0, size: body.length }), body, tar.END]);
  const cut = Array.from({ length: 41 }, (_, i) => Math.floor((stream.length * i) / 40));
  const c = asp.Client.http(url, token);
  const r = await c.tree_write({ path: path.join(tmp, "tree") });
  const piece = (i) => c.proc_write({ proc: r.proc, data: stream.subarray(cut[i], cut[i + 1]), offset: cut[i], eof: i === 39 });
  await Promise.all(Array.from({ length: 40 }, (_, k) => piece(39 - k)));
  const w = await c.proc_wait({ proc: r.proc, timeout_ms: 30000 });
  assert(w.exit_code === 0 && w.entries === 1, JSON.stringify(w));
  assert(Buffer.compare(fs.readFileSync(path.join(tmp, "tree", "f")), Buffer.from(body)) === 0, "the file differs");
  await c.close();
});
fs.rmSync(tmp, { recursive: true, force: true });
finish();
