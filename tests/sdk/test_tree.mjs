#!/usr/bin/env node
// The TypeScript SDK's trees, the same checks as test_tree.py: the shared tar vectors
// through tar.ts's decoder and unpacker (a refusal leaves nothing) and through the SDK's
// tree_write into a real asp-agent (one message and split by a proc_write), uploadDir and
// downloadDir against a real asp-agent over stdio and over HTTP (asp-agent --listen; with
// websocket false an upload by POST alone) (kinds, modes, mtimes before 1970 and
// past ustar's, long names and links, a chunked tree, exclude, merging, a conflict, a
// symlink out that a later tree would write through, both ways), and a hostile responder
// (hostile_tree.py).
// usage: node test_tree.mjs SDK_DIR AGENT TAR_CASES_JSON HOSTILE_PY
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { test, finish, startListener } from "./tap.mjs";

const [sdk, agentArg, casesPath, hostilePy] = process.argv.slice(2);
const agent = path.resolve(agentArg);
const asp = await import(pathToFileURL(`${sdk}/dist/index.js`).href);
const tar = await import(pathToFileURL(`${sdk}/dist/tar.js`).href);
const work = fs.mkdtempSync(path.join(os.tmpdir(), "asp-sdk-tree-ts-"));

function assert(cond, msg = "assertion failed") {
  if (!cond) throw new Error(msg);
}

function fresh(name) {
  const d = path.join(work, name);
  fs.rmSync(d, { recursive: true, force: true });
  fs.mkdirSync(d, { recursive: true });
  return d;
}

// ---- the shared vectors ----------------------------------------------------------------
const doc = JSON.parse(fs.readFileSync(casesPath, "utf8"));
for (const c of doc.cases) {
  const data = new Uint8Array(fs.readFileSync(path.join(path.dirname(casesPath), c.file)));
  await test(`${c.file}: ${c.expect}${c.member ? ` naming ${c.member}` : ""}`, async () => {
    for (const step of [0, data.length < 20000 ? 1 : 511]) {
      const r = new tar.TarReader();
      let err = null;
      try {
        if (step) for (let i = 0; i < data.length; i += step) r.feed(data.subarray(i, i + step));
        else r.feed(data);
        r.end();
      } catch (e) {
        err = e;
      }
      if (c.expect === "ok") {
        assert(!err, `step ${step}: ${err?.message}`);
        assert(r.entries === c.entries && r.bytes === c.bytes, `step ${step}: ${r.entries} entries, ${r.bytes} bytes`);
      } else {
        assert(err && err.code === c.expect, `step ${step}: got ${err?.code}: ${err?.message}`);
        assert(!c.member || err.message.includes(c.member), `step ${step}: ${err.message}`);
      }
    }
    const box = fresh("vec");
    let err = null;
    const u = new tar.Unpacker(path.join(box, "t"), "test");
    try {
      for (let i = 0; i < data.length; i += 777) u.feed(data.subarray(i, i + 777));
      u.finish();
    } catch (e) {
      err = e;
    } finally {
      u.close();
    }
    const left = fs.readdirSync(box);
    assert((err === null) === (c.expect === "ok"), `unpacked: ${err?.message}`);
    assert(JSON.stringify(left) === JSON.stringify(c.expect === "ok" ? ["t"] : []), `left: ${left}`);
    assert(!fs.existsSync("/tmp/asp-escape"), "/tmp/asp-escape exists");
  });
}

await test("a stream that names no root makes the target as mkdir would, under the umask", async () => {
  const box = fresh("noroot");
  const body = new TextEncoder().encode("x");
  const stream = new Uint8Array(Buffer.concat([tar.tarHeader({ type: "file", path: "f", mode: 0o644, mtime: 0, size: 1 }), body, new Uint8Array(511), tar.END]));
  const old = process.umask(0o027);
  try {
    const u = new tar.Unpacker(path.join(box, "t"), "test");
    u.feed(stream);
    u.finish();
    u.close();
  } finally {
    process.umask(old);
  }
  const mode = fs.statSync(path.join(box, "t")).mode & 0o7777;
  assert(mode === 0o750, `mode ${mode.toString(8)}`);
});

