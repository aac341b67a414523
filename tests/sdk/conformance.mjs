#!/usr/bin/env node
// The conformance cases of tests/conformance/cases.c, cases_proc.c (the spawn and proc_
// cases, proc_attach's included) and cases_tree.c (tree_write and tree_read, the hostile
// streams included), run through the generated TypeScript SDK (its built dist/) against a
// real responder: the same names, inputs, expected results and error codes, case for
// case, as conformance.py runs them through the Python SDK.
//
// usage: node conformance.mjs --sdk DIR --table ASP (--stdio ARGV... | --http URL [--token T]
//                             [--websocket true|false] | --config F) [--only SUBSTRING]
//
// The tree cases are the ones ASP (the asp CLI) lists under `asp conformance --list`: its
// table's names, in its order, each run by the body here of that name.
import { execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";

const SAFETY_TIMEOUT_MS = 20000;
// Upper bound on what should take well under a second (a timeout taking effect): generous for a
// starved machine, and still a third of the 30 s the commands would run without it.
const SLOW_MS = 10000;
const MIB = 1024 * 1024;
const enc = new TextEncoder();

let asp; // the SDK module, imported in main()

class Fail extends Error {}
class Skip extends Error {}

function check(cond, msg = "check failed") {
  if (!cond) throw new Fail(msg);
}

/** Raw bytes as a JS string the way the SDK carries them (U+DC80..U+DCFF). */
function b(latin1) {
  return asp_str(Uint8Array.from([...latin1].map((c) => c.charCodeAt(0))));
}
let asp_str; // strFromBytes, set in main()

const bytesOf = (s) => {
  const out = [];
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    if (cp >= 0xdc80 && cp <= 0xdcff) out.push(cp - 0xdc00);
    else for (const x of enc.encode(ch)) out.push(x);
  }
  return Uint8Array.from(out);
};
const eq = (a, b2) => {
  if (typeof b2 === "string") b2 = bytesOf(b2);
  if (a.length !== b2.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b2[i]) return false;
  return true;
};
const show = (a) => {
  let s = "";
  for (const c of a.subarray(0, 200)) s += c >= 0x20 && c < 0x7f && c !== 0x5c ? String.fromCharCode(c) : `\\x${c.toString(16).padStart(2, "0")}`;
  return s + (a.length > 200 ? "..." : "");
};

class Ctx {
  constructor(c, root, name) {
    this.c = c;
    this.dir = `${root}/${name}`;
  }
  P(rel) {
    return `${this.dir}/${rel}`;
  }
}

async function ok(p) {
  try {
    return await p;
  } catch (e) {
    if (e instanceof asp.AspError) throw new Fail(`expected ok, got ${e.code}: ${e.message}`);
    throw e;
  }
}

async function err(code, p) {
  try {
    await p;
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    if (e.code !== code) throw new Fail(`expected ${code}, got ${e.code}: ${e.message}`);
    return e;
  }
  throw new Fail(`expected ${code}, got ok`);
}

// ---- helpers ----

async function put(ctx, path, data, mode = 0) {
  const p = { path, data: typeof data === "string" ? bytesOf(data) : data, mkdirs: true };
  if (mode) p.mode = mode;
  try {
    await ctx.c.write(p);
  } catch (e) {
    throw new Fail(`setup: write ${path}: ${e.code}: ${e.message}`);
  }
}

async function readAll(ctx, path) {
  const parts = [];
  let len = 0;
  for (let calls = 0; calls < 4096; calls++) {
    let r;
    try {
      r = await ctx.c.read({ path, offset: len });
    } catch (e) {
      throw new Fail(`read ${path}: ${e.code}: ${e.message}`);
    }
    if (calls === 0 && r.eof) return r.data;
    parts.push(r.data);
    len += r.data.length;
    if (r.eof) return Buffer.concat(parts);
    if (!r.data.length) throw new Fail(`read ${path}: no data and no eof at ${len}`);
  }
  throw new Fail(`read ${path}: too many calls`);
}

async function sh(ctx, cmd) {
  let r;
  try {
    r = await ctx.c.exec({ command: cmd, cwd: ctx.dir, timeout_ms: SAFETY_TIMEOUT_MS });
  } catch (e) {
    throw new Fail(`exec ${cmd}: ${e.code}: ${e.message}`);
  }
  if (r.exit_code !== 0) throw new Fail(`exec ${cmd}: exit ${r.exit_code} signal ${r.signal ?? "-"}: ${show(r.stderr)}`);
  return r;
}

async function exists(ctx, path) {
  try {
    await ctx.c.stat({ path, follow: false });
    return true;
  } catch (e) {
    if (e.code === "not_found") return false;
    throw new Fail(`stat ${path}: ${e.code}: ${e.message}`);
  }
}

async function expectExists(ctx, path, want) {
  check((await exists(ctx, path)) === want, `${path} should ${want ? "" : "not "}exist`);
}

async function stat(ctx, path, follow = true) {
  try {
    return await ctx.c.stat({ path, follow });
  } catch (e) {
    throw new Fail(`stat ${path}: ${e.code}: ${e.message}`);
  }
}

async function listdir(ctx, path) {
  try {
    return await ctx.c.list({ path });
  } catch (e) {
    throw new Fail(`list ${path}: ${e.code}: ${e.message}`);
  }
}

async function umask(ctx) {
  const r = await sh(ctx, "umask");
  const m = parseInt(Buffer.from(r.stdout.subarray(0, 15)).toString().trim(), 8);
  check(!Number.isNaN(m) && m <= 0o777, `cannot parse umask output '${show(r.stdout)}'`);
  return m;
}

function doExec(ctx, p) {
  if (!p.timeout_ms) p.timeout_ms = SAFETY_TIMEOUT_MS;
  return ctx.c.exec(p);
}

const monoMs = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const pidStateSh = (f) =>
  `p=$(cat ${f}); st=dead; ` +
  "if [ -d /proc/$p ]; then s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); " +
  "case \"$s\" in ''|Z) ;; *) st=alive ;; esac; " +
  "elif [ ! -d /proc/self ] && kill -0 $p 2>/dev/null; then st=alive; fi; printf %s $st";

async function pidDead(ctx, cmd) {
  for (let i = 0; i < 10; i++) {
    const r = await sh(ctx, cmd);
    if (eq(r.stdout, "dead")) return;
    await sleep(500);
  }
  throw new Fail("a process of the timed-out group survived");
}

function fillPattern(n, seed) {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 131 + seed + (i >> 9)) & 0xff;
  return out;
}

// ---- hello ----

async function hello_fields(ctx) {
  const r = await ok(ctx.c.hello({ client: "asp-conformance/1", protocol: 2 }));
  check(r.protocol === 2);
  check(r.agent);
  for (const need of ["hello", "exec", "read", "write", "stat", "list", "mkdir", "remove", "rename"])
    check(r.ops.includes(need), `hello ops lacks '${need}'`);
  check(r.os && r.os === r.os.toLowerCase(), `os '${r.os}' is not lower case`);
  check(r.arch);
  check(r.cwd.startsWith("/"), `cwd '${r.cwd}' is not absolute`);
  check(r.max_message >= MIB, `max_message ${r.max_message} is below 1 MiB`);
}

// ---- exec ----

async function exec_command_shell(ctx) {
  const r = await ok(doExec(ctx, { command: 'x=hello; echo "$x"; echo err >&2' }));
  check(eq(r.stdout, "hello\n"), `stdout '${show(r.stdout)}'`);
  check(eq(r.stderr, "err\n"), `stderr '${show(r.stderr)}'`);
  check(r.exit_code === 0);
  check(r.signal === null);
  check(!r.timed_out);
  check(r.stdout_bytes === 6 && r.stderr_bytes === 4);
}

async function exec_argv_direct(ctx) {
  const r = await ok(doExec(ctx, { argv: ["printf", "%s|", "a b", "$HOME", "'q'", "`x`", "*"] }));
  check(eq(r.stdout, "a b|$HOME|'q'|`x`|*|"), `argv went through a shell: '${show(r.stdout)}'`);
  check(r.exit_code === 0);
}

async function exec_invalid_params(ctx) {
  await err("invalid_argument", doExec(ctx, { command: "true", argv: ["true"] }));
  await err("invalid_argument", doExec(ctx, {}));
  await err("invalid_argument", doExec(ctx, { argv: [] }));
}

async function exec_missing_program(ctx) {
  await err("not_found", doExec(ctx, { argv: ["asp-conformance-no-such-program", "x"] }));
  await err("not_found", doExec(ctx, { argv: [ctx.P("no-such-file")] }));
  const r = await ok(doExec(ctx, { command: "asp-conformance-no-such-program" }));
  check(r.exit_code === 127, `exit ${r.exit_code}`);
}

async function exec_exit_codes(ctx) {
  for (const code of [0, 1, 42, 255]) {
    const r = await ok(doExec(ctx, { command: `exit ${code}` }));
    check(r.exit_code === code, `exit ${code} gave ${r.exit_code}`);
    check(r.signal === null);
  }
  const r = await ok(doExec(ctx, { argv: ["sh", "-c", "exit 3"] }));
  check(r.exit_code === 3);
}

async function exec_signal_name(ctx) {
  for (const sig of ["KILL", "TERM", "SEGV", "INT"]) {
    const cmd = `kill -${sig} $$; sleep 5`;
    const r = await ok(doExec(ctx, { command: cmd }));
    check(r.exit_code === -1, `${cmd}: exit_code ${r.exit_code}, want -1`);
    check(r.signal === sig, `${cmd}: signal ${r.signal}`);
    check(!r.timed_out);
  }
}

async function exec_stdin_binary(ctx) {
  const n = 256 * 1024;
  const data = fillPattern(n, 7);
  data[0] = 0;
  const r = await ok(doExec(ctx, { command: "cat", stdin: data }));
  check(r.exit_code === 0);
  check(eq(r.stdout, data), `round trip: ${r.stdout.length} bytes back of ${n}`);
  check(r.stdout_bytes === n);
}

async function exec_stdin_closed(ctx) {
  let r = await ok(doExec(ctx, { command: "cat; if read x; then echo got; else echo eof; fi", timeout_ms: 5000 }));
  check(!r.timed_out);
  check(eq(r.stdout, "eof\n"), `stdout '${show(r.stdout)}'`);
  r = await ok(doExec(ctx, { command: "exec 0<&-; echo done", stdin: new Uint8Array(MIB) }));
  check(r.exit_code === 0);
  check(eq(r.stdout, "done\n"));
}

