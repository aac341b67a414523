#!/usr/bin/env node
// The TypeScript SDK's Workspace against the shared table tests/vectors/workspace/cases.json;
// the same checks as test_workspace.py.
//
// usage: node test_workspace.mjs SDK_DIR CASES_JSON
import * as fs from "node:fs";
import { pathToFileURL } from "node:url";
import { report, finish } from "./tap.mjs";

const [sdk, casesFile] = process.argv.slice(2);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const config = await import(pathToFileURL(`${sdk}/dist/config.js`).href);
const cases = JSON.parse(fs.readFileSync(casesFile, "utf8"));
const eq = (got, want, name) =>
  report(JSON.stringify(got) === JSON.stringify(want), name, `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);

for (const [path, want] of cases.normalize) eq(asp.normalizePath(path), want, `normalizePath(${JSON.stringify(path)})`);

for (const m of cases.maps) {
  const w = new asp.Workspace(m.local, m.sandbox);
  const label = `Workspace(${m.local}, ${m.sandbox})`;
  eq([w.local, w.sandbox], m.normal, `${label} directories`);
  for (const [path, base, want] of m.to_sandbox)
    eq(w.toSandbox(path, base ?? undefined), want, `${label}.toSandbox(${path}, ${base})`);
  for (const [path, want] of m.to_local) eq(w.toLocal(path), want, `${label}.toLocal(${path})`);
}

for (const b of cases.bad) {
  let msg = "no error";
  try {
    new asp.Workspace(b.local, b.sandbox);
  } catch (e) {
    msg = e.message;
  }
  report(msg.includes(b.message), `Workspace(${b.local}, ${b.sandbox}) refused`, msg);
}

for (const c of cases.from_config) {
  const cfg = config.parseConfig(new TextEncoder().encode(JSON.stringify(c.config)), c.file ?? undefined);
  let got;
  try {
    const w = asp.Workspace.fromConfig(cfg, c.start_dir ?? undefined);
    got = w === undefined ? null : { local: w.local, sandbox: w.sandbox };
  } catch (e) {
    got = { message: e.message };
  }
  if (c.none) eq(got, null, `fromConfig: ${c.name}`);
  else if (c.message !== undefined)
    report(typeof got?.message === "string" && got.message.includes(c.message), `fromConfig: ${c.name}`, JSON.stringify(got));
  else eq(got, { local: c.local, sandbox: c.sandbox }, `fromConfig: ${c.name}`);
}
finish();