// ---- a tree to copy --------------------------------------------------------------------
function makeTree(root) {
  fs.mkdirSync(path.join(root, "sub", "deeper"), { recursive: true });
  fs.mkdirSync(path.join(root, "empty-dir"));
  const files = { "a.txt": ["hello\n", 0o644], "run.sh": ["#!/bin/sh\n", 0o755], "sub/secret": ["s", 0o600], ["sub/deeper/" + "n".repeat(200)]: ["long", 0o640] };
  for (const [rel, [d, mode]] of Object.entries(files)) {
    const p = path.join(root, rel);
    fs.writeFileSync(p, d);
    fs.chmodSync(p, mode);
    fs.utimesSync(p, 1500000000, 1500000000);
  }
  fs.symlinkSync("a.txt", path.join(root, "link"));
  fs.symlinkSync("../../../etc/passwd", path.join(root, "sub", "out"));
  fs.mkdirSync(path.join(root, "ro"));
  fs.writeFileSync(path.join(root, "ro", "f"), "r");
  fs.chmodSync(path.join(root, "ro"), 0o555);
  for (const d of ["sub/deeper", "sub", "empty-dir", "ro", ""]) fs.utimesSync(path.join(root, d), 1234567890, 1234567890);
}

/** A tree's listing; with `keep`, as a copy keeps it (setuid and setgid dropped). */
/** Names are read and shown as bytes (latin1), so a name that is not UTF-8 counts exactly. */
function listing(root, keep = false) {
  const out = [];
  const walk = (rel) => {
    for (const nb of fs.readdirSync(Buffer.from(path.join(root, rel), "latin1"), { encoding: "buffer" }).sort(Buffer.compare)) {
      const n = nb.toString("latin1");
      const r = rel ? `${rel}/${n}` : n;
      const p = Buffer.from(path.join(Buffer.from(root).toString("latin1"), r), "latin1");
      const st = fs.lstatSync(p);
      const mode = (st.mode & (keep ? 0o1777 : 0o7777)).toString(8);
      if (st.isSymbolicLink()) out.push(`${r} l ${fs.readlinkSync(p, { encoding: "buffer" }).toString("latin1")}`);
      else if (st.isDirectory()) {
        out.push(`${r} d ${mode} ${Math.floor(st.mtimeMs / 1000)}`);
        walk(r);
      } else out.push(`${r} f ${mode} ${Math.floor(st.mtimeMs / 1000)} ${crypto.createHash("sha1").update(fs.readFileSync(p)).digest("hex")}`);
    }
  };
  walk("");
  return out.sort().join("\n");
}

// What a tree may hold past the common: mtimes before 1970 (one between seconds) and past
// ustar's 11 octal digits, names and a link target longer than ustar holds, a newline,
// UTF-8 and bytes that are not UTF-8 in names, an empty directory of mode 700, setuid
// (not kept). Times go as Dates: Node takes a negative number of seconds as "now".
function makeEdges(root) {
  fs.mkdirSync(path.join(root, "d".repeat(120), "deep"), { recursive: true });
  const long = "d".repeat(120) + "/deep/" + "n".repeat(200);
  const files = { past: -100, "past-frac": -1.5, future: 2 ** 34 + 5, "nl\nname": 1, "\u00e9-utf8": 2, [long]: 3, setuid: 4 };
  for (const [rel, mtime] of Object.entries(files)) {
    const p = path.join(root, rel);
    fs.writeFileSync(p, "x");
    fs.chmodSync(p, rel === "setuid" ? 0o4755 : 0o644);
    fs.utimesSync(p, new Date(mtime * 1000), new Date(mtime * 1000));
  }
  fs.symlinkSync("t".repeat(150), path.join(root, "longlink"));
  fs.symlinkSync("/etc/passwd", path.join(root, "abslink"));
  // a name and a link target that are not UTF-8
  const raw = Buffer.concat([Buffer.from(`${root}/raw-`), Buffer.from([0xff, 0xfe])]);
  fs.writeFileSync(raw, "r");
  fs.symlinkSync(Buffer.from([0x74, 0xff]), Buffer.concat([raw, Buffer.from("-link")]));
  fs.mkdirSync(path.join(root, "emptydir"), 0o700);
  fs.chmodSync(path.join(root, "emptydir"), 0o700);
}

const src = path.join(work, "src");
makeTree(src);
const edges = path.join(work, "edges");
fs.mkdirSync(edges);
makeEdges(edges);
const big = path.join(work, "big");
fs.mkdirSync(big);
for (let i = 0; i < 40; i++) fs.writeFileSync(path.join(big, `f${String(i).padStart(2, "0")}`), crypto.randomBytes(300000));