async function exec_large_io(ctx) {
  const n = 4 * MIB;
  const data = fillPattern(n, 3);
  const r = await ok(doExec(ctx, { command: "head -c 1048576 /dev/zero >&2 & cat; wait", stdin: data }));
  check(!r.timed_out);
  check(r.exit_code === 0);
  check(eq(r.stdout, data), `stdout ${r.stdout.length} bytes, want ${n}`);
  check(r.stderr_bytes === MIB && r.stderr.length === MIB);
}

async function exec_large_output(ctx) {
  const r = await ok(doExec(ctx, { command: "head -c 6000000 /dev/zero | tr '\\000' x" }));
  check(r.exit_code === 0);
  check(r.stdout_bytes === 6000000, `stdout_bytes ${r.stdout_bytes}`);
  check(r.stdout.length === 6000000, `stdout ${r.stdout.length} bytes`);
  for (let i = 0; i < r.stdout.length; i += 4093) check(r.stdout[i] === 0x78, `byte ${i} is ${r.stdout[i]}`);
}

async function exec_max_output(ctx) {
  let r = await ok(
    doExec(ctx, {
      command: "i=0; while [ $i -lt 2000 ]; do echo $i; i=$((i+1)); done; head -c 70000 /dev/zero >&2",
      max_output: 10,
    }),
  );
  check(r.exit_code === 0);
  check(eq(r.stdout, "0\n1\n2\n3\n4\n"), `stdout '${show(r.stdout)}'`);
  check(r.stdout_bytes === 8890, `stdout_bytes ${r.stdout_bytes}`);
  check(r.stderr.length === 10);
  check(r.stderr_bytes === 70000, `stderr_bytes ${r.stderr_bytes}`);
  r = await ok(doExec(ctx, { command: "printf abc", max_output: 0 }));
  check(r.stdout.length === 0 && r.stdout_bytes === 3);
}

async function exec_env(ctx) {
  const e = { ASP_CONF_A: "a b$c 'q'", HOME: "/asp-home", ASP_CONF_EMPTY: "" };
  let r = await ok(doExec(ctx, { command: "printf '%s|%s|%s' \"$ASP_CONF_A\" \"$HOME\" \"${ASP_CONF_EMPTY-unset}\"", env: e }));
  check(eq(r.stdout, "a b$c 'q'|/asp-home|"), `stdout '${show(r.stdout)}'`);
  r = await ok(doExec(ctx, { argv: ["env"], env: e }));
  const homes = Buffer.from(r.stdout).toString("latin1").split("\n").filter((l) => l.startsWith("HOME="));
  check(homes.length === 1 && homes[0] === "HOME=/asp-home", `env shows ${homes.length} HOME entries, the last not HOME=/asp-home`);
  const script = "#!/bin/sh\nprintf 'from-path %s %s' \"$1\" \"$ASP_CONF_A\"\n";
  await ok(ctx.c.write({ path: ctx.P("bin/asp-conf-tool"), data: script, mode: 0o755, mkdirs: true }));
  const e2 = { PATH: `${ctx.dir}/bin:/usr/bin:/bin`, ASP_CONF_A: "v" };
  r = await ok(doExec(ctx, { argv: ["asp-conf-tool", "x y"], env: e2 }));
  check(eq(r.stdout, "from-path x y v"), `stdout '${show(r.stdout)}' stderr '${show(r.stderr)}'`);
}

async function exec_fresh_process(ctx) {
  await sh(ctx, "export ASP_CONF_STATE=1; cd /");
  const r = await ok(doExec(ctx, { command: "printf '%s' \"${ASP_CONF_STATE-unset}\"" }));
  check(eq(r.stdout, "unset"), `shell state carried over: '${show(r.stdout)}'`);
}

async function exec_cwd(ctx) {
  await put(ctx, ctx.P("marker"), "here");
  let r = await ok(doExec(ctx, { argv: ["cat", "marker"], cwd: ctx.dir }));
  check(eq(r.stdout, "here"), `stdout '${show(r.stdout)}' stderr '${show(r.stderr)}'`);
  r = await ok(doExec(ctx, { command: "cat marker", cwd: ctx.dir }));
  check(eq(r.stdout, "here"));
}

async function exec_cwd_errors(ctx) {
  await put(ctx, ctx.P("file"), "x");
  await err("not_found", doExec(ctx, { command: "true", cwd: ctx.P("missing") }));
  await err("not_found", doExec(ctx, { argv: ["true"], cwd: ctx.P("missing") }));
  await err("not_a_directory", doExec(ctx, { command: "true", cwd: ctx.P("file") }));
}

async function exec_timeout_kills_group(ctx) {
  const t0 = monoMs();
  const r = await ok(doExec(ctx, { command: "sleep 30 & echo $! > bg.pid; sleep 30", cwd: ctx.dir, timeout_ms: 300 }));
  const took = monoMs() - t0;
  check(r.timed_out);
  check(took < SLOW_MS, `took ${took.toFixed(0)} ms; TERM should have ended it`);
  check(r.exit_code === -1 && r.signal === "TERM", `exit ${r.exit_code} signal ${r.signal}`);
  check(r.duration_ms >= 250 && r.duration_ms < SLOW_MS, `duration_ms ${r.duration_ms}`);
  await pidDead(ctx, pidStateSh("bg.pid"));
}

async function exec_timeout_escalates_to_kill(ctx) {
  const r = await ok(doExec(ctx, { command: "trap '' TERM; sleep 30 & echo $! > bg.pid; sleep 30", cwd: ctx.dir, timeout_ms: 200 }));
  check(r.timed_out);
  check(r.signal === "KILL", `signal ${r.signal}`);
  check(r.duration_ms >= 2000 && r.duration_ms < 2000 + SLOW_MS, `duration_ms ${r.duration_ms}: KILL should come 2 s after TERM`);
  await pidDead(ctx, pidStateSh("bg.pid"));
}

async function exec_background_holds_output(ctx) {
  const r = await ok(doExec(ctx, { command: "(sleep 1; echo late) & echo early" }));
  check(eq(r.stdout, "early\nlate\n"), `stdout '${show(r.stdout)}'`);
  check(r.duration_ms >= 900, `duration_ms ${r.duration_ms}`);
  check(!r.timed_out && r.exit_code === 0);
}

async function exec_background_timeout(ctx) {
  const t0 = monoMs();
  const r = await ok(doExec(ctx, { command: "sleep 30 & echo started", timeout_ms: 400 }));
  const took = monoMs() - t0;
  check(r.timed_out);
  check(took >= 350 && took < SLOW_MS, `took ${took.toFixed(0)} ms`);
  check(eq(r.stdout, "started\n"));
}

async function exec_background_detached(ctx) {
  const t0 = monoMs();
  const r = await ok(doExec(ctx, { command: "sleep 30 >/dev/null 2>&1 </dev/null & echo $! > bg.pid", cwd: ctx.dir }));
  const took = monoMs() - t0;
  await sh(ctx, "kill $(cat bg.pid)");
  check(took < SLOW_MS, `took ${took.toFixed(0)} ms`);
  check(!r.timed_out && r.exit_code === 0);
}

async function exec_own_process_group(ctx) {
  const r = await sh(ctx, "if [ -r /proc/$$/stat ]; then set -- $(sed 's/.*) //' /proc/$$/stat); echo \"$$ $3 $4\"; else echo noproc; fi");
  if (eq(r.stdout, "noproc\n")) throw new Skip("no /proc in the sandbox");
  const parts = Buffer.from(r.stdout).toString().trim().split(/\s+/).map(Number);
  check(parts.length === 3, `output '${show(r.stdout)}'`);
  const [pid, pgrp, sid] = parts;
  check(pid === pgrp && pid === sid, `shell ${pid} is in group ${pgrp}, session ${sid}: want its own`);
}

async function exec_no_inherited_fds(ctx) {
  let r = await sh(ctx, "[ -d /proc/self/fd ] && echo yes || echo no");
  if (!eq(r.stdout, "yes\n")) throw new Skip("no /proc/self/fd in the sandbox");
  r = await ok(doExec(ctx, { argv: ["ls", "/proc/self/fd"] }));
  const fds = Buffer.from(r.stdout).toString().trim().split(/\s+/).map(Number);
  for (const fd of fds) check(fd <= 3, `the command inherited fd ${fd} ('${show(r.stdout)}')`);
  check(fds.length >= 3, `ls saw ${fds.length} fds`);
}

// In flight until the case writes `release`: whether the quick calls waited for it is then an
// order, not a time, and holds on a machine of any speed.
const SLOW_SH = "touch started; while [ ! -e release ]; do sleep 0.02; done";

async function exec_concurrent(ctx) {
  const N = 8;
  await put(ctx, ctx.P("f"), "data");
  let slowFailures = 0,
    slowDone = false;
  const slow = ctx.c.exec({ command: SLOW_SH, cwd: ctx.dir, timeout_ms: SAFETY_TIMEOUT_MS }).then(
    (r) => {
      if (r.exit_code || r.timed_out) slowFailures++;
    },
    () => slowFailures++,
  ).finally(() => {
    slowDone = true;
  });
  // From here every path awaits the calls before a check can throw.
  let inFlight = false;
  const until = monoMs() + SAFETY_TIMEOUT_MS / 2;
  try {
    while (!inFlight && !slowDone && monoMs() < until) {
      inFlight = await exists(ctx, ctx.P("started"));
      if (!inFlight) await sleep(20);
    }
  } catch {
    // reported below as "never created"
  }
  const why = {};
  const fails = new Array(N).fill(0);
  const workers = Array.from({ length: N }, async (_, i) => {
    for (let j = 0; j < 6; j++) {
      const want = `t${i}-${j}`;
      try {
        const r = j % 2
          ? await ctx.c.exec({ argv: ["printf", "%s", want], timeout_ms: SAFETY_TIMEOUT_MS })
          : await ctx.c.exec({ command: `printf %s ${want}`, timeout_ms: SAFETY_TIMEOUT_MS });
        if (!eq(r.stdout, want)) {
          fails[i]++;
          why[i] = `${want}: wrong output`;
        }
      } catch (e) {
        fails[i]++;
        why[i] = `${want}: ${e.code} ${e.message}`;
      }
    }
  });
  let quickOk = true;
  for (let i = 0; i < 3; i++) {
    try {
      quickOk = quickOk && eq((await ctx.c.read({ path: ctx.P("f") })).data, "data");
    } catch {
      quickOk = false;
    }
  }
  let qerr = null,
    r;
  try {
    r = await doExec(ctx, { command: "echo quick" });
  } catch (e) {
    qerr = e;
  }
  const waited = slowDone;
  let released = true;
  try {
    await put(ctx, ctx.P("release"), "");
  } catch {
    released = false;
  }
  await Promise.all(workers);
  await slow;
  check(inFlight, "the slow exec never created 'started'");
  check(released, "could not write 'release'");
  check(quickOk);
  check(qerr === null, `expected ok, got ${qerr}`);
  check(eq(r.stdout, "quick\n"));
  check(!waited, "3 reads and an exec waited for a slow exec to end");
  check(slowFailures === 0, "the slow exec failed or timed out");
  for (let i = 0; i < N; i++) check(fails[i] === 0, `thread ${i}: ${fails[i]} failures, last ${why[i]}`);
}

