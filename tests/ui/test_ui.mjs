// asp ui's page in Debian's Chromium, driven over the DevTools protocol (puppeteer-core),
// against a real sandbox: asp-agent over stdio, sshd in native mode (tests/ssh's
// sshd_helper), or asp-agent --listen over HTTP. In one browser session: browse to a file
// and read it (text pages, an image), download it, upload a file by dropping it and find
// it in the sandbox, see a file created in the sandbox appear, resize the terminal and
// type `echo hi; exit` in it and read it back, follow a process's output (what it wrote
// before first), see the table follow a process's end, send TERM from the table, see a
// session's command. The page says what the transport lacks; nothing it loads comes from
// anywhere but asp (offline). A screenshot of each view goes to OUT_DIR; any console
// error fails the test.
// usage: node test_ui.mjs ASP AGENT OUT_DIR stdio|ssh|http [SSHD_HELPER]
import puppeteer from 'puppeteer-core';
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import assert from 'node:assert/strict';

const [asp, agent, outDir, mode, helper] = process.argv.slice(2).map((a, i) => (i === 3 ? a : a && path.resolve(a)));
const CHROMIUM = process.env.ASP_CHROMIUM || '/usr/bin/chromium';
const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'asp-ui-')));
const work = path.join(root, 'w');
const cfgPath = path.join(root, 'asp.json');
const SESSION = `ui-test-${process.pid}`;
const cleanups = [];
let passed = 0, failed = 0;
const consoleErrors = [];

if (!fs.existsSync(CHROMIUM)) {
  console.log(`${CHROMIUM} is not installed (scripts/install-deps.sh installs chromium): skipped`);
  process.exit(77);
}

// Every wait is on a condition, with a bound; nothing sleeps as synchronisation.
async function until(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end)
      throw new Error(`timed out waiting for ${typeof what === 'function' ? what() : what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok - ${mode}: ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${mode}: ${name}\n  ${(e && e.stack) || e}`);
  }
}