/** The round trips through one client `c`, in a box of their own named `label`. */
async function roundTrips(label, c) {
  const box = fresh(label);
  const remote = path.join(box, "remote/deep");
  const back = path.join(box, "back");
  await test(`${label}: uploadDir: kinds, modes, mtimes, links; parents made; counts`, async () => {
    const n = await c.uploadDir(src, remote);
    assert(n.entries === 11 && n.bytes === 22, JSON.stringify(n));
    assert(listing(remote) === listing(src), "the uploaded tree differs");
  });
  await test(`${label}: downloadDir: the same tree back, the root's mtime too`, async () => {
    const n = await c.downloadDir(remote, back);
    assert(n.entries === 11 && n.bytes === 22, JSON.stringify(n));
    assert(listing(back) === listing(src), "the downloaded tree differs");
    assert(Math.floor(fs.statSync(back).mtimeMs / 1000) === 1234567890, "root mtime");
  });
  await test(`${label}: a 12 MB tree in chunks, and exclude`, async () => {
    const n = await c.uploadDir(big, path.join(box, "big"));
    assert(n.entries === 40 && n.bytes === 40 * 300000, JSON.stringify(n));
    const m = await c.downloadDir(path.join(box, "big"), path.join(box, "big2"), { exclude: ["f1*"] });
    assert(m.entries === 30, JSON.stringify(m));
    const want = listing(big).split("\n").filter((l) => !l.startsWith("f1")).join("\n");
    assert(listing(path.join(box, "big2")) === want, "the chunked tree differs");
  });
  await test(`${label}: downloadDir merges into an existing directory; a conflict moves nothing`, async () => {
    fs.writeFileSync(path.join(back, "mine.txt"), "mine");
    fs.writeFileSync(path.join(remote, "a.txt"), "changed");
    await c.downloadDir(remote, back);
    assert(fs.readFileSync(path.join(back, "a.txt"), "utf8") === "changed" && fs.existsSync(path.join(back, "mine.txt")), "merge");
    fs.rmSync(path.join(remote, "a.txt"));
    fs.mkdirSync(path.join(remote, "a.txt"));
    let err = null;
    try {
      await c.downloadDir(remote, back);
    } catch (e) {
      err = e;
    }
    assert(err?.code === "not_a_directory", `got ${err?.code}: ${err?.message}`);
    assert(fs.readFileSync(path.join(back, "a.txt"), "utf8") === "changed", "a conflict changed the target");
    assert(!fs.readdirSync(back).some((n) => n.startsWith(".asp-tree")), "a temporary is left");
  });
  await test(`${label}: the edges both ways: mtimes before 1970 and past ustar's, long names and links`, async () => {
    const want = listing(edges, true);
    await c.uploadDir(edges, path.join(box, "edges"));
    let got = listing(path.join(box, "edges"), true);
    assert(got === want, `uploaded:\n${got}\nwant\n${want}`);
    await c.downloadDir(path.join(box, "edges"), path.join(box, "edges2"));
    got = listing(path.join(box, "edges2"), true);
    assert(got === want, `downloaded:\n${got}\nwant\n${want}`);
  });
  await test(`${label}: a symlink out, then a directory of its name: refused both ways, nothing through it`, async () => {
    const outside = fresh(`${label}-outside`);
    const evil = fresh(`${label}-evil`);
    const rt = path.join(box, "evil-remote");
    const lt = path.join(box, "evil-local");
    fs.symlinkSync(outside, path.join(evil, "l"));
    await c.uploadDir(evil, rt);
    fs.rmSync(path.join(evil, "l"));
    fs.mkdirSync(path.join(evil, "l"));
    fs.writeFileSync(path.join(evil, "l", "escape"), "x");
    let err = null;
    try {
      await c.uploadDir(evil, rt);
    } catch (e) {
      err = e;
    }
    assert(err?.code === "not_a_directory" && err.message.includes("'l'"), `upload: ${err?.code}: ${err?.message}`);
    assert(fs.readdirSync(outside).length === 0 && fs.readlinkSync(path.join(rt, "l")) === outside, "upload wrote through the link");
    await c.downloadDir(rt, lt); // the sandbox's link out comes down as a link,
    fs.rmSync(path.join(rt, "l")); // then the sandbox makes a directory of its name
    fs.cpSync(path.join(evil, "l"), path.join(rt, "l"), { recursive: true });
    err = null;
    try {
      await c.downloadDir(rt, lt);
    } catch (e) {
      err = e;
    }
    assert(err?.code === "not_a_directory" && err.message.includes("'l'"), `download: ${err?.code}: ${err?.message}`);
    assert(fs.readdirSync(outside).length === 0 && fs.readlinkSync(path.join(lt, "l")) === outside, "download wrote through the link");
    assert(!fs.readdirSync(lt).some((n) => n.startsWith(".asp-tree")), "a temporary is left");
  });
  await test(`${label}: the shared vectors through tree_write into a real asp-agent: the same answers, nothing left`, async () => {
    const bad = [];
    for (const v of doc.cases) {
      const data = new Uint8Array(fs.readFileSync(path.join(path.dirname(casesPath), v.file)));
      for (const how of ["one message", "split"]) {
        const vbox = fresh(`${label}-vec`);
        const target = path.join(vbox, "t");
        let got;
        try {
          if (how === "one message") {
            const r = await c.tree_write({ path: target, data, eof: true });
            got = ["ok", r.entries, r.bytes];
          } else {
            const h = Math.floor(data.length / 2);
            const r = await c.tree_write({ path: target, data: data.subarray(0, h) });
            await c.proc_write({ proc: r.proc, data: data.subarray(h), offset: h, eof: true }).catch(() => undefined); // the end says why
            const w = await c.proc_wait({ proc: r.proc, timeout_ms: 20000 });
            got = w.exit_code === 0 ? ["ok", w.entries, w.bytes] : [w.error_code, w.error];
          }
        } catch (e) {
          if (!(e instanceof asp.AspError)) throw e;
          got = [e.code, e.message];
        }
        const left = fs.readdirSync(vbox);
        const good =
          v.expect === "ok"
            ? got[0] === "ok" && got[1] === v.entries && got[2] === v.bytes && left.length === 1
            : got[0] === v.expect && got[1].includes(v.member ?? "") && left.length === 0;
        if (!good || fs.existsSync("/tmp/asp-escape")) bad.push(`${v.file} (${how}): ${got.join(" ")}; left ${left}`);
      }
    }
    assert(!bad.length, bad.join("\n"));
  });
  for (const d of [remote, back, path.join(box, "big")]) {
    const fix = (p) => {
      if (!fs.lstatSync(p).isDirectory()) return;
      fs.chmodSync(p, 0o755);
      for (const n of fs.readdirSync(p)) fix(path.join(p, n));
    };
    if (fs.existsSync(d)) fix(d);
  }
}