// ---- read ----

function doRead(ctx, path, offset = 0, length = undefined) {
  const p = { path, offset };
  if (length !== undefined) p.length = length;
  return ctx.c.read(p);
}

async function read_ranges(ctx) {
  const f = ctx.P("digits");
  await put(ctx, f, "0123456789");
  let r = await ok(doRead(ctx, f, 3, 4));
  check(eq(r.data, "3456"), `data '${show(r.data)}'`);
  check(r.size === 10 && !r.eof);
  r = await ok(doRead(ctx, f, 6, 4));
  check(eq(r.data, "6789"));
  check(r.eof, "data ending at the end of the file is eof");
  r = await ok(doRead(ctx, f, 8));
  check(eq(r.data, "89") && r.eof && r.size === 10);
  r = await ok(doRead(ctx, f, 5, 100));
  check(eq(r.data, "56789") && r.eof);
  r = await ok(doRead(ctx, f, 10));
  check(r.data.length === 0 && r.eof);
  r = await ok(doRead(ctx, f, 20, 5));
  check(r.data.length === 0 && r.eof && r.size === 10);
  r = await ok(doRead(ctx, f, 0, 0));
  check(r.data.length === 0 && !r.eof && r.size === 10);
}

async function read_whole_binary(ctx) {
  const n = 300 * 256;
  const data = fillPattern(n, 11);
  await put(ctx, ctx.P("bin"), data);
  let r = await ok(doRead(ctx, ctx.P("bin")));
  check(eq(r.data, data));
  check(r.size === n && r.eof);
  await put(ctx, ctx.P("empty"), new Uint8Array(0));
  r = await ok(doRead(ctx, ctx.P("empty")));
  check(r.data.length === 0 && r.size === 0 && r.eof);
}

async function read_large(ctx) {
  const n = 3 * MIB + 17;
  const data = fillPattern(n, 5);
  await put(ctx, ctx.P("big"), data);
  const got = await readAll(ctx, ctx.P("big"));
  check(eq(got, data), `read back ${got.length} bytes of ${n}`);
}

async function read_errors(ctx) {
  await put(ctx, ctx.P("file"), "x");
  const e = await err("not_found", doRead(ctx, ctx.P("missing")));
  check(e.message.includes("missing"), `the message should name the path: '${e.message}'`);
  await err("is_a_directory", doRead(ctx, ctx.dir));
  await err("not_a_directory", doRead(ctx, ctx.P("file/x")));
}

// ---- write ----

const W = (ctx, path, data, more = {}) => ctx.c.write({ path, data, ...more });

async function write_replace(ctx) {
  let r = await ok(W(ctx, ctx.P("f"), "hello world"));
  check(r.written === 11 && r.size === 11);
  r = await ok(W(ctx, ctx.P("f"), "bye"));
  check(r.written === 3 && r.size === 3, `written ${r.written} size ${r.size}: not truncated?`);
  const got = await readAll(ctx, ctx.P("f"));
  check(eq(got, "bye"), `content '${show(got)}'`);
}

async function write_offset(ctx) {
  await put(ctx, ctx.P("f"), "abcdef");
  let r = await ok(W(ctx, ctx.P("f"), "XY", { offset: 2 }));
  check(r.written === 2 && r.size === 6);
  let got = await readAll(ctx, ctx.P("f"));
  check(eq(got, "abXYef"), `content '${show(got)}'`);
  r = await ok(W(ctx, ctx.P("f"), "Z", { offset: 8 }));
  check(r.size === 9);
  got = await readAll(ctx, ctx.P("f"));
  check(eq(got, "abXYef\0\0Z"), `content '${show(got)}'`);
}

async function write_append(ctx) {
  await put(ctx, ctx.P("f"), "abc");
  const r = await ok(W(ctx, ctx.P("f"), "def", { append: true }));
  check(r.written === 3 && r.size === 6);
  const got = await readAll(ctx, ctx.P("f"));
  check(eq(got, "abcdef"), `content '${show(got)}'`);
  await ok(W(ctx, ctx.P("new"), "x", { append: true }));
  check(eq(await readAll(ctx, ctx.P("new")), "x"));
}

async function write_mkdirs(ctx) {
  await err("not_found", W(ctx, ctx.P("a/b/c.txt"), "deep"));
  await ok(W(ctx, ctx.P("a/b/c.txt"), "deep", { mkdirs: true }));
  check(eq(await readAll(ctx, ctx.P("a/b/c.txt")), "deep"));
  check((await stat(ctx, ctx.P("a/b"))).type === "dir");
}

async function write_mode(ctx) {
  const um = await umask(ctx);
  await put(ctx, ctx.P("default"), "x");
  let s = await stat(ctx, ctx.P("default"));
  check(s.mode === (0o644 & ~um), `default mode ${s.mode.toString(8)}, want ${(0o644 & ~um).toString(8)}`);
  await put(ctx, ctx.P("private"), "x", 0o600);
  s = await stat(ctx, ctx.P("private"));
  check(s.mode === (0o600 & ~um), `mode ${s.mode.toString(8)}`);
  await put(ctx, ctx.P("private"), "y", 0o666);
  s = await stat(ctx, ctx.P("private"));
  check(s.mode === (0o600 & ~um), `an existing file's mode changed to ${s.mode.toString(8)}`);
}

async function write_atomic(ctx) {
  const um = await umask(ctx);
  await put(ctx, ctx.P("f"), "old content", 0o640);
  const before = (await stat(ctx, ctx.P("f"))).mode;
  const r = await ok(W(ctx, ctx.P("f"), "new", { atomic: true }));
  check(r.written === 3 && r.size === 3);
  let got = await readAll(ctx, ctx.P("f"));
  check(eq(got, "new"), `content '${show(got)}'`);
  let s = await stat(ctx, ctx.P("f"));
  check(s.mode === before, `atomic write changed mode ${before.toString(8)} -> ${s.mode.toString(8)}`);
  const l = await listdir(ctx, ctx.dir);
  check(l.entries.length === 1 && l.entries[0].name === "f", `${l.entries.length} entries (a temp file left behind: '${l.entries[0]?.name ?? ""}')`);
  await ok(W(ctx, ctx.P("n"), "fresh", { atomic: true, mode: 0o600 }));
  s = await stat(ctx, ctx.P("n"));
  check(s.mode === (0o600 & ~um), `mode ${s.mode.toString(8)}`);
  await ok(W(ctx, ctx.P("x/y/z"), "deep", { atomic: true, mkdirs: true }));
  got = await readAll(ctx, ctx.P("x/y/z"));
  check(eq(got, "deep"));
  await ok(ctx.c.mkdir({ path: ctx.P("dir") }));
  await err("is_a_directory", W(ctx, ctx.P("dir"), "x", { atomic: true }));
}

async function write_invalid_combos(ctx) {
  await put(ctx, ctx.P("f"), "orig");
  await err("invalid_argument", W(ctx, ctx.P("f"), "zz", { offset: 1, append: true }));
  await err("invalid_argument", W(ctx, ctx.P("f"), "zz", { offset: 1, atomic: true }));
  const got = await readAll(ctx, ctx.P("f"));
  check(eq(got, "orig"), `a refused write changed the file: '${show(got)}'`);
}

async function write_binary(ctx) {
  const data = Uint8Array.from({ length: 1024 }, (_, i) => 255 - (i % 256));
  await put(ctx, ctx.P("bin"), data);
  check(eq(await readAll(ctx, ctx.P("bin")), data));
  const r = await ok(W(ctx, ctx.P("empty"), new Uint8Array(0)));
  check(r.written === 0 && r.size === 0);
  const s = await stat(ctx, ctx.P("empty"));
  check(s.type === "file" && s.size === 0);
}

async function write_errors(ctx) {
  await put(ctx, ctx.P("file"), "x");
  await err("is_a_directory", W(ctx, ctx.dir, "x"));
  await err("not_a_directory", W(ctx, ctx.P("file/x"), "x"));
}

// ---- stat ----

async function stat_file_dir(ctx) {
  const um = await umask(ctx);
  await put(ctx, ctx.P("f"), "12345", 0o600);
  await ok(ctx.c.mkdir({ path: ctx.P("d"), mode: 0o700 }));
  const ids = await sh(ctx, "printf '%s %s' \"$(id -u)\" \"$(id -g)\"");
  const [uid, gid] = Buffer.from(ids.stdout).toString().split(" ").map(Number);
  let s = await stat(ctx, ctx.P("f"));
  check(s.type === "file", `type ${s.type}`);
  check(s.size === 5);
  check(s.mode === (0o600 & ~um), `mode ${s.mode.toString(8)}`);
  check(s.uid === uid && s.gid === gid, `owner ${s.uid}:${s.gid}, id says ${uid}:${gid}`);
  check(s.target === undefined);
  s = await stat(ctx, ctx.P("d"));
  check(s.type === "dir", `type ${s.type}`);
  check(s.mode === (0o700 & ~um), `mode ${s.mode.toString(8)}`);
}

async function stat_symlink(ctx) {
  await put(ctx, ctx.P("t.txt"), "12345");
  await sh(ctx, "ln -s t.txt link && ln -s missing-target dangling");
  let s = await stat(ctx, ctx.P("link"), false);
  check(s.type === "symlink", `type ${s.type}`);
  check(s.target === "t.txt", `target ${s.target}`);
  s = await stat(ctx, ctx.P("link"), true);
  check(s.type === "file" && s.size === 5, `followed: ${s.type} ${s.size}`);
  s = await ok(ctx.c.stat({ path: ctx.P("link") }));
  check(s.type === "file");
  s = await stat(ctx, ctx.P("dangling"), false);
  check(s.type === "symlink");
  check(s.target === "missing-target");
  await err("not_found", ctx.c.stat({ path: ctx.P("dangling") }));
}

async function stat_special(ctx) {
  await sh(ctx, "mkfifo fifo");
  let s = await stat(ctx, ctx.P("fifo"));
  check(s.type === "fifo", `type ${s.type}`);
  s = await stat(ctx, "/dev/null");
  check(s.type === "char", `/dev/null: type ${s.type}`);
  let r = await sh(ctx, "if command -v python3 >/dev/null 2>&1; then python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' && echo yes; fi");
  if (eq(r.stdout, "yes\n")) {
    s = await stat(ctx, ctx.P("sock"));
    check(s.type === "socket", `type ${s.type}`);
  }
  r = await sh(ctx, 'for f in /dev/*; do if [ -b "$f" ] && [ ! -L "$f" ]; then printf %s "$f"; break; fi; done');
  if (r.stdout.length) {
    const dev = asp_str(r.stdout);
    s = await stat(ctx, dev, false);
    check(s.type === "block", `${dev}: type ${s.type}`);
  }
}