// A line from a child's stdout that `match` accepts, within a bound.
function lineOf(child, match, what, ms = 60000) {
  const rl = createInterface({ input: child.stdout });
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what}: nothing in ${ms / 1000} s`)), ms);
    rl.on('line', (l) => { if (match(l)) { clearTimeout(t); resolve(l); } });
    child.once('exit', (code) => { clearTimeout(t); reject(new Error(`${what} exited ${code}`)); });
  });
}

// A small PNG (a 24x16 gradient), written with zlib so no image file is checked in.
function png() {
  const w = 24, h = 16;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) raw.set([x * 10, y * 15, 200], y * (w * 3 + 1) + 1 + x * 3);
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (b) => { let c = 0xffffffff; for (const x of b) c = crcTable[(c ^ x) & 255] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const c = Buffer.alloc(4); c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

function sandboxFiles() {
  fs.mkdirSync(path.join(work, 'src'), { recursive: true });
  fs.mkdirSync(path.join(work, 'docs'));
  fs.writeFileSync(path.join(work, 'hello.txt'), 'hello world\nsecond line\n');
  fs.writeFileSync(path.join(work, 'src', 'main.c'),
    '#include <stdio.h>\n\nint main(void)\n{\n\tputs("hello from the sandbox");\n\treturn 0;\n}\n');
  fs.writeFileSync(path.join(work, 'README.md'), '# a project in the sandbox\n\nasp ui shows it.\n');
  // more than one viewer page (256 KiB): line numbers go on across pages
  const lines = [];
  for (let i = 1; i <= 30000; i++) lines.push(`log line ${i}: ${'x'.repeat(8 + (i % 17))}`);
  fs.writeFileSync(path.join(work, 'big.log'), lines.join('\n') + '\n');
  fs.writeFileSync(path.join(work, 'docs', 'pic.png'), png());
}

async function startSandbox() {
  if (mode === 'stdio') {
    fs.writeFileSync(cfgPath, JSON.stringify({ version: 1, transport: 'stdio', cwd: work,
      stdio: { command: [agent, '--stdio'] } }));
  } else if (mode === 'http') {
    const log = path.join(root, 'agent.log');
    const out = fs.openSync(log, 'w');
    const p = spawn(agent, ['--listen', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', out] });
    cleanups.push(() => p.kill());
    const line = await until('asp-agent --listen to log its address', () => {
      if (p.exitCode !== null) {
        const text = fs.readFileSync(log, 'utf8');
        if (text.includes('not built with HTTP support')) { console.log('no HTTP support: skipped'); process.exit(77); }
        throw new Error(`asp-agent exited: ${text}`);
      }
      return fs.readFileSync(log, 'utf8').split('\n').find((l) => l.startsWith('asp-agent: listening on '));
    }, 60000);
    const url = line.split(' ')[3].replace(/\/$/, '');
    fs.writeFileSync(cfgPath, JSON.stringify({ version: 1, transport: 'http', cwd: work, http: { url } }));
  } else {
    const h = spawn(helper, [cfgPath, work], { stdio: ['pipe', 'pipe', 'inherit'] });
    cleanups.push(() => h.stdin.end());
    const l = await lineOf(h, () => true, 'sshd_helper');
    if (l !== 'ready') throw new Error(`sshd_helper: ${l}`);
  }
}

// A harness's tool server with a background command of its session, as the page sees it.
async function startSessionCommand() {
  const m = spawn(asp, ['--config', cfgPath, 'mcp', '--session', SESSION], { stdio: ['pipe', 'pipe', 'inherit'] });
  cleanups.push(() => m.kill());
  const answer = lineOf(m, (l) => JSON.parse(l).id === 2, 'asp mcp');
  const send = (o) => m.stdin.write(JSON.stringify(o) + '\n');
  send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'ui-test', version: '0' } } });
  send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'bash', arguments: { command: 'sleep 300', run_in_background: true } } });
  const r = JSON.parse(await answer);
  const id = r.result.content[0].text.match(/bash_\d+/)[0];
  // the command ends with the test, whatever the transport keeps
  cleanups.push(async () => {
    const killed = lineOf(m, (l) => JSON.parse(l).id === 3, 'asp mcp', 30000);
    send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'kill_bash', arguments: { bash_id: id } } });
    await killed;
  });
}

async function startUi() {
  const p = spawn(asp, ['--config', cfgPath, 'ui'], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => p.kill('SIGTERM'));
  return lineOf(p, (l) => l.startsWith('http://'), 'asp ui');
}

const shot = (page, view) => page.screenshot({ path: path.join(outDir, `ui-${mode}-${view}.png`) });
const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
const tab = (page, view) => page.click(`#tabs button[data-view="${view}"]`);
// A click on what a refresh of the listing may redraw meanwhile: again on the new node.
const click = (page, sel) => until(`a click on ${sel}`, () => page.click(sel).then(() => true));

