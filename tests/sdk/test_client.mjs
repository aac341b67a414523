#!/usr/bin/env node
// The TypeScript client beyond the op semantics; the same checks as test_client.py.
// usage: node test_client.mjs SDK_DIR AGENT
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { test, finish } from "./tap.mjs";

const [sdk, agentArg] = process.argv.slice(2);
const agent = path.resolve(agentArg);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const wire = await import(pathToFileURL(`${sdk}/dist/wire.js`).href);
const dec = new TextDecoder();


function assert(cond, msg = "assertion failed") {
  if (!cond) throw new Error(msg);
}

async function expectError(code, p) {
  try {
    await p;
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    assert(e.code === code, `expected ${code}, got ${e.code}: ${e.message}`);
    return e;
  }
  throw new Error(`expected ${code}, got ok`);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "asp-sdk-client-ts-"));
const work = path.join(tmp, "work");
fs.mkdirSync(work);
const cfg = path.join(tmp, ".asp.json");
fs.writeFileSync(
  cfg,
  JSON.stringify({
    version: 1, transport: "stdio", cwd: work, env: { ASP_T: "from-config", ASP_U: "u" },
    timeout_ms: 300, stdio: { command: [agent, "--stdio"] },
  }),
);

await test("fromConfig: cwd, relative paths, env merged under the call's, timeout default", async () => {
  const c = await asp.Client.fromConfig(cfg);
  try {
    assert(c.config.path === cfg && c.cwd === work);
    let r = await c.exec({ command: "pwd; printf '%s %s' \"$ASP_T\" \"$ASP_U\"", env: { ASP_T: "call" } });
    assert(dec.decode(r.stdout) === `${work}\ncall u`, dec.decode(r.stdout));
    await c.write({ path: "rel.txt", data: "relative" });
    assert(fs.readFileSync(path.join(work, "rel.txt"), "utf8") === "relative");
    assert(dec.decode((await c.read({ path: "rel.txt" })).data) === "relative");
    assert((await c.stat({ path: "./rel.txt" })).size === 8);
    await c.mkdir({ path: "sub" });
    r = await c.exec({ argv: ["pwd"], cwd: "sub" });
    assert(dec.decode(r.stdout) === `${work}/sub\n`, dec.decode(r.stdout));
    r = await c.exec({ command: "sleep 5" });
    assert(r.timed_out, "the config's timeout_ms did not apply");
    r = await c.exec({ command: "sleep 0.5; echo done", timeout_ms: 5000 });
    assert(!r.timed_out && dec.decode(r.stdout) === "done\n");
    assert((await c.list({ path: "." })).entries[0].name === "rel.txt");
  } finally {
    await c.close();
  }
});

await test("glob, grep, edit (protocol 2): the generated methods against asp-agent", async () => {
  const c = await asp.Client.fromConfig(cfg);
  try {
    await c.mkdir({ path: "srch" });
    await c.write({ path: "srch/a.c", data: "int a;\nint b;\n" });
    await c.write({ path: "srch/b.h", data: "int a;\n" });
    const a = `${work}/srch/a.c`, b = `${work}/srch/b.h`;
    const g = await c.glob({ path: "srch", pattern: "*.c" }); // relative: against the config's cwd
    assert(JSON.stringify(g.paths) === JSON.stringify([a]) && !g.truncated, JSON.stringify(g));
    let r = await c.grep({ path: "srch", regex: "\\bint\\s+a\\b", mode: "content" });
    const got = r.matches.map((m) => `${m.path}:${m.line}:${m.text}`).join("|");
    assert(got === `${a}:1:int a;|${b}:1:int a;`, got);
    r = await c.grep({ path: "srch", regex: "int", mode: "count" });
    const counts = r.counts.map((n) => `${n.path}:${n.count}`).join("|");
    assert(counts === `${a}:2|${b}:1`, counts);
    const amb = await expectError("invalid_argument", c.edit({ path: "srch/a.c", old: "int", new: "long" }));
    assert(/2/.test(amb.message), amb.message);
    const e = await c.edit({ path: "srch/a.c", old: "int", new: "long", replace_all: true });
    assert(Number(e.replacements) === 2, JSON.stringify(e));
    assert(fs.readFileSync(path.join(work, "srch/a.c"), "utf8") === "long a;\nlong b;\n");
    await expectError("not_found", c.edit({ path: "srch/a.c", old: "int", new: "x" }));
  } finally {
    await c.close();
  }
});