async function stat_mtime(ctx) {
  await put(ctx, ctx.P("f"), "x");
  const r = await ok(doExec(ctx, { command: "touch -t 202001020304.05 f", cwd: ctx.dir, env: { TZ: "UTC0" } }));
  check(r.exit_code === 0, `touch: ${show(r.stderr)}`);
  const s = await stat(ctx, ctx.P("f"));
  // A bigint: nanoseconds since 1970 are above 2^53, every digit kept.
  check(BigInt(s.mtime_ns) / 1000000000n === 1577934245n, `mtime_ns ${s.mtime_ns}`);
  const l = await listdir(ctx, ctx.dir);
  check(l.entries.length === 1 && l.entries[0].mtime_ns === s.mtime_ns);
}

async function stat_errors(ctx) {
  await put(ctx, ctx.P("file"), "x");
  await err("not_found", ctx.c.stat({ path: ctx.P("missing") }));
  await err("not_found", ctx.c.stat({ path: ctx.P("missing"), follow: false }));
  await err("not_a_directory", ctx.c.stat({ path: ctx.P("file/x"), follow: false }));
}

// ---- list ----

function cmpBytes(x, y) {
  const a = bytesOf(x),
    c = bytesOf(y);
  for (let i = 0; i < Math.min(a.length, c.length); i++) if (a[i] !== c[i]) return a[i] - c[i];
  return a.length - c.length;
}

async function list_sorted_bytewise(ctx) {
  const want = ["B", "_", "a", "a b", "b", b("\xc3\xa9"), b("\xff")];
  const create = ["b", b("\xff"), "a b", "B", b("\xc3\xa9"), "_", "a"];
  const sorted = [...create].sort(cmpBytes);
  check(sorted.every((s, i) => s === want[i])); // the test's own premise
  for (const name of create) await put(ctx, ctx.P(name), name);
  const l = await listdir(ctx, ctx.dir);
  check(l.entries.length === want.length, `${l.entries.length} entries, want ${want.length}`);
  want.forEach((w, i) => {
    const e = l.entries[i];
    check(e.name === w, `entry ${i} is ${JSON.stringify(e.name)}, want ${JSON.stringify(w)}`);
    check(e.type === "file");
    check(e.size === bytesOf(w).length);
  });
}

const findEntry = (l, name) => l.entries.find((e) => e.name === name) ?? null;

async function list_types(ctx) {
  await put(ctx, ctx.P("file"), "abc", 0o600);
  await sh(ctx, "mkdir sub && ln -s sub ldir && ln -s file lfile && mkfifo fifo");
  const l = await listdir(ctx, ctx.dir);
  check(l.entries.length === 5, `${l.entries.length} entries`);
  for (const e of l.entries) check(e.name !== "." && e.name !== "..", `lists '${e.name}'`);
  let e = findEntry(l, "file");
  check(e && e.type === "file" && e.size === 3);
  check((e.mode & 0o700) === 0o600 && !(e.mode & 0o77), `mode ${e.mode.toString(8)}`);
  e = findEntry(l, "sub");
  check(e && e.type === "dir");
  e = findEntry(l, "ldir");
  check(e && e.type === "symlink", `symlink to dir shown as ${e ? e.type : "absent"}`);
  e = findEntry(l, "lfile");
  check(e && e.type === "symlink");
  e = findEntry(l, "fifo");
  check(e && e.type === "fifo");
  check((await listdir(ctx, ctx.P("sub"))).entries.length === 0);
}

async function list_errors(ctx) {
  await put(ctx, ctx.P("file"), "x");
  await err("not_a_directory", ctx.c.list({ path: ctx.P("file") }));
  await err("not_found", ctx.c.list({ path: ctx.P("missing") }));
}

// ---- mkdir ----

function doMkdir(ctx, path, parents = false, mode = 0) {
  const p = { path, parents };
  if (mode) p.mode = mode;
  return ctx.c.mkdir(p);
}

async function mkdir_basic(ctx) {
  await ok(doMkdir(ctx, ctx.P("d")));
  check((await stat(ctx, ctx.P("d"))).type === "dir");
  await err("already_exists", doMkdir(ctx, ctx.P("d")));
  await ok(doMkdir(ctx, ctx.P("d"), true));
  const um = await umask(ctx);
  await ok(doMkdir(ctx, ctx.P("private"), false, 0o700));
  const s = await stat(ctx, ctx.P("private"));
  check(s.mode === (0o700 & ~um), `mode ${s.mode.toString(8)}`);
}

async function mkdir_parents(ctx) {
  await err("not_found", doMkdir(ctx, ctx.P("x/y")));
  await ok(doMkdir(ctx, ctx.P("a/b/c"), true));
  check((await stat(ctx, ctx.P("a"))).type === "dir");
  check((await stat(ctx, ctx.P("a/b/c"))).type === "dir");
  await ok(doMkdir(ctx, ctx.P("a/b/c"), true));
  await ok(doMkdir(ctx, ctx.P("a/b/c/"), true));
}

async function mkdir_errors(ctx) {
  await put(ctx, ctx.P("file"), "x");
  await err("already_exists", doMkdir(ctx, ctx.P("file")));
  await err("already_exists", doMkdir(ctx, ctx.P("file"), true));
  await err("not_a_directory", doMkdir(ctx, ctx.P("file/sub")));
  await err("not_a_directory", doMkdir(ctx, ctx.P("file/sub/deeper"), true));
}

// ---- remove ----

const rm = (ctx, path, recursive = false) => ctx.c.remove({ path, recursive });

async function remove_file_and_dir(ctx) {
  await put(ctx, ctx.P("f"), "x");
  await ok(rm(ctx, ctx.P("f")));
  await expectExists(ctx, ctx.P("f"), false);
  await ok(doMkdir(ctx, ctx.P("d")));
  await ok(rm(ctx, ctx.P("d")));
  await expectExists(ctx, ctx.P("d"), false);
  await err("not_found", rm(ctx, ctx.P("missing")));
  await err("not_found", rm(ctx, ctx.P("missing"), true));
}

async function remove_not_empty(ctx) {
  await put(ctx, ctx.P("d/f"), "x");
  await err("not_empty", rm(ctx, ctx.P("d")));
  await expectExists(ctx, ctx.P("d/f"), true);
}

async function remove_recursive(ctx) {
  await put(ctx, ctx.P("outside/keep"), "keep");
  await sh(
    ctx,
    "mkdir -p t/a/b/c t/e && echo 1 > t/a/b/c/f && echo 2 > t/a/g && echo 3 > 't/sp ace' && echo 4 > 't/$(q)' && " +
      "ln -s ../outside t/a/lnk && ln -s ../outside/keep t/flink && mkfifo t/a/fifo",
  );
  await err("not_empty", rm(ctx, ctx.P("t")));
  await ok(rm(ctx, ctx.P("t"), true));
  await expectExists(ctx, ctx.P("t"), false);
  check(eq(await readAll(ctx, ctx.P("outside/keep")), "keep"), "a symlink inside was followed");
}

async function remove_symlink_to_dir(ctx) {
  await put(ctx, ctx.P("target/file"), "precious");
  await sh(ctx, "ln -s target l1 && ln -s target l2");
  await ok(rm(ctx, ctx.P("l1")));
  await ok(rm(ctx, ctx.P("l2"), true));
  await expectExists(ctx, ctx.P("l1"), false);
  await expectExists(ctx, ctx.P("l2"), false);
  check(eq(await readAll(ctx, ctx.P("target/file")), "precious"), "removing a symlink touched its target");
}

// ---- rename ----

const mv = (ctx, from, to, more = {}) => ctx.c.rename({ from, to, ...more });

async function rename_overwrite(ctx) {
  await put(ctx, ctx.P("a"), "A");
  await put(ctx, ctx.P("b"), "B");
  await ok(mv(ctx, ctx.P("a"), ctx.P("b"))); // overwrite is the default
  await expectExists(ctx, ctx.P("a"), false);
  check(eq(await readAll(ctx, ctx.P("b")), "A"));
}

async function rename_no_overwrite(ctx) {
  await put(ctx, ctx.P("a"), "A");
  await put(ctx, ctx.P("b"), "B");
  await err("already_exists", mv(ctx, ctx.P("a"), ctx.P("b"), { overwrite: false }));
  check(eq(await readAll(ctx, ctx.P("a")), "A"));
  check(eq(await readAll(ctx, ctx.P("b")), "B"));
  await ok(mv(ctx, ctx.P("a"), ctx.P("c"), { overwrite: false }));
  await expectExists(ctx, ctx.P("a"), false);
  check(eq(await readAll(ctx, ctx.P("c")), "A"));
  await ok(doMkdir(ctx, ctx.P("d1")));
  await ok(doMkdir(ctx, ctx.P("d2")));
  await err("already_exists", mv(ctx, ctx.P("d1"), ctx.P("d2"), { overwrite: false }));
  await expectExists(ctx, ctx.P("d1"), true);
}

async function rename_errors_and_dirs(ctx) {
  await err("not_found", mv(ctx, ctx.P("missing"), ctx.P("x")));
  await err("not_found", mv(ctx, ctx.P("missing"), ctx.P("x"), { overwrite: false }));
  await put(ctx, ctx.P("d/inner"), "in");
  await ok(mv(ctx, ctx.P("d"), ctx.P("e")));
  await expectExists(ctx, ctx.P("d"), false);
  check(eq(await readAll(ctx, ctx.P("e/inner")), "in"));
}

// ---- hostile paths and arguments ----

let HOSTILE;

async function hostile_names(ctx) {
  for (const h of HOSTILE) await put(ctx, ctx.P(h), h);
  let l = await listdir(ctx, ctx.dir);
  check(l.entries.length === HOSTILE.length, `${l.entries.length} entries, want ${HOSTILE.length} (a name split or ran as a command?)`);
  for (const h of HOSTILE) {
    const hb = bytesOf(h);
    check(findEntry(l, h) !== null, `${JSON.stringify(h)} not listed verbatim`);
    const got = await readAll(ctx, ctx.P(h));
    check(eq(got, hb), `${JSON.stringify(h)} read back '${show(got)}'`);
    const s = await stat(ctx, ctx.P(h), false);
    check(s.size === hb.length);
    const r = await ok(doExec(ctx, { argv: ["cat", "--", ctx.P(h)] }));
    check(eq(r.stdout, hb), `cat ${JSON.stringify(h)} gave '${show(r.stdout)}' / '${show(r.stderr)}'`);
  }
  await ok(mv(ctx, ctx.P(HOSTILE[3]), ctx.P(HOSTILE[4])));
  for (let i = 0; i < HOSTILE.length; i++) if (i !== 3) await ok(rm(ctx, ctx.P(HOSTILE[i])));
  l = await listdir(ctx, ctx.dir);
  check(l.entries.length === 0, `${l.entries.length} entries left, first ${JSON.stringify(l.entries[0]?.name ?? "")}`);
}

