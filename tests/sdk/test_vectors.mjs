#!/usr/bin/env node
// tests/vectors/ through the TypeScript SDK's decoder and through a live stdio client;
// the same checks as test_vectors.py.
//
// usage: node test_vectors.mjs SDK_DIR VECTORS_DIR
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { report, finish } from "./tap.mjs";

const [sdk, vectors] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const wire = await import(pathToFileURL(`${sdk}/dist/wire.js`).href);
const fake = path.join(path.dirname(fileURLToPath(import.meta.url)), "fake_responder.py");

const files = fs.readdirSync(vectors).filter((f) => f.endsWith(".bin")).sort();
const messages = files.filter((f) => !f.startsWith("frame-"));
const frames = files.filter((f) => f.startsWith("frame-"));

for (const f of messages) {
  const data = new Uint8Array(fs.readFileSync(path.join(vectors, f)));
  const t0 = performance.now();
  let outcome;
  try {
    const m = wire.decodeMessage(data);
    outcome = ["decoded", m.type, m.id];
  } catch (e) {
    outcome = [e.code, e.message];
  }
  const took = performance.now() - t0;
  if (f.startsWith("msg-")) report(outcome[0] === "protocol_error" && took < 5000, `decode ${f}: protocol_error`, JSON.stringify(outcome));
  else {
    const good =
      (outcome[0] === "decoded" && outcome[1] === 0 && outcome[2] === 5) ||
      (outcome[0] === "invalid_argument" && outcome[1].includes("request 5"));
    report(good, `decode ${f}: request 5`, JSON.stringify(outcome));
  }
}

async function live(name, mode, arg, want = "protocol_error", wantText = null) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "asp-vec-"));
  const argv = ["/usr/bin/python3", fake, path.join(tmp, "counter"), mode];
  if (arg) argv.push(arg);
  const c = await asp.Client.stdio(argv);
  const t0 = performance.now();
  let got;
  try {
    await c.hello();
    got = ["ok"];
  } catch (e) {
    got = [e.code, e.message];
  }
  const took = performance.now() - t0;
  const ok = got[0] === want && took < 5000 && (wantText === null || got[1].includes(wantText));
  let again = false;
  try {
    again = (await c.hello()).agent === "fake/1";
  } catch (e) {
    got.push(`then ${e.code}: ${e.message}`);
  }
  await c.close();
  fs.rmSync(tmp, { recursive: true, force: true });
  report(ok && again, `${name}: ${want}, then a fresh responder answers`, JSON.stringify(got));
}

for (const f of messages) await live(`responder sends ${f}`, "vector", path.join(vectors, f));
for (const f of frames)
  await live(`responder writes ${f}`, "raw", path.join(vectors, f), f.includes("truncated") ? "transport_error" : "protocol_error");
await live("frame above max_message", "big");
await live("responder dies", "die", null, "transport_error", "status 3");
await live("responder dies (stderr shown)", "die", null, "transport_error", "dying");
await live("frame cut short", "cut", null, "transport_error");

finish();