async function main() {
  sandboxFiles();
  await startSandbox();
  await startSessionCommand();
  const url = await startUi();
  const profile = fs.mkdtempSync(path.join(root, 'chromium-'));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true, userDataDir: profile,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           '--window-size=1280,800',
           // offline: anything but loopback (which Chromium never proxies) goes nowhere
           '--proxy-server=http://127.0.0.1:9'],
    defaultViewport: { width: 1280, height: 800 },
  });
  cleanups.push(() => browser.close());
  const downloads = fs.mkdtempSync(path.join(root, 'downloads-'));
  const cdp = await browser.target().createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
  const page = await browser.newPage();
  const foreign = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.protocol !== 'data:' && u.host !== new URL(url).host) foreign.push(r.url());
  });
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  page.on('dialog', (d) => d.dismiss());
  await page.goto(url);
  await page.waitForSelector('body[data-ready="yes"]', { timeout: 60000 });
  const caps = await page.$$eval('#notices li', (l) => l.map((e) => `${e.dataset.cap}: ${e.textContent}`));
  console.log(`# ${mode}: ${await text(page, '#where')}; unavailable: ${caps.length ? caps.join(' | ') : 'nothing'}`);

  await test('the token traded for a cookie: the address bar has none', async () => {
    assert.equal(new URL(page.url()).search, '');
  });

  await test('the page says what this transport lacks, and why', async () => {
    const notices = Object.fromEntries(await page.$$eval('#notices li', (l) => l.map((e) => [e.dataset.cap, e.textContent])));
    if (mode === 'ssh') { // native SSH: no proc_attach, no watch feature in its hello
      assert.deepEqual(Object.keys(notices).sort(), ['attach', 'watch']);
      assert.match(notices.attach, /lacks proc_attach \(its hello\)/);
      assert.match(notices.watch, /no watch feature/);
    } else {
      assert.deepEqual(notices, {});
    }
  });

  await test('the tree and the open folder show the sandbox', async () => {
    await until('the folder listing', () => page.$('#entries tr[data-name="hello.txt"]'));
    assert.equal(await text(page, '#folder-path'), work);
    await until('the tree rooted at the folder', () => page.$(`#tree li.open[data-path="${work}"]`));
    await page.click(`#tree li[data-path="${path.join(work, 'src')}"] > .name`);
    await until('src opened', async () => (await text(page, '#folder-path')) === path.join(work, 'src'));
    await until('main.c listed', () => page.$('#entries tr[data-name="main.c"]'));
    await click(page, '#entries tr[data-name="main.c"] a.file');
    await until('main.c in the viewer', async () => (await text(page, '#viewer-body')).includes('hello from the sandbox'));
    const n = await page.$$eval('#viewer-body ol.code li', (l) => l.length);
    assert.equal(n, 7);
    await shot(page, 'files');
  });

  await test('a large file is paged through byte ranges, line numbers going on', async () => {
    await page.click('#viewer-close');
    await page.click('#folder-up');
    await until('big.log listed', () => page.$('#entries tr[data-name="big.log"]'));
    await click(page, '#entries tr[data-name="big.log"] a.file');
    const size = fs.statSync(path.join(work, 'big.log')).size;
    await until('the first page', async () => (await text(page, '#viewer-range')).startsWith('bytes 1–') &&
      (await text(page, '#viewer-range')).includes(`of ${size}`));
    const first = await page.$eval('#viewer-body ol.code', (o) => ({ start: o.start, n: o.children.length, last: o.lastChild.textContent }));
    assert.equal(first.start, 1);
    await page.click('#viewer-next');
    await until('the second page', async () => (await page.$eval('#viewer-body ol.code', (o) => o.start)) === first.n + 1);
    const second = await page.$eval('#viewer-body ol.code', (o) => o.firstChild.textContent);
    assert.equal(second.split(':')[0], `log line ${first.n + 1}`);
    await page.click('#viewer-prev');
    await until('back to the first page', async () => (await page.$eval('#viewer-body ol.code', (o) => o.start)) === 1);
  });

  await test('an image is shown', async () => {
    await page.click('#viewer-close');
    await page.$eval('#goto-path', (e) => { e.value = ''; });
    await page.type('#goto-path', path.join(work, 'docs'));
    await page.click('#goto button');
    await until('pic.png listed', () => page.$('#entries tr[data-name="pic.png"]'));
    await click(page, '#entries tr[data-name="pic.png"] a.file');
    const w = await until('the image decoded', () => page.$eval('#viewer-body img', (i) => i.complete && i.naturalWidth));
    assert.equal(w, 24);
    await page.click('#viewer-close');
  });

  await test('a file is downloaded from its row and from the viewer', async () => {
    const want = fs.readFileSync(path.join(work, 'docs', 'pic.png'));
    await click(page, '#entries tr[data-name="pic.png"] a.button');
    const got = path.join(downloads, 'pic.png');
    await until('pic.png downloaded', () => fs.existsSync(got) && fs.readFileSync(got).equals(want));
    fs.rmSync(got);
    // a file of several read chunks, from the viewer's button
    await page.click('#folder-up');
    await click(page, '#entries tr[data-name="big.log"] a.file');
    await until('big.log in the viewer', async () => (await text(page, '#viewer-range')).startsWith('bytes 1–'));
    await page.click('#viewer-download');
    const big = fs.readFileSync(path.join(work, 'big.log'));
    const gotBig = path.join(downloads, 'big.log');
    await until('big.log downloaded', () => fs.existsSync(gotBig) && fs.readFileSync(gotBig).equals(big));
    await page.click('#viewer-close');
  });

  await test('a file dropped on the folder is uploaded into the sandbox', async () => {
    await page.$eval('#goto-path', (e) => { e.value = ''; });
    await page.type('#goto-path', work);
    await page.click('#goto button');
    await until('the folder', async () => (await text(page, '#folder-path')) === work);
    const body = 'uploaded through the page\n'.repeat(50000); // 1.3 MB: several chunks
    await page.evaluate((content) => {
      const dt = new DataTransfer();
      dt.items.add(new File([content], 'dropped.txt', { type: 'text/plain' }));
      const drop = document.getElementById('drop');
      drop.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
      drop.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, body);
    const target = path.join(work, 'dropped.txt');
    await until('the upload in the sandbox', () => fs.existsSync(target) && fs.readFileSync(target, 'utf8') === body);
    await until('the upload in the listing', () => page.$('#entries tr[data-name="dropped.txt"]'));
    assert.deepEqual(fs.readdirSync(work).filter((n) => n.includes('.asp-')), []);
  });

  await test('rename, and delete after a confirmation', async () => {
    await click(page, '#entries tr[data-name="dropped.txt"] button:nth-of-type(1)');
    await page.waitForSelector('#dialog[open]');
    await page.$eval('#dialog-input', (e) => { e.value = ''; });
    await page.type('#dialog-input', 'renamed.txt');
    await page.click('#dialog-ok');
    await until('the rename in the sandbox', () => fs.existsSync(path.join(work, 'renamed.txt')) && !fs.existsSync(path.join(work, 'dropped.txt')));
    await until('the renamed file listed', () => page.$('#entries tr[data-name="renamed.txt"]'));
    await click(page, '#entries tr[data-name="renamed.txt"] button:nth-of-type(2)');
    await page.waitForSelector('#dialog[open]');
    await page.click('#dialog-cancel');
    assert.ok(fs.existsSync(path.join(work, 'renamed.txt')), 'cancel keeps the file');
    await click(page, '#entries tr[data-name="renamed.txt"] button:nth-of-type(2)');
    await page.waitForSelector('#dialog[open]');
    await page.click('#dialog-ok');
    await until('the delete in the sandbox', () => !fs.existsSync(path.join(work, 'renamed.txt')));
  });

  await test('a file created in the sandbox appears', async () => {
    const watching = !(await page.$('#notices li[data-cap="watch"]'));
    execFileSync(asp, ['--config', cfgPath, 'write', path.join(work, 'made-in-sandbox.txt')], { input: 'new\n' });
    if (!watching) await page.click('#folder-refresh'); // the page said why it cannot follow changes
    await until('the new file listed', () => page.$('#entries tr[data-name="made-in-sandbox.txt"]'));
    if (watching) {
      await tab(page, 'changes');
      await until('the change logged', async () => (await text(page, '#changes tbody')).includes('made-in-sandbox.txt'));
    } else {
      await tab(page, 'changes');
      assert.match(await text(page, '#watch-state'), /cannot/);
    }
    await shot(page, 'changes');
  });

  await test('the terminal: its size follows the window; echo hi; exit', async () => {
    await tab(page, 'terminal');
    if (await page.$('#notices li[data-cap="terminal"]')) {
      console.log(`# ${mode}: ${await text(page, '#notices li[data-cap="terminal"]')}`);
      await shot(page, 'terminal');
      return;
    }
    const size = async () => (await text(page, '#term-state')).match(/, (\d+)×(\d+)\)$/)?.slice(1).join(' ');
    const rows = () => page.$eval('.xterm-rows', (e) => [...e.children].map((r) => r.textContent.trimEnd()));
    let last = [];
    const screen = (what, fn) => until(() => `${what}: ${JSON.stringify(last)}`, async () => {
      last = (await rows()).filter((l) => l);
      return fn(last) && last;
    });
    await until('the shell', async () => (await text(page, '#term-state')).startsWith('a login shell'));
    const before = await size();
    await page.click('#term');
    await page.keyboard.type('clear; stty size\n');
    await screen(`stty size to say ${before}`, (t) => t.includes(before));
    await page.setViewport({ width: 900, height: 560 });
    const after = await until('the terminal to take the smaller window', async () => {
      const s = await size();
      return s !== before && s;
    });
    await page.keyboard.type('clear; stty size\n');
    await screen(`stty size to say ${after}`, (t) => t.includes(after));
    await page.setViewport({ width: 1280, height: 800 });
    await until('the terminal to take the window again', async () => (await size()) !== after);
    await page.keyboard.type('clear\n');
    await screen('the screen cleared', (t) => t.length === 1);
    await page.keyboard.type('echo hi; exit\n');
    const t = await screen('the shell to echo and exit', (t) => t.includes('hi') && t.some((l) => l.includes('[the shell exited with 0]')));
    assert.ok(t.some((l) => l.includes('echo hi; exit')));
    await shot(page, 'terminal');
  });

  await test('processes: output followed with what came before, the table following ends, TERM from it', async () => {
    await tab(page, 'procs');
    const gate = (n) => path.join(root, `gate-${n}`);
    const waitFor = (n) => `until [ -e ${gate(n)} ]; do sleep 0.1; done`;
    const rowOf = (word, st) => until(`the row of ${word}${st ? ', ' + st : ''}`, () => page.$$eval('#procs tbody tr', (rs, word, st) =>
      rs.filter((r) => r.querySelector('.command').textContent.includes(word) &&
        (!st || r.querySelector('.state').textContent === st)).map((r) => r.dataset.proc)[0], word, st), 20000);
    const out = () => text(page, '#proc-out');
    const run = async (command, word) => {
      await page.$eval('#run-command', (e) => { e.value = ''; });
      await page.type('#run-command', command);
      await page.click('#run button');
      await until(`the output of ${word}`, async () => (await out()).includes(`${word}-early`));
      return rowOf(word, 'running');
    };
    const a = await run(`echo one-early; ${waitFor('one')}; echo one-late; exit 3`, 'one');
    const b = await run(`echo two-early; ${waitFor('two')}; echo two-late; exec sleep 300`, 'two');
    assert.ok(!(await out()).includes('one-early'), 'the pane follows the second command');
    // the first ends while no page follows it: the table learns it from proc_list
    fs.writeFileSync(gate('one'), '');
    await rowOf('one', 'exit 3');
    if (mode === 'ssh') {
      assert.equal(await page.$('#procs button[data-action="output"]'), null, 'no Output without proc_attach');
    } else {
      // what it wrote, from the start, once followed again
      await page.click(`#procs tr[data-proc="${a}"] button[data-action="output"]`);
      await until('the first one\'s whole output', async () => /one-early\s*one-late/.test(await out()));
      // the second, attached: what came before, then what comes
      await page.click(`#procs tr[data-proc="${b}"] button[data-action="output"]`);
      await until('the second one\'s output so far', async () => (await out()).includes('two-early'));
      assert.ok(!(await out()).includes('one-'), 'the pane shows the second one alone');
      await until('it followed', async () => (await text(page, '#proc-out-state')).includes('following'));
    }
    fs.writeFileSync(gate('two'), '');
    await until('the second one\'s output as it comes', async () => /two-early\s*two-late/.test(await out()));
    await page.click(`#procs tr[data-proc="${b}"] button[data-signal="TERM"]`);
    await until('TERM to end it', async () => (await page.$eval(`#procs tr[data-proc="${b}"] .state`, (e) => e.textContent)) === 'TERM', 20000);
    await until('its exit in the output pane', async () => (await text(page, '#proc-out-state')).includes('TERM'));
    await until('the session command listed', async () => {
      const t = await text(page, '#sessions tbody');
      return t.includes(SESSION) && t.includes('sleep 300');
    }, 20000);
    if (mode === 'http') // proc_list sees the tool server's command too: the responder keeps it
      await until('its session in the table', async () => (await text(page, '#procs tbody')).includes(SESSION));
    await shot(page, 'processes');
  });

  await test('nothing came from anywhere but asp', async () => {
    assert.deepEqual(foreign, []);
  });

  await test('no console error', async () => {
    assert.deepEqual(consoleErrors, []);
  });
}

try {
  await main();
} catch (e) {
  failed++;
  console.log(`not ok - ${mode}: ${(e && e.stack) || e}`);
} finally {
  for (const c of cleanups.reverse()) {
    try { await c(); } catch { /* already gone */ }
  }
  fs.rmSync(root, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