async function hostile_exec_args(ctx) {
  const argv = ["printf", "%s|", ...HOSTILE, ""];
  const want = Buffer.concat([...HOSTILE.map((h) => Buffer.concat([bytesOf(h), Buffer.from("|")])), Buffer.from("|")]);
  const d = ctx.P("d $(touch pwned) 'q' `x`");
  await ok(doMkdir(ctx, d));
  await put(ctx, `${d}/marker`, "in-hostile-dir");
  let r = await ok(doExec(ctx, { argv, cwd: d }));
  check(eq(r.stdout, want), `got '${show(r.stdout)}'`);
  r = await ok(
    doExec(ctx, {
      command: "cat marker; printf '|%s' \"$ASP_CONF_V\"",
      cwd: d,
      env: { ASP_CONF_V: "$(touch pwned) `touch pwned` 'q' \"dq\"\n;x" },
    }),
  );
  check(eq(r.stdout, "in-hostile-dir|$(touch pwned) `touch pwned` 'q' \"dq\"\n;x"), `got '${show(r.stdout)}'`);
  await expectExists(ctx, ctx.P("pwned"), false);
  await expectExists(ctx, `${d}/pwned`, false);
}

// ---- spawned processes (tests/conformance/cases_proc.c) ----

// Events and results printed whole in a message; integers past 2^53 arrive as bigint.
const repr = (o) => JSON.stringify(o, (_, v) => (typeof v === "bigint" ? `${v}n` : v));

/** A Process; Skip where the transport carries no notifications (HTTP in the SDKs). */
async function spawn(ctx, p) {
  try {
    return await ctx.c.spawn(p);
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    if (e.code === "unsupported") throw new Skip(`spawn: ${e.message}`);
    throw new Fail(`spawn ${repr(p)}: ${e.code}: ${e.message}`);
  }
}

/** The next event, or undefined once the exit has been returned; a silent process fails
 * the case after SAFETY_TIMEOUT_MS instead of hanging it. */
async function nextEvent(proc) {
  try {
    return await proc.nextEvent(SAFETY_TIMEOUT_MS);
  } catch (e) {
    if (e instanceof asp.AspError && e.code === "timeout") throw new Fail(e.message);
    throw e;
  }
}

/** Reads the process to its exit: stdout, stderr, the exit event, the chunks seen
 * (stream, offset, size, when) and the time the exit came. */
async function follow(proc, seen = Buffer.alloc(0)) {
  const acc = { stdout: [seen], stderr: [] },
    len = { stdout: seen.length, stderr: 0 },
    chunks = [];
  for (;;) {
    const ev = await nextEvent(proc);
    if (ev === undefined)
      return { stdout: Buffer.concat(acc.stdout), stderr: Buffer.concat(acc.stderr), exit: proc.exit, chunks, tEnd: monoMs() };
    if (ev.stream !== undefined && ev.stream !== null) {
      check(ev.proc === proc.proc, `output names process ${ev.proc}, spawn ${proc.proc}`);
      const s = ev.stream === "stdout" ? "stdout" : "stderr";
      check(ev.offset === len[s], `${ev.stream} chunk at offset ${ev.offset} after ${len[s]} bytes`);
      acc[s].push(ev.data);
      len[s] += ev.data.length;
      chunks.push({ stream: ev.stream, offset: ev.offset, size: ev.data.length, when: monoMs() });
    }
  }
}

async function spawn_output_live(ctx) {
  const t0 = monoMs();
  const p = await spawn(ctx, { command: "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done" });
  const f = await follow(p);
  check(eq(f.stdout, "line1\nline2\nline3\nline4\nline5\n"), `stdout '${show(f.stdout)}'`);
  check(f.exit.exit_code === 0 && !f.exit.signal, `exit ${f.exit.exit_code} signal ${f.exit.signal}`);
  const outs = f.chunks.filter((c) => c.stream === "stdout");
  check(outs.length >= 4, `${outs.length} chunks: the output came in one piece, not live`);
  check(
    f.tEnd - outs[0].when >= 500,
    `first chunk ${(outs[0].when - t0).toFixed(0)} ms after the spawn, exit ${(f.tEnd - t0).toFixed(0)} ms after: not live`,
  );
}

async function spawn_output_order(ctx) {
  const p = await spawn(ctx, {
    command: "printf out1; printf err1 >&2; head -c 2097152 /dev/zero | tr '\\000' x; printf err2 >&2; printf end; exit 5",
  });
  const f = await follow(p);
  const want = Buffer.concat([Buffer.from("out1"), Buffer.alloc(2 * MIB, "x"), Buffer.from("end")]);
  check(eq(f.stdout, want), `stdout ${f.stdout.length} bytes`);
  check(eq(f.stderr, "err1err2"), `stderr '${show(f.stderr)}'`);
  const ex = f.exit;
  check(ex.exit_code === 5 && !ex.timed_out && ex.proc === p.proc, `exit ${repr(ex)}`);
  const w = await ok(ctx.c.proc_wait({ proc: p.proc, timeout_ms: 5000 }));
  check(w.exit_code === 5 && !w.signal, `proc_wait ${repr(w)}`);
}

async function spawn_stdin_binary(ctx) {
  const n = 256 + 300 * 1024;
  const data = new Uint8Array(n);
  for (let i = 0; i < n; i++) data[i] = i < 256 ? i : (i * 7 + (i >> 9)) & 0xff;
  const p = await spawn(ctx, { argv: ["cat"] });
  // Pieces as views into one buffer, as exec stdin takes a Uint8Array: the SDK must send
  // each view's bytes, not its whole backing buffer.
  await ok(ctx.c.proc_write({ proc: p.proc, data: data.subarray(0, 256) }));
  await ok(ctx.c.proc_write({ proc: p.proc, data: data.subarray(256, 256 + 100 * 1024) }));
  await ok(ctx.c.proc_write({ proc: p.proc, data: data.subarray(256 + 100 * 1024), eof: true }));
  const f = await follow(p);
  check(eq(f.stdout, data), `cat gave back ${f.stdout.length} of ${n} bytes, or other bytes`);
  check(f.exit.exit_code === 0, `exit ${f.exit.exit_code}`);
  await err("invalid_argument", ctx.c.proc_write({ proc: p.proc, data: enc.encode("x") }));
  await err("invalid_argument", ctx.c.proc_write({ proc: p.proc, eof: true }));
  await err("not_found", ctx.c.proc_write({ proc: 0x7fffffffffff, data: enc.encode("x") }));
}

async function spawn_timeout_kills_group(ctx) {
  const t0 = monoMs();
  const p = await spawn(ctx, { command: "sleep 30 & echo $! > bg.pid; sleep 30", cwd: ctx.dir, timeout_ms: 300 });
  const f = await follow(p);
  const ex = f.exit;
  check(ex.timed_out && ex.exit_code === -1 && ex.signal === "TERM", `timed_out ${ex.timed_out} exit ${ex.exit_code} signal ${ex.signal}`);
  check(f.tEnd - t0 >= 250 && f.tEnd - t0 < SLOW_MS, `ended after ${(f.tEnd - t0).toFixed(0)} ms`);
  check((await ok(ctx.c.proc_wait({ proc: p.proc, timeout_ms: 5000 }))).timed_out, "proc_wait: not timed_out");
  for (let i = 0; i < 20; i++) {
    if (eq((await sh(ctx, 'kill -0 "$(cat bg.pid)" 2>/dev/null && echo alive || echo dead')).stdout, "dead\n")) return;
    await sleep(500); // polling the condition, bounded at 10 s
  }
  throw new Fail("a process of the timed-out group survived");
}

async function spawn_errors(ctx) {
  await follow(await spawn(ctx, { command: "true" })); // Skip where nothing can spawn
  await err("not_found", ctx.c.spawn({ argv: ["/nonexistent/asp-conf-prog"] }));
  await err("not_found", ctx.c.spawn({ command: "true", cwd: "/nonexistent/asp-conf-dir" }));
  await err("invalid_argument", ctx.c.spawn({ command: "true", argv: ["true"] }));
}

async function proc_signal_each(ctx) {
  for (const name of ["TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"]) {
    const p = await spawn(ctx, { command: "ulimit -c 0 2>/dev/null; exec sleep 30", cwd: ctx.dir });
    await ok(ctx.c.proc_signal({ proc: p.proc, signal: name }));
    const w = await ok(ctx.c.proc_wait({ proc: p.proc, timeout_ms: 10000 }));
    check(w.exit_code === -1 && w.signal === name, `${name}: exit ${w.exit_code} signal ${w.signal}`);
    await ok(ctx.c.proc_signal({ proc: p.proc, signal: name })); // a finished process: a no-op
    if (name === "TERM") {
      await err("invalid_argument", ctx.c.proc_signal({ proc: p.proc, signal: "FOO" }));
      await err("invalid_argument", ctx.c.proc_signal({ proc: p.proc, signal: "STOP" }));
    }
    p.close();
  }
  await err("not_found", ctx.c.proc_signal({ proc: 0x7fffffffffff, signal: "TERM" }));
}

async function proc_wait_timeout(ctx) {
  const p = await spawn(ctx, { command: "exec sleep 30" });
  const t0 = monoMs();
  await err("timeout", ctx.c.proc_wait({ proc: p.proc, timeout_ms: 300 }));
  const took = monoMs() - t0;
  check(took >= 250 && took < SLOW_MS, `the timeout came after ${took.toFixed(0)} ms`);
  await ok(ctx.c.proc_signal({ proc: p.proc, signal: "KILL" }));
  const w = await ok(ctx.c.proc_wait({ proc: p.proc }));
  check(w.signal === "KILL" && !w.timed_out, `signal ${w.signal}`);
  await err("not_found", ctx.c.proc_wait({ proc: 0x7fffffffffff, timeout_ms: 10 }));
  p.close();
}