await test("fromConfig(): .asp.json found in a parent of the working directory", async () => {
  const old = process.cwd();
  const saved = process.env.ASP_CONFIG;
  delete process.env.ASP_CONFIG;
  try {
    process.chdir(work);
    const c = await asp.Client.fromConfig();
    assert(c.config.path === cfg, c.config.path);
    assert((await c.hello()).protocol === 2);
    await c.close();
  } finally {
    process.chdir(old);
    if (saved !== undefined) process.env.ASP_CONFIG = saved;
  }
});

await test("fromConfig: an ssh config is unsupported, naming the transport and what to use", async () => {
  const p = path.join(tmp, "ssh.json");
  fs.writeFileSync(p, '{"version": 1, "transport": "ssh", "ssh": {"host": "box"}}');
  const e = await expectError("unsupported", asp.Client.fromConfig(p));
  assert(e.message === `${p}: the TypeScript SDK cannot serve transport ssh; use the asp CLI or the C library`, e.message);
});

await test("fromConfig: a bad file is invalid_argument with FILE:LINE:COL: KEY: ...", async () => {
  const p = path.join(tmp, "bad.json");
  fs.writeFileSync(p, '{"version": 1,\n "transport": "stdio", "stdio": {"command": "asp-agent"}}');
  const e = await expectError("invalid_argument", asp.Client.fromConfig(p));
  assert(e.message === `${p}:2:45: stdio.command: expected a non-empty array of strings, got "asp-agent"`, e.message);
});

await test("fromConfig: http with an unset token_env says which variable", async () => {
  const p = path.join(tmp, "http.json");
  fs.writeFileSync(p, '{"version": 1, "transport": "http", "http": {"url": "http://127.0.0.1:9", "token_env": "ASP_SDK_TEST_NO_SUCH_VAR"}}');
  const e = await expectError("not_found", asp.Client.fromConfig(p));
  assert(e.message.includes("ASP_SDK_TEST_NO_SUCH_VAR"), e.message);
});

await test("http: nothing listening is transport_error, promptly, for POST and the WebSocket; websocket false: spawn unsupported, naming the key", async () => {
  let c = asp.Client.http("http://127.0.0.1:9");
  await expectError("transport_error", c.hello());
  let e = await expectError("transport_error", c.spawn({ argv: ["true"] }));
  assert(e.message.includes("http://127.0.0.1:9"), e.message);
  await c.close();
  c = asp.Client.http("http://127.0.0.1:9", undefined, { websocket: false });
  e = await expectError("unsupported", c.spawn({ argv: ["true"] }));
  assert(e.message.includes("http.websocket"), e.message);
  await c.close();
});

await test("arguments are checked before sending, naming the field as the responder would", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    let e = await expectError("invalid_argument", c.read({ path: 5 }));
    assert(e.message === "read params: field 'path': expected str, got uint", e.message);
    e = await expectError("invalid_argument", c.read({ path: "/x", offset: -1 }));
    assert(e.message === "read params: field 'offset': expected uint, got negative int", e.message);
    e = await expectError("invalid_argument", c.exec({ command: "a", argv: ["b"] }));
    assert(e.message === "exec params: give exactly one of fields 'command' and 'argv'");
    e = await expectError("invalid_argument", c.exec({ argv: ["a", 1] }));
    assert(e.message === "exec params: field 'argv' item: expected str, got uint", e.message);
    e = await expectError("invalid_argument", c.exec({ comand: "x" }));
    assert(e.message.startsWith("exec params: unknown field 'comand'"), e.message);
    e = await expectError("not_found", c.rename({ from: path.join(tmp, "nope"), to: `${tmp}/x` }));
    assert(e.message.includes("nope"), e.message);
  } finally {
    await c.close();
  }
});

