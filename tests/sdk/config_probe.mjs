#!/usr/bin/env node
// What the TypeScript SDK makes of a .asp.json, printed as config_probe.c prints the C
// core's. usage: node config_probe.mjs SDK_DIR [FILE]
//                node config_probe.mjs SDK_DIR --batch  (jobs on stdin, as config_probe.py)
import * as fs from "node:fs";
import { pathToFileURL } from "node:url";

const [sdk, file] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const SSH_KEYS = ["host", "port", "user", "identity_file", "identity_env", "password_env",
  "known_hosts", "host_key_sha256", "host_key", "strict_host_key_checking",
  "connect_timeout_ms", "agent"];
// the SDK's JSON (Maps, bigints) as plain JSON
const plain = (x) =>
  x instanceof Map ? Object.fromEntries([...x].map(([k, y]) => [k, plain(y)]))
    : Array.isArray(x) ? x.map(plain) : typeof x === "bigint" ? Number(x) : x;
function probe(file) {
let out;
try {
  const v = asp.Client.loadConfig(file);
  const ssh = {};
  for (const k of SSH_KEYS) ssh[k] = v.ssh[k] ?? null;
  ssh.port = ssh.port ?? 0;
  ssh.connect_timeout_ms = ssh.connect_timeout_ms ?? 0;
  ssh.strict_host_key_checking = v.ssh.strict_host_key_checking ?? false;
  out = {
    view: {
      path: v.path ?? null, transport: v.transport, cwd: v.cwd ?? null, env: v.env,
      timeout_ms: v.timeout_ms, call_timeout_ms: v.call_timeout_ms, ssh, stdio: { command: v.stdio.command ?? null },
      http: { url: v.http.url ?? null, token_env: v.http.token_env ?? null, token_file: v.http.token_file ?? null,
        ca_file: v.http.ca_file ?? null, websocket: v.http.websocket ?? null,
        headers: v.http.headers.map((h) => [h.name, h.value ?? null, h.env ?? null]) },
      document: plain(v.document),
    },
  };
} catch (e) {
  if (!(e instanceof asp.AspError)) throw e;
  out = { code: e.code, message: e.message, path: e.path ?? null };
}
return out;
}

let out;
if (file === "--batch") {
  out = [];
  for (const job of JSON.parse(fs.readFileSync(0, "utf8"))) {
    process.chdir(job.cwd);
    for (const k of Object.keys(process.env)) delete process.env[k];
    Object.assign(process.env, job.env);
    out.push(probe(job.args[0]));
  }
} else out = probe(file);
// sorted keys, ASCII only: the same text as the C probe's and the Python one's
const sortKeys = (x) =>
  Array.isArray(x) ? x.map(sortKeys) : x && typeof x === "object"
    ? Object.fromEntries(Object.keys(x).sort().map((k) => [k, sortKeys(x[k])])) : x;
console.log(JSON.stringify(sortKeys(out)).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")));