async function proc_list_fields(ctx) {
  const done = await spawn(ctx, { argv: ["sh", "-c", "exit 3"], tag: "conf-done" });
  await ok(ctx.c.proc_wait({ proc: done.proc, timeout_ms: 10000 }));
  const running = await spawn(ctx, { command: "exec sleep 30", tag: "conf-running" });
  const procs = new Map((await ok(ctx.c.proc_list())).procs.map((e) => [e.proc, e]));
  const d = procs.get(done.proc),
    r = procs.get(running.proc);
  check(d !== undefined && r !== undefined, `proc_list lacks ${d ? "the running one" : "the finished one"}`);
  check(d.tag === "conf-done", `tag ${d.tag}`);
  check(d.command === "sh -c 'exit 3'", `argv shown as [${d.command}]`);
  check(!d.running && d.exit_code === 3, `finished: running ${d.running} exit ${d.exit_code}`);
  // exit_code is optional, not nullable: a running process's is absent (undefined).
  check(r.command === "exec sleep 30" && r.running && r.exit_code === undefined && r.tag === "conf-running", `running: ${repr(r)}`);
  await ok(ctx.c.proc_signal({ proc: running.proc, signal: "KILL" }));
  await ok(ctx.c.proc_wait({ proc: running.proc, timeout_ms: 10000 }));
  done.close();
  running.close();
}

/** proc_attach as a Process; Skip where the transport carries no notifications. */
async function attach(ctx, p) {
  try {
    return await ctx.c.proc_attach(p);
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    if (e.code === "unsupported") throw new Skip(`proc_attach: ${e.message}`);
    throw new Fail(`proc_attach ${repr(p)}: ${e.code}: ${e.message}`);
  }
}

/** Reads an attached process to its exit: per stream its first offset and bytes; the
 * chunks of a stream follow each other without a gap from wherever the replay began. */
async function followFrom(proc) {
  const got = {};
  for (;;) {
    const ev = await nextEvent(proc);
    if (ev === undefined) {
      const out = {};
      for (const [k, v] of Object.entries(got)) out[k] = { first: v.first, data: Buffer.concat(v.parts) };
      return { got: out, exit: proc.exit };
    }
    if (ev.stream !== undefined && ev.stream !== null) {
      const g = (got[ev.stream] ??= { first: ev.offset, len: 0, parts: [] });
      check(ev.offset === g.first + g.len, `${ev.stream} chunk at offset ${ev.offset} after ${g.len} bytes from ${g.first}`);
      g.parts.push(Buffer.from(ev.data));
      g.len += ev.data.length;
    }
  }
}

async function proc_attach_replay(ctx) {
  const p = await spawn(ctx, { command: "printf 0123456789; printf ab >&2; sleep 0.3; printf tail" });
  const f = await follow(p);
  check(f.stdout.toString() === "0123456789tail", `stdout '${f.stdout}'`);
  // a finished process: replay from the offsets, then the exit, before the answer
  const a = await attach(ctx, { proc: p.proc, stdout_offset: 4, stderr_offset: 1 });
  check(a.exit !== undefined && a.exit !== null, "attach to a finished process returned before its exit");
  let r = await followFrom(a);
  check(r.got.stdout?.first === 4 && r.got.stdout.data.toString() === "456789tail", `replay from 4: ${repr(r.got.stdout)}`);
  check(r.got.stderr?.first === 1 && r.got.stderr.data.toString() === "b", `stderr replay ${repr(r.got.stderr)}`);
  check(r.exit.exit_code === 0 && r.exit.proc === p.proc, `exit ${repr(r.exit)}`);
  // errors follow nothing
  await err("invalid_argument", ctx.c.proc_attach({ proc: p.proc, stdout_offset: 15 }));
  await err("not_found", ctx.c.proc_attach({ proc: 0x7fffffffffff }));
  // a running process, again on this connection after a detach: replay, then live
  const live = await spawn(ctx, { command: "printf start; sleep 0.6; printf end" });
  const ev = await live.nextEvent(5000);
  check(ev?.data && Buffer.from(ev.data).subarray(0, 5).toString() === "start", `first event ${repr(ev)}`);
  live.close(); // detached: it keeps running
  r = await followFrom(await attach(ctx, { proc: live.proc }));
  check(r.got.stdout?.first === 0 && r.got.stdout.data.toString() === "startend", `got ${repr(r.got.stdout)}`);
  check(r.exit.exit_code === 0, `exit ${repr(r.exit)}`);
}

async function proc_attach_truncated(ctx) {
  // 3 MiB + 1: the responder holds the last 1 MiB. The spawn's own stream is read to its
  // exit first: its last notifications may come after proc_wait's answer, and a
  // follower of the same process on this connection would get them too.
  const p = await spawn(ctx, { command: "head -c 3145728 /dev/zero | tr '\\000' y; printf Z" });
  await follow(p);
  await ok(ctx.c.proc_wait({ proc: p.proc, timeout_ms: 20000 }));
  const r = await followFrom(await attach(ctx, { proc: p.proc }));
  const s = r.got.stdout ?? { first: undefined, data: Buffer.alloc(0) };
  check(s.first === 3 * MIB + 1 - MIB, `replay starts at ${s.first}, expected ${2 * MIB + 1}`);
  check(s.data.length === MIB && s.data[MIB - 1] === 0x5a && s.data[0] === 0x79, `replayed ${s.data.length} bytes`);
  check(r.exit.exit_code === 0, `exit ${repr(r.exit)}`);
}

// ---- terminals (spawn with tty, proc_resize) ----

/** Skip (n/a) where the responder's hello lists no "pty" feature. */
async function needPty(ctx) {
  const h = await ok(ctx.c.hello({}));
  if (!(h.features || []).includes("pty")) throw new Skip("n/a: the responder's hello lists no pty feature");
}

async function tty_spawn(ctx) {
  await needPty(ctx);
  const p = await spawn(ctx, {
    argv: ["sh", "-c", "test -t 0 && test -t 1 && test -t 2 && echo isatty; stty size; echo err >&2; echo T=$TERM"],
    tty: { rows: 30, cols: 100 },
  });
  const r = await follow(p);
  const out = r.stdout.toString("latin1");
  check(out.includes("isatty"), `not on a terminal: '${out}'`);
  check(out.includes("30 100"), `stty size: '${out}'`);
  check(out.includes("err") && r.stderr.length === 0, `stderr not on the terminal: '${out}'`);
  check(out.includes("T=xterm-256color"), `TERM: '${out}'`);
  check(r.exit.exit_code === 0, `exit ${r.exit.exit_code}`);
}

async function tty_resize(ctx) {
  await needPty(ctx);
  const p = await spawn(ctx, { argv: ["sh", "-c", "stty size; read x; stty size"], tty: { term: "dumb" } });
  let first = Buffer.alloc(0);
  while (!first.toString("latin1").includes("24 80")) {
    // resized only once the first size is out
    const ev = await nextEvent(p);
    check(ev !== undefined && ev.stream === "stdout", `no first size: '${first.toString("latin1")}'`);
    first = Buffer.concat([first, ev.data]);
  }
  await ok(p.resize(50, 132));
  await ok(p.write("go\n"));
  const r = await follow(p, first);
  const out = r.stdout.toString("latin1");
  check(out.includes("24 80") && out.includes("50 132"), `sizes: '${out}'`);
  check(r.exit.exit_code === 0, `exit ${r.exit.exit_code}`);
  await err("invalid_argument", ctx.c.proc_resize({ proc: p.proc, rows: 50, cols: 132 })); // finished
  await err("not_found", ctx.c.proc_resize({ proc: 0x7fffffffffff, rows: 24, cols: 80 }));
  const q = await spawn(ctx, { command: "exec sleep 30" });
  await err("invalid_argument", ctx.c.proc_resize({ proc: q.proc, rows: 24, cols: 80 })); // no terminal
  await ok(ctx.c.proc_signal({ proc: q.proc, signal: "KILL" }));
  q.close();
  const t = await spawn(ctx, { command: "exec sleep 30", tty: {} });
  await err("invalid_argument", t.resize(0, 80));
  await err("invalid_argument", t.resize(24, 4097));
  await ok(ctx.c.proc_signal({ proc: t.proc, signal: "KILL" }));
  t.close();
}

// ---- trees (tests/conformance/cases_tree.c) ----
// The streams are built here byte by byte (the hostile ones as no honest writer makes
// them); what tree_read sends is decoded with the SDK's TarReader, as the C case decodes
// it with asp_tar_reader.

const TREE_MTIME = 1700000000;
const TAR_END = new Uint8Array(1024);
let TarReader; // dist/tar.js's, set in main()

const cat = (...parts) => new Uint8Array(Buffer.concat(parts.map((p) => Buffer.from(p))));
const octal = (v, n) => enc.encode(v.toString(8).padStart(n - 1, "0") + "\0");

/** One ustar header of any name and type flag, checksummed. */
function tarRaw(name, typeflag, { link = "", size = 0, mode = 0o644 } = {}) {
  const h = new Uint8Array(512);
  h.set(enc.encode(name).subarray(0, 100), 0);
  h.set(octal(mode, 8), 100);
  h.set(octal(0, 8), 108);
  h.set(octal(0, 8), 116);
  h.set(octal(size, 12), 124);
  h.set(octal(TREE_MTIME, 12), 136);
  h[156] = typeflag.charCodeAt(0);
  h.set(enc.encode(link).subarray(0, 100), 157);
  h.set(enc.encode("ustar\x0000"), 257);
  h.fill(0x20, 148, 156);
  h.set(enc.encode(h.reduce((a, x) => a + x, 0).toString(8).padStart(6, "0") + "\0"), 148);
  return h;
}

function tarMember(kind, path, mode, { link = "", data = new Uint8Array(0) } = {}) {
  if (typeof data === "string") data = enc.encode(data);
  if (kind === "dir") return tarRaw(`${path || "."}/`, "5", { mode });
  if (kind === "symlink") return tarRaw(path, "2", { link, mode });
  return cat(tarRaw(path, "0", { size: data.length, mode }), data, new Uint8Array((512 - (data.length % 512)) % 512));
}

/** A pax header naming the next member `path`, then an innocent ustar header. */
function tarPaxPath(path) {
  const body = ` path=${path}\n`;
  let n = body.length + 1;
  while (String(n).length + body.length !== n) n++; // the length counts its own digits
  const rec = enc.encode(`${n}${body}`);
  const pad = new Uint8Array((512 - (rec.length % 512)) % 512);
  return cat(tarRaw("././@PaxHeader", "x", { size: rec.length }), rec, pad, tarMember("file", "innocent", 0o644, { data: "x" }));
}