await test("paths are raw bytes: Uint8Array and U+DCxx-escaped strings name the same file", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    const dir = path.join(tmp, "raw");
    const name = Buffer.concat([Buffer.from(`${dir}/`), Buffer.from([0xff, 0xfe]), Buffer.from(".txt")]);
    await c.write({ path: new Uint8Array(name), data: "x", mkdirs: true });
    const e = (await c.list({ path: dir })).entries[0];
    assert(e.name === "\udcff\udcfe.txt", JSON.stringify(e.name));
    assert(fs.existsSync(name));
    assert(dec.decode((await c.read({ path: `${dir}/\udcff\udcfe.txt` })).data) === "x");
  } finally {
    await c.close();
  }
});

await test("close: later calls are transport_error", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  await c.hello();
  await c.close();
  await expectError("transport_error", c.hello());
  await c.close(); // twice is fine
});

await test("pipelined: 16 callers x 20 calls on one client, every answer to its caller", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  const bad = [];
  await Promise.all(
    Array.from({ length: 16 }, async (_, i) => {
      for (let j = 0; j < 20; j++) {
        const want = `${i}-${j}`;
        const r = await c.exec({ argv: ["printf", "%s", want] });
        if (dec.decode(r.stdout) !== want) bad.push([want, dec.decode(r.stdout)]);
      }
    }),
  );
  await c.close();
  assert(!bad.length, JSON.stringify(bad.slice(0, 3)));
});

await test("spawn: an async iterator of output chunks then the exit (or unsupported before it lands)", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    if (!(await c.hello()).ops.includes("spawn")) {
      await expectError("unsupported", c.spawn({ argv: ["true"] }));
      console.log("# spawn is not in this responder's ops yet: checked it is unsupported");
      return;
    }
    let p = await c.spawn({ argv: ["sh", "-c", "echo a; echo b >&2; sleep 0.2; echo c; exit 3"], tag: "t" });
    assert(p.proc === p.result.proc);
    let { stdout, stderr, exit } = await p.collect();
    assert(dec.decode(stdout) === "a\nc\n" && dec.decode(stderr) === "b\n", dec.decode(stdout));
    assert(exit.event === "exit" && exit.exit_code === 3 && exit.signal === null && !exit.timed_out);
    p = await c.spawn({ command: "cat" });
    await p.write("hello ");
    await p.write("there", true);
    ({ stdout, exit } = await p.collect());
    assert(dec.decode(stdout) === "hello there" && exit.exit_code === 0);
    p = await c.spawn({ command: "sleep 30" });
    // nextEvent with a timeout: "timeout" when nothing comes, and the process still followed
    const t0 = Date.now();
    const late = await expectError("timeout", p.nextEvent(200));
    assert(Date.now() - t0 >= 190 && late.message.includes(`process ${p.proc}`), late.message);
    await p.signal("KILL");
    const ev = await p.nextEvent(20000);
    assert(ev.event === "exit" && ev.signal === "KILL" && (await p.nextEvent(10)) === undefined);
    p = await c.spawn({ command: "sleep 30" });
    await p.signal("KILL");
    const evs = [];
    for await (const ev of p) evs.push(ev);
    assert(evs[evs.length - 1].signal === "KILL", JSON.stringify(evs));
    assert((await c.proc_list()).procs.some((x) => x.proc === p.proc));
  } finally {
    await c.close();
  }
});

await test("hello: asked once per connection, again after a reconnect (the wire shows it)", async () => {
  // The agent reads its requests through tee, so the log holds every request frame.
  const log = path.join(tmp, "hello.log"), pidf = path.join(tmp, "hello.pid");
  const sh = `sh -c 'echo $$ > "${pidf}.tee"; exec tee -a "${log}"' | sh -c 'echo $$ > "${pidf}"; exec "${agent}" --stdio'`;
  const methods = () => {
    const data = fs.readFileSync(log), out = [];
    for (let at = 0; at + 4 <= data.length; ) {
      const n = data.readUInt32BE(at);
      if (at + 4 + n > data.length) break;
      out.push(wire.decodeMessage(data.subarray(at + 4, at + 4 + n)).method);
      at += 4 + n;
    }
    return out;
  };
  const waitFor = async (cond, what) => {
    for (const end = Date.now() + 10000; !(await cond()); await new Promise((r) => setTimeout(r, 10)))
      assert(Date.now() < end, `no ${what} within 10 s`);
  };
  const c = await asp.Client.stdio(["/bin/sh", "-c", sh]);
  try {
    const first = await c.hello();
    assert((await c.hello()).protocol === first.protocol);
    await c.stat({ path: "/" });
    await c.hello();
    await waitFor(() => methods().join() === "hello,stat", "hello then stat");
    const pid = Number(fs.readFileSync(pidf, "utf8"));
    // Both: a tee alone would keep taking requests for an agent that is gone.
    for (const p of [pidf, `${pidf}.tee`]) process.kill(Number(fs.readFileSync(p, "utf8")), "SIGKILL");
    await waitFor(async () => {
      try {
        await c.stat({ path: "/" });
      } catch (e) {
        if (!(e instanceof asp.AspError) || e.code !== "transport_error") throw e;
        return false;
      }
      return ![0, pid].includes(Number(fs.readFileSync(pidf, "utf8") || 0));
    }, "reconnect");
    await c.hello();
    await c.hello();
    await waitFor(() => methods().filter((m) => m === "hello").length === 2, "a second hello");
  } finally {
    await c.close();
  }
});

