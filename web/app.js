// asp ui: the connection to asp (one WebSocket, JSON requests and events), what the
// sandbox can do (its hello), the tabs and the notices. Each view is a module of its own.
import * as files from './files.js';
import * as procs from './procs.js';
import * as changes from './changes.js';
import * as terminal from './terminal.js';

const $ = (id) => document.getElementById(id);

// --- the connection ----------------------------------------------------------------------

let ws = null;
let nextId = 1;
const pending = new Map();
const listeners = new Map();

export function call(op, args = {}) {
  return new Promise((resolve, reject) => {
    if (!ws || ws.readyState !== WebSocket.OPEN) {
      reject(new AspError('transport_error', 'the page is not connected to asp ui'));
      return;
    }
    const id = nextId++;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ id, op, ...args }));
  });
}

export class AspError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// fn(event) for every event of that name ("output", "exit", "lost", "fs", "watch_end")
export function on(name, fn) {
  if (!listeners.has(name)) listeners.set(name, []);
  listeners.get(name).push(fn);
}

function connect() {
  return new Promise((resolve, reject) => {
    ws = new WebSocket(`ws://${location.host}/ws`, 'asp-ui');
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error('the WebSocket to asp ui could not open'));
    ws.onclose = () => {
      status('disconnected: asp ui stopped, or this page lost its connection (reload to reconnect)', true);
      for (const p of pending.values()) p.reject(new AspError('transport_error', 'disconnected'));
      pending.clear();
    };
    ws.onmessage = (m) => {
      const msg = JSON.parse(m.data);
      if (msg.event) {
        for (const fn of listeners.get(msg.event) || []) fn(msg);
        return;
      }
      const p = pending.get(msg.id);
      if (!p) return;
      pending.delete(msg.id);
      if (msg.error) p.reject(new AspError(msg.error.code, msg.error.message));
      else p.resolve(msg.result);
    };
  });
}

// --- helpers the views share -------------------------------------------------------------

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

export function status(text, bad = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('bad', bad);
}

// A failed call, shown to the person: what was tried and what the sandbox said.
export function report(what, e) {
  status(`${what}: ${e.code ? e.code + ': ' : ''}${e.message}`, true);
}

export function fromBase64(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

export function toBase64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

export const join = (dir, name) => (dir.endsWith('/') ? dir + name : dir + '/' + name);
export const parent = (path) => path.replace(/\/[^/]*\/?$/, '') || '/';
export const basename = (path) => path.replace(/\/+$/, '').split('/').pop() || '/';

// A modal question; resolves to the text typed (prompt), true (confirm) or null.
export function ask(text, value) {
  const d = $('dialog');
  $('dialog-text').textContent = text;
  const input = $('dialog-input');
  input.hidden = value === undefined;
  input.value = value ?? '';
  d.returnValue = '';
  d.showModal();
  if (!input.hidden) {
    input.focus();
    input.select();
  }
  return new Promise((resolve) => {
    d.addEventListener('close', () => {
      if (d.returnValue !== 'ok') resolve(null);
      else resolve(input.hidden ? true : input.value);
    }, { once: true });
  });
}

// --- what the sandbox can do ---------------------------------------------------------------

export const ui = { hello: null, caps: {} };

// Each capability is null when available, else why not, as a person reads it.
function capabilities(h) {
  const op = (n) => h.ops.includes(n);
  const ft = (n) => h.features.includes(n);
  const lacks = (...ops) => ops.filter((n) => !op(n));
  const missing = (ops) => `the sandbox's responder lacks ${ops.join(', ')} (its hello)`;
  const follow = ft('follow') ? null
    : "this connection carries no notifications (hello lists no follow feature; plain HTTP without its WebSocket, or an older responder)";
  const caps = {};
  let m = lacks('list', 'stat', 'read');
  caps.files = m.length ? missing(m) : null;
  m = lacks('write', 'rename', 'remove');
  caps.upload = m.length ? `uploads are unavailable: ${missing(m)}` : null;
  caps.procs = op('proc_list') ? null : `the process list is unavailable: ${missing(['proc_list'])}`;
  caps.attach = !op('proc_attach') ? `a process's output cannot be followed: ${missing(['proc_attach'])}`
    : follow ? `a process's output cannot be followed: ${follow}` : null;
  caps.run = !op('spawn') ? `commands cannot be run: ${missing(['spawn'])}`
    : follow ? `commands cannot be run here: ${follow}` : null;
  caps.signal = op('proc_signal') ? null : `signals cannot be sent: ${missing(['proc_signal'])}`;
  caps.watch = !op('watch') || !ft('watch') ? 'changes cannot be followed: the sandbox cannot watch files (hello lists no watch feature); Refresh shows the folder as it is'
    : follow ? `changes cannot be followed: ${follow}` : null;
  caps.terminal = !h.xterm.built ? `the terminal is unavailable: ${h.xterm.why}`
    : !op('spawn') || follow ? `the terminal is unavailable: ${follow || missing(['spawn'])}`
    : !ft('pty') || !op('proc_resize') ? 'the terminal is unavailable: the sandbox has no terminals (hello lists no pty feature)' : null;
  caps.sessions = !op('exec') ? `the sandbox's processes cannot be looked at: ${missing(['exec'])}`
    : h.os !== 'linux' ? `the sandbox's processes are found through /proc, which ${h.os} does not have` : null;
  caps.reattach = ft('reattach') ? null
    : "processes end with the connection that started them (hello lists no reattach): the table above shows this page's own, the list below every session's";
  return caps;
}

function notices(caps) {
  const list = $('notices');
  list.replaceChildren();
  for (const [k, why] of Object.entries(caps))
    if (why && k !== 'reattach') list.append(el('li', { 'data-cap': k }, why));
}

// --- tabs ------------------------------------------------------------------------------------

const views = { files, procs, changes, terminal };
let current = 'files';

function show(name) {
  current = name;
  for (const b of document.querySelectorAll('#tabs button'))
    b.classList.toggle('active', b.dataset.view === name);
  for (const v of document.querySelectorAll('.view'))
    v.classList.toggle('active', v.id === `view-${name}`);
  for (const [n, m] of Object.entries(views)) m.visible?.(n === name);
}

export const visible = (name) => current === name;

async function main() {
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => show(b.dataset.view));
  try {
    await connect();
    ui.hello = await call('hello');
  } catch (e) {
    status(`cannot reach the sandbox: ${e.message}`, true);
    return;
  }
  const h = ui.hello;
  ui.caps = capabilities(h);
  $('where').textContent = `${h.transport} · ${h.agent} · ${h.os}/${h.arch}`;
  document.title = `asp ui · ${h.transport}`;
  notices(ui.caps);
  for (const m of Object.values(views)) await m.init?.();
  document.body.dataset.ready = 'yes';
  status('connected');
}

main();