/** The honest tree most cases write: a root, files of three modes, a directory, a link. */
function treeSample() {
  return cat(
    tarMember("dir", "", 0o755),
    tarMember("file", "a.txt", 0o644, { data: "hello\n" }),
    tarMember("file", "run.sh", 0o755, { data: "#!/bin/sh\n" }),
    tarMember("dir", "sub", 0o750),
    tarMember("file", "sub/secret", 0o600, { data: "s" }),
    tarMember("symlink", "sub/link", 0o777, { link: "../a.txt" }),
    tarMember("file", "sub/empty", 0o644),
    TAR_END,
  );
}

async function dirCount(ctx, path, n) {
  const names = (await listdir(ctx, path)).entries.map((e) => e.name);
  check(names.length === n, `${path} holds ${names.length} entries, not ${n} (${names.join(", ") || "-"})`);
}

async function fileIs(ctx, path, want) {
  if (typeof want === "string") want = enc.encode(want);
  const got = await readAll(ctx, path);
  check(eq(got, want), `${path} has ${got.length} bytes, not the ${want.length} written`);
}

async function tree_write_small(ctx) {
  const t = ctx.P("new/deeper/t"); // parents made too
  const r = await ok(ctx.c.tree_write({ path: t, data: treeSample(), eof: true }));
  check(r.entries === 6 && r.bytes === 17, `tree_write answered ${r.entries} entries, ${r.bytes} bytes; want 6 and 17`);
  const want = [
    ["", "dir", 0o755],
    ["a.txt", "file", 0o644],
    ["run.sh", "file", 0o755],
    ["sub", "dir", 0o750],
    ["sub/secret", "file", 0o600],
    ["sub/empty", "file", 0o644],
    ["sub/link", "symlink", 0],
  ];
  for (const [name, kind, mode] of want) {
    const q = name ? `${t}/${name}` : t;
    const s = await stat(ctx, q, false);
    check(s.type === kind, `${q} is a ${s.type}, not a ${kind}`);
    if (mode) check(s.mode === mode, `${q} has mode ${s.mode.toString(8)}, not ${mode.toString(8)}`);
    const secs = BigInt(s.mtime_ns) / 1000000000n;
    if (kind !== "symlink") check(secs === BigInt(TREE_MTIME), `${q} has mtime ${secs} s, not the stream's ${TREE_MTIME}`);
    else check(s.target === "../a.txt", `${q} points to ${s.target}, not ../a.txt`);
  }
  await fileIs(ctx, `${t}/sub/link`, "hello\n");
  await dirCount(ctx, ctx.dir, 1);
}

async function tree_write_chunked(ctx) {
  // 3 MiB in three files, sent as a first chunk and six writes all in flight at once
  const sizes = [2 * MIB, MIB - 7, 5];
  const data = sizes.map((n, i) => {
    const d = new Uint8Array(n);
    for (let k = 0; k < n; k++) d[k] = (k * 31 + i * 7 + Math.floor(k / 4099)) & 0xff;
    return d;
  });
  const stream = cat(...data.map((d, i) => tarMember("file", `f${i}`, 0o644, { data: d })), TAR_END);
  const t = ctx.P("t");
  const first = 100000;
  const r = await ok(ctx.c.tree_write({ path: t, data: stream.subarray(0, first) }));
  const each = Math.floor((stream.length - first) / 6);
  const cuts = [0, 1, 2, 3, 4, 5].map((i) => first + each * i).concat([stream.length]);
  const writes = [];
  for (let i = 6; i >= 0; i--) {
    // the last first: the responder puts them in order
    const [lo, hi] = i < 6 ? [cuts[i], cuts[i + 1]] : [stream.length, stream.length];
    writes.push(ctx.c.proc_write({ proc: r.proc, data: stream.subarray(lo, hi), offset: lo, eof: i === 6 }).then(
      () => null,
      (e) => [i, e],
    ));
  }
  for (const w of await Promise.all(writes)) if (w) throw new Fail(`write ${w[0]}: ${w[1].code}: ${w[1].message}`);
  const w = await ok(ctx.c.proc_wait({ proc: r.proc, timeout_ms: 30000 }));
  check(w.exit_code === 0, `the stream ended with ${w.exit_code}: ${w.error}`);
  check(w.entries === 3 && w.bytes === 3 * MIB - 2, `proc_wait says ${w.entries} entries, ${w.bytes} bytes`);
  for (let i = 0; i < 3; i++) await fileIs(ctx, ctx.P(`t/f${i}`), data[i]);
  try {
    await ctx.c.proc_write({ proc: r.proc, data: enc.encode("x") });
  } catch (e) {
    if (e instanceof asp.AspError) return; // the handle is done: a write after its end is refused
    throw e;
  }
  throw new Fail("a proc_write after eof was taken");
}

async function tree_write_merge(ctx) {
  // an existing directory: "a" replaced, "keep" kept, "sub" merged into
  const t = ctx.P("t");
  const old = cat(
    tarMember("file", "a", 0o644, { data: "old" }),
    tarMember("file", "keep", 0o644, { data: "k" }),
    tarMember("file", "sub/x", 0o644, { data: "x" }),
    TAR_END,
  );
  const nw = cat(tarMember("file", "a", 0o644, { data: "new" }), tarMember("dir", "sub", 0o755), tarMember("file", "sub/y", 0o644, { data: "y" }), TAR_END);
  await ok(ctx.c.tree_write({ path: t, data: old, eof: true }));
  await ok(ctx.c.tree_write({ path: t, data: nw, eof: true }));
  for (const [name, want] of [["a", "new"], ["keep", "k"], ["sub/x", "x"], ["sub/y", "y"]]) await fileIs(ctx, ctx.P(`t/${name}`), want);
  await dirCount(ctx, t, 3);
  // a file of the stream where the target has a directory: nothing moves
  const conflict = cat(tarMember("file", "a", 0o644, { data: "newer" }), tarMember("file", "sub", 0o644, { data: "f" }), TAR_END);
  await err("is_a_directory", ctx.c.tree_write({ path: t, data: conflict, eof: true }));
  await fileIs(ctx, ctx.P("t/a"), "new");
  await dirCount(ctx, t, 3);
  await err("not_a_directory", ctx.c.tree_write({ path: ctx.P("t/a"), data: treeSample(), eof: true }));
}

const TREE_HOSTILE = [
  ["a name climbing out", "../escape", () => cat(tarMember("file", "ok", 0o644, { data: "fine" }), tarRaw("../escape", "0"), TAR_END)],
  ["a '..' inside a name", "a/../../escape", () => cat(tarRaw("a/../../escape", "0"), TAR_END)],
  ["an absolute name", "/tmp/asp-conf-escape", () => cat(tarRaw("/tmp/asp-conf-escape", "0"), TAR_END)],
  [
    "a symlink out, then a file through it",
    "l/escape",
    () => cat(tarMember("symlink", "l", 0o777, { link: ".." }), tarMember("file", "l/escape", 0o644, { data: "x" }), TAR_END),
  ],
  [
    "a symlink to /tmp, then a directory through it",
    "d/asp-conf-escape",
    () => cat(tarMember("symlink", "d", 0o777, { link: "/tmp" }), tarMember("dir", "d/asp-conf-escape", 0o755), TAR_END),
  ],
  ["a hard link", "h", () => cat(tarRaw("h", "1", { link: "/etc/passwd" }), TAR_END)],
  ["a fifo", "p", () => cat(tarRaw("p", "6"), TAR_END)],
  ["a device", "null", () => cat(tarRaw("null", "3"), TAR_END)],
  ["a pax path climbing out", "../escape", () => cat(tarPaxPath("../escape"), TAR_END)],
  [
    "a stream cut inside a file", // into the data of "cut", no end blocks
    "cut",
    () => {
      const s = cat(tarMember("file", "a", 0o644, { data: "whole" }), tarMember("file", "cut", 0o644, { data: "0123456789" }));
      return s.subarray(0, s.length - (512 - 4));
    },
  ],
  ["a stream without its end", "last", () => tarMember("file", "last", 0o644, { data: "x" })],
  ["bytes that are not tar", null, () => cat(enc.encode("this is not a tar stream at all, not even close"), new Uint8Array(1024))],
];

async function tree_write_hostile(ctx) {
  const t = ctx.P("t");
  for (const [what, member, build] of TREE_HOSTILE) {
    let e;
    try {
      e = await err("invalid_argument", ctx.c.tree_write({ path: t, data: build(), eof: true }));
    } catch (f) {
      if (f instanceof Fail) throw new Fail(`${what}: ${f.message}`);
      throw f;
    }
    check(!member || e.message.includes(member), `${what}: the error does not name '${member}': ${e.message}`);
    check(!(await exists(ctx, t)), `${what}: the refused stream left its target`);
    check(!(await exists(ctx, "/tmp/asp-conf-escape")), `${what}: /tmp/asp-conf-escape exists`);
    await dirCount(ctx, ctx.dir, 0);
  }
}

async function tree_write_cancel(ctx) {
  const t = ctx.P("t");
  const half = treeSample().subarray(0, 512 * 3);
  // half the stream, then KILL: nothing stays
  let r = await ok(ctx.c.tree_write({ path: t, data: half }));
  await ok(ctx.c.proc_signal({ proc: r.proc, signal: "KILL" }));
  let w = await ok(ctx.c.proc_wait({ proc: r.proc, timeout_ms: 15000 }));
  check(w.exit_code === -1 && w.signal === "KILL", `a cancelled tree_write ended with ${w.exit_code} (${w.signal ?? "no signal"})`);
  check(!(await exists(ctx, t)), `a cancelled tree_write left ${t}`);
  // half the stream, then eof: the cut is the handle's error, named
  r = await ok(ctx.c.tree_write({ path: t, data: half }));
  try {
    await ctx.c.proc_write({ proc: r.proc, offset: half.length, eof: true });
  } catch (e) {
    if (!(e instanceof asp.AspError) || e.code !== "invalid_argument") throw new Fail(`the eof after a cut: ${e.code}: ${e.message}`);
  }
  w = await ok(ctx.c.proc_wait({ proc: r.proc, timeout_ms: 15000 }));
  check(w.exit_code === 1 && w.error_code === "invalid_argument" && w.error, `a cut tree_write ended with ${w.exit_code}, error_code ${w.error_code}`);
  check(!(await exists(ctx, t)), `a cut tree_write left ${t}`);
  // an offset before what came is refused
  r = await ok(ctx.c.tree_write({ path: t, data: treeSample() }));
  await err("invalid_argument", ctx.c.proc_write({ proc: r.proc, data: enc.encode("x"), offset: 10 }));
  await ok(ctx.c.proc_signal({ proc: r.proc, signal: "KILL" }));
}