const c = await asp.Client.stdio([agent, "--stdio"]);
try {
  await roundTrips("stdio", c);
} finally {
  await c.close();
}

// Over HTTP (asp-agent --listen): tree_write's pieces by POST, tree_read on the WebSocket.
const started = await startListener(agent);
if (!started) console.log("skip: over HTTP: the agent was built without HTTP support");
else {
  const [listener, url] = started;
  try {
    const h = asp.Client.http(url);
    try {
      await roundTrips("http", h);
    } finally {
      await h.close();
    }
    await test("http, websocket false: uploadDir by POST alone; downloadDir unsupported naming the WebSocket", async () => {
      const box = fresh("http-post");
      const p = asp.Client.http(url, undefined, { websocket: false });
      try {
        const n = await p.uploadDir(src, path.join(box, "t"));
        assert(n.entries === 11 && n.bytes === 22 && listing(path.join(box, "t")) === listing(src), JSON.stringify(n));
        let err = null;
        try {
          await p.downloadDir(path.join(box, "t"), path.join(box, "back"));
        } catch (e) {
          err = e;
        }
        assert(err?.code === "unsupported" && err.message.includes("WebSocket"), `got ${err?.code}: ${err?.message}`);
        assert(fs.readdirSync(box).join() === "t", `left: ${fs.readdirSync(box)}`);
      } finally {
        await p.close();
      }
    });
  } finally {
    listener.kill("SIGTERM");
  }
}

await test("a hostile tree_read stream is refused naming its member and leaves nothing", async () => {
  const box = fresh("hostile");
  const h = await asp.Client.stdio(["/usr/bin/python3", hostilePy, path.join(path.dirname(casesPath), "symlink-then-file.tar")]);
  let err = null;
  try {
    await h.downloadDir("/anything", path.join(box, "t"));
  } catch (e) {
    err = e;
  } finally {
    await h.close();
  }
  assert(err?.code === "invalid_argument" && err.message.includes("l/escape"), `got ${err?.code}: ${err?.message}`);
  assert(fs.readdirSync(box).length === 0, `left: ${fs.readdirSync(box)}`);
});

const fixAll = (p) => {
  try {
    if (!fs.lstatSync(p).isDirectory()) return;
    fs.chmodSync(p, 0o755);
    for (const n of fs.readdirSync(p)) fixAll(path.join(p, n));
  } catch {}
};
fixAll(work);
fs.rmSync(work, { recursive: true, force: true });
finish();
