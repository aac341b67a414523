// asp mcp driven by the official MCP TypeScript SDK (Client + StdioClientTransport), against
// a real sandbox: asp-agent over stdio, or sshd in native mode (through sshd_helper).
// usage: node test_mcp.mjs ASP AGENT SRCDIR stdio|ssh [SSHD_HELPER]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';

const [asp, agent, srcdir, mode, helper] = process.argv.slice(2).map((a, i) => (i === 3 ? a : a && path.resolve(a)));
const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'asp-mcp-')));
const work = path.join(root, 'w');
fs.mkdirSync(work);
const cfgPath = path.join(root, 'asp.json');
let passed = 0, failed = 0;
const cleanups = [];

// Every wait on a condition has a bound; nothing sleeps as synchronisation.
async function until(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function test(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}\n  ${(e && e.stack) || e}`);
  }
}

async function startSandbox() {
  if (mode === 'stdio') {
    fs.writeFileSync(cfgPath, JSON.stringify({
      version: 1, transport: 'stdio', cwd: work, env: { LANG: 'C.UTF-8' },
      stdio: { command: [agent, '--stdio'] },
    }));
    return;
  }
  const h = spawn(helper, [cfgPath, work], { stdio: ['pipe', 'pipe', 'inherit'] });
  cleanups.push(() => h.stdin.end());
  const rl = createInterface({ input: h.stdout });
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('sshd_helper did not get ready in 60 s')), 60000);
    rl.once('line', (l) => { clearTimeout(t); l === 'ready' ? resolve() : reject(new Error(l)); });
    h.once('exit', (code) => { clearTimeout(t); reject(new Error(`sshd_helper exited ${code}`)); });
  });
}

async function connect(extra = []) {
  const transport = new StdioClientTransport({
    command: asp, args: ['--config', cfgPath, 'mcp', ...extra], stderr: 'inherit',
  });
  const client = new Client({ name: 'asp-mcp-test', version: '1.0.0' });
  await client.connect(transport);
  cleanups.push(() => client.close());
  return client;
}

const text = (res) => res.content.map((c) => c.text).join('');
async function call(client, name, args, opts) {
  const res = await client.callTool({ name, arguments: args }, undefined,
                                    { timeout: 120000, ...opts });
  return { text: text(res), isError: !!res.isError };
}
// Output with the scratch folder replaced, for golden files.
const norm = (s) => s.split(work).join('$W');
function golden(name, got) {
  const file = path.join(srcdir, 'golden', name);
  if (process.env.ASP_MCP_REGOLD) fs.writeFileSync(file, got);
  assert.equal(got, fs.readFileSync(file, 'utf8'), `golden ${name}`);
}

// Raw JSON-RPC: version negotiation, ping, unknown method and tool, the stateless
// revision, without the SDK.
async function raw(lines) {
  const p = spawn(asp, ['--config', cfgPath, 'mcp'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const rl = createInterface({ input: p.stdout });
  const got = [];
  const done = new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('raw: no answer in 60 s')), 60000);
    rl.on('line', (l) => {
      got.push(JSON.parse(l));
      if (got.length === lines.filter((x) => x.id !== undefined).length) { clearTimeout(t); resolve(); }
    });
  });
  for (const l of lines) p.stdin.write(JSON.stringify(l) + '\n');
  await done;
  p.stdin.end();
  await new Promise((r) => p.once('exit', r));
  return got;
}

try {
  await startSandbox();

  await test('initialize negotiates 2025-06-18 and 2025-11-25; ping; unknown method and tool', async () => {
    const init = (id, v) => ({ jsonrpc: '2.0', id, method: 'initialize',
      params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 'raw', version: '0' } } });
    const r = await raw([init(1, '2025-06-18'), { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', id: 2, method: 'ping' }, { jsonrpc: '2.0', id: 3, method: 'nope' },
      { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'nope', arguments: {} } }]);
    const byId = Object.fromEntries(r.map((m) => [m.id, m]));
    assert.equal(byId[1].result.protocolVersion, '2025-06-18');
    assert.ok(byId[1].result.capabilities.tools);
    assert.deepEqual(byId[2].result, {});
    assert.equal(byId[3].error.code, -32601);
    assert.equal(byId[4].error.code, -32602);
    const r2 = await raw([init('a', '2025-11-25')]);
    assert.equal(r2[0].result.protocolVersion, '2025-11-25');
    const r3 = await raw([init('b', '1999-01-01')]);
    assert.equal(r3[0].result.protocolVersion, '2025-11-25');
  });

  await test('2026-07-28 without initialize: server/discover, resultType, ttlMs, -32022', async () => {
    const meta = (v) => ({ _meta: { 'io.modelcontextprotocol/protocolVersion': v,
      'io.modelcontextprotocol/clientCapabilities': {} } });
    const r = await raw([
      { jsonrpc: '2.0', id: 1, method: 'server/discover', params: meta('2026-07-28') },
      { jsonrpc: '2.0', id: 2, method: 'tools/list', params: meta('2026-07-28') },
      { jsonrpc: '2.0', id: 3, method: 'tools/call',
        params: { name: 'bash', arguments: { command: 'echo stateless' }, ...meta('2026-07-28') } },
      { jsonrpc: '2.0', id: 4, method: 'tools/list', params: meta('2099-01-01') },
      { jsonrpc: '2.0', id: 5, method: 'tools/list' }]);
    const byId = Object.fromEntries(r.map((m) => [m.id, m]));
    const d = byId[1].result;
    assert.equal(d.supportedVersions[0], '2026-07-28');
    assert.ok(d.supportedVersions.includes('2025-11-25') && d.supportedVersions.includes('2025-06-18'));
    assert.ok(d.capabilities.tools);
    assert.equal(d.resultType, 'complete');
    assert.equal(d._meta['io.modelcontextprotocol/serverInfo'].name, 'asp');
    assert.equal(d.cacheScope, 'private');
    assert.ok(d.ttlMs >= 0);
    const l = byId[2].result;
    assert.equal(l.resultType, 'complete');
    assert.ok(l.tools.some((t) => t.name === 'read'));
    assert.ok(l.ttlMs >= 0 && l.cacheScope === 'private');
    assert.equal(byId[3].result.resultType, 'complete');
    assert.equal(byId[3].result.content[0].text, 'stateless');
    assert.equal(byId[4].error.code, -32022);
    assert.deepEqual(byId[4].error.data, { supported: ['2026-07-28'], requested: '2099-01-01' });
    assert.equal(byId[5].result.resultType, undefined); // 2025-11-25 and earlier: as before
  });

  const client = await connect();

  await test('tools/list: every tool with an object JSON Schema and a description', async () => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['apply_patch', 'bash', 'bash_list',
      'bash_output', 'edit', 'exec_command', 'glob', 'grep', 'kill_bash', 'ls', 'read', 'write',
      'write_stdin']);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', t.name);
      assert.ok(t.description.length > 40, t.name);
      assert.ok(Array.isArray(t.inputSchema.required), t.name);
    }
  });

  await test('--tools chooses the set', async () => {
    const c2 = await connect(['--tools', 'read,grep']);
    const { tools } = await c2.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['grep', 'read']);
    await assert.rejects(c2.callTool({ name: 'bash', arguments: { command: 'true' } }));
  });

  // The tree the format checks look at: written through the tools, mtimes set for glob.
  const tree = {
    'src/main.c': '#include "util.h"\n\nint main(void)\n{\n\treturn util_answer() - 42;\n}\n',
    'src/util.c': '#include "util.h"\n\nint util_answer(void)\n{\n\treturn 42;\n}\n',
    'src/util.h': 'int util_answer(void);\n',
    'README.md': '# demo\n\nThe answer is 42.\n',
    'docs/guide.md': 'Call util_answer() for THE ANSWER.\n',
    '.git/config': '[core] answer = 42\n',
    'empty.txt': '',
  };
  await test('write creates files and parents; bash sets up the rest', async () => {
    for (const [p, c] of Object.entries(tree)) {
      const r = await call(client, 'write', { file_path: p, content: c });
      assert.equal(r.isError, false, r.text);
      assert.match(r.text, /File created successfully at: /);
    }
    const again = await call(client, 'write', { file_path: 'README.md', content: tree['README.md'] });
    assert.match(again.text, /has been updated/);
    const r = await call(client, 'bash', { command:
      'printf "a\\0b" > bin.dat && awk "BEGIN{for(i=1;i<=2500;i++) print \\"line \\" i}" > long.txt && ' +
      'touch -d 2019-01-01 docs/guide.md && touch -d 2019-06-01 README.md && touch -d 2020-01-01 src/util.h && touch -d 2021-01-01 src/util.c && touch -d 2022-01-01 src/main.c' });
    assert.equal(r.isError, false, r.text);
    assert.equal(fs.readFileSync(path.join(work, 'src/util.c'), 'utf8'), tree['src/util.c']);
  });

  await test('read: cat -n format, offset/limit, empty, binary, directory, missing (golden)', async () => {
    const parts = [];
    for (const args of [{ file_path: 'src/main.c' }, { file_path: path.join(work, 'src/main.c'), offset: 3, limit: 2 },
      { file_path: 'empty.txt' }, { file_path: 'bin.dat' }, { file_path: 'src' }, { file_path: 'nope.c' },
      { file_path: 'long.txt', offset: 1998, limit: 5 }, { file_path: 'long.txt', offset: 2499 }]) {
      const r = await call(client, 'read', args);
      parts.push(`# read ${JSON.stringify(args).split(work).join('$W')} isError=${r.isError}\n${norm(r.text)}\n`);
    }
    const def = await call(client, 'read', { file_path: 'long.txt' });
    assert.equal(def.text.split('\n').filter((l) => /^\s+\d+\t/.test(l)).length, 2000);
    golden('read.txt', parts.join(''));
  });

  await test('grep: files_with_matches, content with context, count, -i, glob, head_limit (golden)', async () => {
    const parts = [];
    for (const args of [{ pattern: '42' }, { pattern: 'util_answer', output_mode: 'content' },
      { pattern: 'return', output_mode: 'content', '-C': 1, glob: '*.c' },
      { pattern: 'answer', output_mode: 'count' }, { pattern: 'the answer', '-i': true },
      { pattern: 'util_\\w+\\(', output_mode: 'content', path: 'src', glob: '*.{c,h}', head_limit: 2 },
      { pattern: 'no such text' }, { pattern: '(', output_mode: 'content' }]) {
      const r = await call(client, 'grep', args);
      parts.push(`# grep ${JSON.stringify(args)} isError=${r.isError}\n${norm(r.text)}\n`);
    }
    golden('grep.txt', parts.join(''));
  });

  await test('glob: newest first, braces, **, .git skipped (golden)', async () => {
    const parts = [];
    for (const args of [{ pattern: 'src/*.{c,h}' }, { pattern: '**/*.md' }, { pattern: '*.md' },
      { pattern: '**/config' }, { pattern: '*.rs' }, { pattern: '*', path: 'nope' }]) {
      const r = await call(client, 'glob', args);
      parts.push(`# glob ${JSON.stringify(args)} isError=${r.isError}\n${norm(r.text)}\n`);
    }
    golden('glob.txt', parts.join(''));
  });

  await test('ls (golden)', async () => {
    const r = await call(client, 'ls', { path: work, ignore: ['*.dat'] });
    golden('ls.txt', norm(r.text) + '\n');
  });

  await test('edit: failures tell the model what to do', async () => {
    const cases = [
      [{ file_path: 'src/util.c', old_string: 'return 41;', new_string: 'x' }, /not found in .*util\.c.*Read the file again/s],
      [{ file_path: 'src/main.c', old_string: '\n', new_string: '\r\n' }, /occurs 6 times.*replace_all/s],
      [{ file_path: 'src/util.c', old_string: 'same', new_string: 'same' }, /the same/],
      [{ file_path: 'src/missing.c', old_string: 'a', new_string: 'b' }, /does not exist/],
      [{ file_path: 'src/util.c', new_string: 'b' }, /old_string/],
    ];
    for (const [args, re] of cases) {
      const r = await call(client, 'edit', args);
      assert.equal(r.isError, true, JSON.stringify(args));
      assert.match(r.text, re);
    }
    assert.equal(fs.readFileSync(path.join(work, 'src/util.c'), 'utf8'), tree['src/util.c']);
    const ok = await call(client, 'edit', { file_path: 'README.md', old_string: '42', new_string: 'forty-two' });
    assert.equal(ok.isError, false, ok.text);
    const all = await call(client, 'edit', { file_path: 'src/main.c', old_string: '\t', new_string: '    ', replace_all: true });
    assert.match(all.text, /1 replacement/);
    assert.match(fs.readFileSync(path.join(work, 'README.md'), 'utf8'), /forty-two/);
  });

  await test('apply_patch: a bad hunk changes nothing; bad syntax is explained', async () => {
    const before = fs.readFileSync(path.join(work, 'src/util.c'), 'utf8');
    const bad = '*** Begin Patch\n*** Add File: added.txt\n+new\n*** Update File: src/util.c\n@@\n-\treturn 41;\n+\treturn 0;\n*** End Patch\n';
    const r = await call(client, 'apply_patch', { input: bad });
    assert.equal(r.isError, true);
    assert.match(r.text, /src\/util\.c/);
    assert.equal(fs.existsSync(path.join(work, 'added.txt')), false);
    assert.equal(fs.readFileSync(path.join(work, 'src/util.c'), 'utf8'), before);
    const r2 = await call(client, 'apply_patch', { input: 'diff --git a/x b/x\n' });
    assert.equal(r2.isError, true);
    assert.match(r2.text, /\*\*\* Begin Patch/);
    const r3 = await call(client, 'apply_patch', { input: '*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch\n' });
    assert.equal(r3.isError, true);
    assert.match(r3.text, /nope\.txt/);
    const r4 = await call(client, 'apply_patch', { input: '*** Begin Patch\n*** Add File: README.md\n+x\n*** End Patch\n' });
    assert.equal(r4.isError, true);
    assert.match(r4.text, /already exists/);
  });

  await test('bash: exit code, output cap keeps head and tail, timeout', async () => {
    const r = await call(client, 'bash', { command: 'echo out; echo err >&2; exit 3' });
    assert.equal(r.isError, true);
    assert.equal(r.text, 'out\nerr\nExit code 3');
    const big = await call(client, 'bash', { command: 'seq 1 100000' });
    assert.ok(big.text.length < 31000, `${big.text.length}`);
    assert.match(big.text, /^1\n2\n/);
    assert.match(big.text, /\n100000$/);
    assert.match(big.text, /characters of output cut/);
    const t = await call(client, 'bash', { command: 'sleep 60', timeout: 1000 });
    assert.equal(t.isError, true);
    assert.match(t.text, /timed out after 1000 ms/);
  });

  await test('several calls in flight at once (a waiting bash does not block a write)', async () => {
    // The first call waits for a file that only the second call creates: run one at a
    // time, it would time out.
    const waiting = call(client, 'bash', { command:
      'for i in $(seq 1 600); do [ -e go.flag ] && echo seen && exit 0; sleep 0.1; done; exit 1' });
    const w = await call(client, 'write', { file_path: 'go.flag', content: 'go' });
    assert.equal(w.isError, false);
    const r = await waiting;
    assert.equal(r.text, 'seen');
  });

  await test('eight waiting commands hold back no other call', async () => {
    // A harness may run several long commands at once (a server, a slow test run): each
    // waits here for a file that only the write after them creates. With a fixed pool
    // smaller than eight, the write would queue behind them until they give up.
    const waits = [];
    for (let i = 0; i < 8; i++)
      waits.push(call(client, 'bash', { command:
        'for i in $(seq 1 300); do [ -e many.flag ] && echo seen && exit 0; sleep 0.1; done; exit 1' }));
    const w = await call(client, 'write', { file_path: 'many.flag', content: 'go' });
    assert.equal(w.isError, false);
    for (const r of await Promise.all(waits)) assert.equal(r.text, 'seen');
  });

  await test('a cancelled long bash kills its process group', async () => {
    const ac = new AbortController();
    const p = call(client, 'bash', { command: 'sleep 300 & echo $! > child.pid; wait' }, { signal: ac.signal });
    const pidFile = path.join(work, 'child.pid');
    await until('the command to start', () => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim() !== '');
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    ac.abort();
    await assert.rejects(p);
    const alive = () => { try { process.kill(pid, 0); return true; } catch { return false; } };
    await until('the sleep to die', () => !alive());
    // the server still answers
    const r = await call(client, 'bash', { command: 'echo still here' });
    assert.equal(r.text, 'still here');
  });

  await test('background bash: bash_output in pieces, then kill_bash', async () => {
    const s = await call(client, 'bash', { command: 'for i in 1 2 3; do echo n$i; done', run_in_background: true });
    const id = s.text.match(/bash_\d+/)[0];
    let out = '';
    await until('the background command to finish', async () => {
      const r = await call(client, 'bash_output', { bash_id: id });
      out += r.text.replace(/<status>.*<\/status>/, '').replace(/\(no new output\)/, '');
      return /exited with code 0/.test(r.text);
    });
    assert.deepEqual(out.split('\n').filter(Boolean), ['n1', 'n2', 'n3']);
    const l = await call(client, 'bash', { command: 'echo begun; sleep 300', run_in_background: true });
    const lid = l.text.match(/bash_\d+/)[0];
    await until('output', async () => /begun/.test((await call(client, 'bash_output', { bash_id: lid })).text));
    const k = await call(client, 'kill_bash', { bash_id: lid });
    assert.equal(k.isError, false, k.text);
    await until('the kill', async () => /killed by signal KILL/.test((await call(client, 'bash_output', { bash_id: lid })).text));
    const bad = await call(client, 'bash_output', { bash_id: 'shell-x' });
    assert.equal(bad.isError, true);
  });

  // Codex's unified exec: exec_command starts, write_stdin continues.
  const answer = (t) => {
    const m = t.match(/^Chunk ID: [0-9a-f]{6}\nWall time: \d+\.\d{4} seconds\n(?:Process exited with code (-?\d+)|Process running with session ID (\d+))\nOriginal token count: \d+\nOutput:\n([^]*)$/);
    assert.ok(m, `not a unified exec answer: ${t}`);
    return { code: m[1] === undefined ? null : Number(m[1]), session: m[2] && Number(m[2]), output: m[3] };
  };
  await test('--tools exec_command,write_stdin: Codex\'s schemas, exit codes, a session into cat', async () => {
    const cx = await connect(['--tools', 'exec_command,write_stdin']);
    const { tools } = await cx.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['exec_command', 'write_stdin']);
    const ec = tools.find((t) => t.name === 'exec_command');
    assert.equal(ec.description.split('.')[0], 'Runs a command in a PTY, returning output or a session ID for ongoing interaction');
    assert.deepEqual(Object.keys(ec.inputSchema.properties).sort(),
      ['cmd', 'login', 'max_output_tokens', 'shell', 'tty', 'workdir', 'yield_time_ms']);
    assert.deepEqual(ec.inputSchema.required, ['cmd']);
    const ws = tools.find((t) => t.name === 'write_stdin');
    assert.deepEqual(Object.keys(ws.inputSchema.properties).sort(), ['chars', 'max_output_tokens', 'session_id', 'yield_time_ms']);
    const done = answer((await call(cx, 'exec_command', { cmd: 'echo hello; exit 4', login: false })).text);
    assert.equal(done.code, 4);
    assert.equal(done.output, 'hello\n');
    const s = answer((await call(cx, 'exec_command', { cmd: 'cat', login: false, yield_time_ms: 250 })).text);
    assert.ok(s.session > 0);
    let seen = answer((await call(cx, 'write_stdin', { session_id: s.session, chars: 'meow\n' })).text).output;
    await until('cat to answer', async () => {
      seen += answer((await call(cx, 'write_stdin', { session_id: s.session, yield_time_ms: 5000 })).text).output;
      return seen.includes('meow');
    });
    const end = answer((await call(cx, 'write_stdin', { session_id: s.session, chars: '\u0003' })).text);
    let code = end.code;
    await until('cat to end', async () => {
      if (code === null) code = answer((await call(cx, 'write_stdin', { session_id: s.session })).text).code;
      return code !== null;
    });
    assert.equal(code, 130);
    const gone = await call(cx, 'write_stdin', { session_id: s.session });
    assert.equal(gone.isError, true);
    assert.equal(gone.text, `write_stdin failed: Unknown process id ${s.session}`);
  });

  await test('exec_command with tty drives a Python REPL through write_stdin', async () => {
    const cx = await connect(['--tools', 'exec_command,write_stdin']);
    const r = await call(cx, 'exec_command', { cmd: 'python3', tty: true, yield_time_ms: 1000 });
    if (r.isError && /no terminals/.test(r.text)) {
      console.log(`# n/a: ${r.text}`);
      return;
    }
    let a = answer(r.text);
    assert.equal(a.code, null, r.text);
    const sid = a.session;
    let seen = a.output;
    await until('the prompt', async () => {
      if (seen.includes('>>> ')) return true;
      seen += answer((await call(cx, 'write_stdin', { session_id: sid })).text).output;
      return false;
    });
    seen = answer((await call(cx, 'write_stdin', { session_id: sid, chars: 'print(6*7)\n' })).text).output;
    await until('42', async () => {
      if (/^42\r?$/m.test(seen)) return true;
      seen += answer((await call(cx, 'write_stdin', { session_id: sid })).text).output;
      return false;
    });
    a = answer((await call(cx, 'write_stdin', { session_id: sid, chars: 'exit()\n', yield_time_ms: 5000 })).text);
    await until('the exit', async () => {
      if (a.code !== null) return true;
      a = answer((await call(cx, 'write_stdin', { session_id: sid })).text);
      return false;
    });
    assert.equal(a.code, 0);
  });

  await test('replay of a coding session over a small C project ends with the expected tree', async () => {
    const proj = path.join(work, 'calc');
    fs.cpSync(path.join(srcdir, 'session', 'project'), proj, { recursive: true });
    const sc = await connect();
    const calls = JSON.parse(fs.readFileSync(path.join(srcdir, 'session', 'session.json'), 'utf8'));
    for (const c of calls) {
      const args = { ...c.args };
      for (const k of ['file_path', 'path']) if (args[k]) args[k] = path.join(proj, args[k]);
      if (c.tool === 'glob' || c.tool === 'grep') args.path = args.path || proj;
      if (c.tool === 'bash') args.command = `cd '${proj}' && ${args.command}`;
      if (c.tool === 'apply_patch') args.input = args.input.replace(/^(\*\*\* (?:Add|Update|Delete) File: )/gm, `$1${proj}/`);
      const r = await call(sc, c.tool, args);
      assert.equal(r.isError, !!c.isError, `${c.tool} ${JSON.stringify(c.args)}: ${r.text}`);
      for (const s of c.contains || []) assert.ok(r.text.includes(s), `${c.tool}: ${JSON.stringify(s)} not in ${r.text}`);
    }
    const want = path.join(srcdir, 'session', 'expected');
    assert.deepEqual(fs.readdirSync(proj).sort(), fs.readdirSync(want).sort());
    for (const f of fs.readdirSync(want))
      assert.equal(fs.readFileSync(path.join(proj, f), 'utf8'), fs.readFileSync(path.join(want, f), 'utf8'), f);
  });
} catch (e) {
  failed++;
  console.log(`not ok - setup\n  ${(e && e.stack) || e}`);
} finally {
  for (const c of cleanups.reverse()) { try { await c(); } catch { /* closing */ } }
  fs.rmSync(root, { recursive: true, force: true });
}
console.log(`${mode}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