async function tree_write_empty_path(ctx) {
  // an empty archive, so a responder that took "" has nothing to put there
  const end = new Uint8Array(1024);
  const e = await err("not_found", ctx.c.tree_write({ path: "", data: end, eof: true }));
  check(e.message.includes("empty"), `the message does not say the path is empty: ${e.message}`);
  // and as the start of a stream, KILLed if it opens
  let r;
  try {
    r = await ctx.c.tree_write({ path: "", data: end });
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    check(e.code === "not_found", `a stream to '': expected not_found, got ${e.code}: ${e.message}`);
    return;
  }
  await ctx.c.proc_signal({ proc: r.proc, signal: "KILL" });
  throw new Fail("a stream to '': expected not_found, got a handle");
}

/** tree_read of `path` followed to its end: the members as 'kind mode name size' lines,
 * the file bytes, the exit. Skip where nothing can follow it. */
async function treeReadStream(ctx, path, exclude) {
  let p;
  try {
    p = await ctx.c.tree_read(exclude ? { path, exclude } : { path });
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    if (e.code === "unsupported") throw new Skip(`n/a: tree_read cannot be followed here: ${e.message}`);
    throw new Fail(`tree_read ${path}: ${e.code}: ${e.message}`);
  }
  const f = await follow(p);
  check(f.exit && f.exit.exit_code === 0, `tree_read ended with ${f.exit?.exit_code}: ${f.exit?.error}`);
  const lines = [];
  let bytes = 0;
  const rd = new TarReader({
    member: (m) => {
      const kind = m.type === "dir" ? "d" : m.type === "file" ? "f" : "l";
      lines.push(`${kind} ${m.mode.toString(8)} ${m.path || "."}${m.link ? ` -> ${m.link}` : ""} ${m.size}`);
    },
    data: (d) => (bytes += d.length),
  });
  try {
    rd.feed(new Uint8Array(f.stdout));
    rd.end();
  } catch (e) {
    throw new Fail(`tree_read's stream of ${f.stdout.length} bytes: ${e.message}`);
  }
  return { lines, bytes, exit: f.exit };
}

async function tree_read_roundtrip(ctx) {
  const t = ctx.P("t");
  await ok(ctx.c.tree_write({ path: t, data: treeSample(), eof: true }));
  let r = await treeReadStream(ctx, t);
  // a symlink's mode is whatever the system keeps: compare without it
  const got = r.lines.map((x) => (x.startsWith("l ") ? "l 777" + x.slice(x.indexOf(" ", 2)) : x));
  const want = ["d 755 . 0", "f 644 a.txt 6", "f 755 run.sh 10", "d 750 sub 0", "f 644 sub/empty 0", "l 777 sub/link -> ../a.txt 0", "f 600 sub/secret 1"];
  check(got.join("\n") === want.join("\n"), `tree_read sent\n${got.join("\n")}\nwant\n${want.join("\n")}`);
  check(r.bytes === 17 && r.exit.entries === 6 && r.exit.bytes === 17, `${r.bytes} bytes of data; exit says ${r.exit.entries} entries, ${r.exit.bytes} bytes`);
  r = await treeReadStream(ctx, t, ["*.sh", "sub"]);
  check(r.lines.join("\n") === "d 755 . 0\nf 644 a.txt 6", `excluding *.sh and sub sent\n${r.lines.join("\n")}`);
}

/** tree_read's refusal of `path`: the call fails, nothing is followed. */
async function treeReadError(ctx, path, code) {
  let p;
  try {
    p = await ctx.c.tree_read({ path });
  } catch (e) {
    if (!(e instanceof asp.AspError)) throw e;
    if (e.code === "unsupported") throw new Skip(`n/a: ${e.message}`);
    check(e.code === code, `tree_read ${path}: expected ${code}, got ${e.code}: ${e.message}`);
    return e;
  }
  p.close();
  throw new Fail(`tree_read ${path}: expected ${code}, got a stream`);
}

async function tree_read_errors(ctx) {
  await treeReadError(ctx, ctx.P("missing"), "not_found");
  await ok(ctx.c.tree_write({ path: ctx.P("t"), data: treeSample(), eof: true }));
  await treeReadError(ctx, ctx.P("t/a.txt"), "not_a_directory");
}

async function tree_read_empty_path(ctx) {
  const e = await treeReadError(ctx, "", "not_found");
  check(e.message.includes("empty"), `the message does not say the path is empty: ${e.message}`);
}

const CASES = [
  hello_fields, exec_command_shell, exec_argv_direct, exec_invalid_params, exec_missing_program,
  exec_exit_codes, exec_signal_name, exec_stdin_binary, exec_stdin_closed, exec_large_io,
  exec_large_output, exec_max_output, exec_env, exec_fresh_process, exec_cwd, exec_cwd_errors,
  exec_timeout_kills_group, exec_timeout_escalates_to_kill, exec_background_holds_output,
  exec_background_timeout, exec_background_detached, exec_own_process_group, exec_no_inherited_fds,
  exec_concurrent, read_ranges, read_whole_binary, read_large, read_errors, write_replace,
  write_offset, write_append, write_mkdirs, write_mode, write_atomic, write_invalid_combos,
  write_binary, write_errors, stat_file_dir, stat_symlink, stat_special, stat_mtime, stat_errors,
  list_sorted_bytewise, list_types, list_errors, mkdir_basic, mkdir_parents, mkdir_errors,
  remove_file_and_dir, remove_not_empty, remove_recursive, remove_symlink_to_dir,
  rename_overwrite, rename_no_overwrite, rename_errors_and_dirs, hostile_names, hostile_exec_args,
  spawn_output_live, spawn_output_order, spawn_stdin_binary, spawn_timeout_kills_group, spawn_errors,
  proc_signal_each, proc_wait_timeout, proc_list_fields, proc_attach_replay, proc_attach_truncated, tty_spawn, tty_resize,
];

// Cases whose list comes from the C table itself (`asp conformance --list`), by prefix: each
// of its names runs the body of that name here, and a name without one fails, so a case
// added to the table is run here too or shows up as missing.
const TABLE_PREFIXES = ["tree_"];
const TABLE_BODIES = new Map(
  [
    tree_write_small,
    tree_write_chunked,
    tree_write_merge,
    tree_write_hostile,
    tree_write_cancel,
    tree_write_empty_path,
    tree_read_roundtrip,
    tree_read_errors,
    tree_read_empty_path,
  ].map((f) => [
    f.name,
    f,
  ]),
);

/** [name, body or undefined] of the C table's cases under TABLE_PREFIXES, in its order. */
function tableCases(aspCli) {
  const out = [];
  const list = execFileSync(aspCli, ["conformance", "--list"], { encoding: "utf8", timeout: 60000 });
  for (const line of list.split("\n")) {
    const name = line.split(" ")[0];
    if (TABLE_PREFIXES.some((p) => name.startsWith(p))) out.push([name, TABLE_BODIES.get(name)]);
  }
  if (!out.length) throw new Error(`${aspCli} conformance --list names no case starting ${TABLE_PREFIXES.join(" or ")}`);
  return out;
}

async function runCase(client, root, fn) {
  const ctx = new Ctx(client, root, fn.name);
  const t0 = monoMs();
  let status = "PASS",
    msg = "";
  try {
    try {
      await client.mkdir({ path: ctx.dir });
    } catch (e) {
      if (e.code !== "already_exists") throw new Fail(`cannot create the case directory ${ctx.dir}: ${e.code}: ${e.message}`);
      await client.remove({ path: ctx.dir, recursive: true });
      await client.mkdir({ path: ctx.dir });
    }
    await fn(ctx);
  } catch (e) {
    if (e instanceof Skip) [status, msg] = ["SKIP", e.message];
    else if (e instanceof Fail) [status, msg] = ["FAIL", e.message];
    else if (e instanceof asp.AspError) [status, msg] = ["FAIL", `unexpected ${e.code}: ${e.message}`];
    else [status, msg] = ["FAIL", `exception: ${e?.stack ?? e}`];
  }
  if (status !== "FAIL") {
    try {
      await client.remove({ path: ctx.dir, recursive: true });
    } catch (e) {
      [status, msg] = ["FAIL", `cleanup: remove ${ctx.dir}: ${e.code}: ${e.message}`];
    }
  }
  return [status, msg, monoMs() - t0];
}

async function main() {
  const args = process.argv.slice(2);
  const opt = {};
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--stdio") {
      opt.stdio = args.slice(i + 1);
      break;
    }
    opt[args[i].replace(/^--/, "")] = args[++i];
  }
  asp = await import(pathToFileURL(`${opt.sdk}/dist/index.js`).href);
  asp_str = (await import(pathToFileURL(`${opt.sdk}/dist/wire.js`).href)).strFromBytes;
  TarReader = (await import(pathToFileURL(`${opt.sdk}/dist/tar.js`).href)).TarReader;
  if (!opt.table) throw new Error("--table ASP (the asp CLI, whose conformance --list names the tree cases) is needed");
  HOSTILE = [
    "with space", "quote'single", 'dq"x', "$(touch pwned)", "`touch pwned2`", "new\nline",
    "-leading-dash", "--", "semi;colon&amp|pipe", "tab\tx", "back\\slash", "*glob?[a]", "~tilde",
    "percent%s%n", b("\xff\xfe raw"),
  ];
  let client;
  if (opt.stdio) client = await asp.Client.stdio(opt.stdio);
  else if (opt.http)
    client = asp.Client.http(opt.http, opt.token, { websocket: opt.websocket === undefined ? undefined : opt.websocket === "true" });
  else client = await asp.Client.fromConfig(opt.config);
  const label = opt.label ?? client.transportName;
  const root = `/tmp/asp-sdk-ts-conf-${process.pid}-${Date.now()}`;
  await client.mkdir({ path: root });
  const counts = { PASS: 0, FAIL: 0, SKIP: 0 };
  const t0 = monoMs();
  for (const [name, fn] of CASES.map((f) => [f.name, f]).concat(tableCases(opt.table))) {
    if (opt.only && !name.includes(opt.only)) continue;
    const [status, msg, ms] = fn ? await runCase(client, root, fn) : ["FAIL", "the C table has this case; this driver has no body for it", 0];
    counts[status]++;
    console.log(`${status} ${name.padEnd(34)} ${ms.toFixed(0).padStart(6)} ms${msg ? "  " + msg : ""}`);
  }
  try {
    await client.remove({ path: root, recursive: true });
  } catch {
    // the root may be gone already
  }
  await client.close();
  const n = counts.PASS + counts.FAIL + counts.SKIP;
  console.log(`typescript SDK over ${label}: ${n} cases in ${((monoMs() - t0) / 1000).toFixed(1)} s`);
  console.log(`${counts.PASS} passed, ${counts.FAIL} failed, ${counts.SKIP} skipped`);
  process.exitCode = counts.FAIL ? 1 : 0;
}

await main();