await test("spawn/proc_attach against a scripted responder: order, routing by proc, the exit", async () => {
  const fake = path.join(path.dirname(new URL(import.meta.url).pathname), "fake_responder.py");
  const c = await asp.Client.stdio(["/usr/bin/python3", fake, path.join(tmp, "n"), "ok"]);
  try {
    const p = await c.spawn({ argv: ["x"] });
    assert(p.proc === 7 && p.result.proc === 7);
    const evs = [];
    for await (const ev of p) evs.push(ev);
    assert(evs.map((e) => e.event).join() === "output,output,output,exit", JSON.stringify(evs));
    assert(evs.slice(0, 3).map((e) => dec.decode(e.data)).join("") === "one\nerr\ntwo\n");
    assert(evs[0].truncated_before === undefined && evs[1].stream === "stderr");
    assert(p.exit === evs[3] && p.exit.signal === "TERM" && p.exit.timed_out && p.exit.exit_code === -1);
    assert((await p.next()).done);
    const a = await c.proc_attach({ proc: 7, stdout_offset: 3 });
    const { stdout, stderr, exit } = await a.collect();
    assert(dec.decode(stdout) === "one\ntwo\n" && dec.decode(stderr) === "err\n" && exit.timed_out);
  } finally {
    await c.close();
  }
});

await test("integers beyond 32 bits go as msgpack integers and come back exact", async () => {
  const c = await asp.Client.stdio([agent, "--stdio"]);
  try {
    const big = 2 ** 32 + 5;
    const name = path.join(tmp, "sparse");
    await c.write({ path: name, data: "tail", offset: big });
    assert((await c.stat({ path: name })).size === big + 4);
    let r = await c.read({ path: name, offset: big });
    assert(dec.decode(r.data) === "tail" && r.size === big + 4 && r.eof, JSON.stringify([r.size, r.eof]));
    r = await c.read({ path: name, offset: BigInt(big) });
    assert(dec.decode(r.data) === "tail");
    r = await c.read({ path: name, offset: Number.MAX_SAFE_INTEGER });
    assert(r.data.length === 0 && r.size === big + 4);
    r = await c.read({ path: name, offset: 2n ** 60n + 1n });
    assert(r.data.length === 0);
    // Nanoseconds since 1970 are above 2^53: a bigint, every digit kept.
    await c.exec({ argv: ["touch", "-d", "@1577934245.123456789", name] });
    const s = await c.stat({ path: name });
    assert(s.mtime_ns === 1577934245123456789n, `mtime_ns ${s.mtime_ns} (${typeof s.mtime_ns})`);
    const l = await c.list({ path: tmp });
    assert(l.entries.find((e) => e.name === "sparse").mtime_ns === 1577934245123456789n);
    // A deadline past 2^31 ms (Node would run such a timer at once).
    assert((await c.exec({ command: "sleep 0.3", timeout_ms: 2 ** 33 })).exit_code === 0);
    await expectError("not_found", c.proc_wait({ proc: 2 ** 40 + 1 }));
    await expectError("not_found", c.proc_wait({ proc: 2n ** 40n + 1n }));
    fs.unlinkSync(name);
  } finally {
    await c.close();
  }
});

fs.rmSync(tmp, { recursive: true, force: true });
finish();
