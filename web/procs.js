// Processes: proc_list as a table that updates, a process's output followed live (attach:
// what the sandbox holds first, then as it comes), signals, a command to run, and the
// sandbox's commands by the session that started them.
import { call, on, el, ui, report, status, fromBase64 } from './app.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 2000;
const SESSIONS_MS = 5000;
const OUT_MAX = 1 << 20; // characters kept in the output pane
const SIGNALS = ['TERM', 'INT', 'HUP', 'KILL'];

let shown = false;
let timer = null;
let followed = null; // the process whose output the pane shows
const decoders = {};

function state(p) {
  if (p.running) return 'running';
  if (p.signal) return p.signal;
  return `exit ${p.exit_code ?? '?'}`;
}

async function list() {
  if (ui.caps.procs) return;
  let r;
  try {
    r = await call('procs');
  } catch (e) {
    report('proc_list', e);
    return;
  }
  // the watches of this page's open folder are handles too: not what a person looks for
  const mine = (p) => p.tag === 'asp ui' && p.command.startsWith('watch ');
  const rows = r.procs.filter((p) => !mine(p)).sort((a, b) => b.proc - a.proc).map((p) => {
    const actions = el('td', { class: 'actions' });
    if (!ui.caps.attach) actions.append(el('button', { 'data-action': 'output', onclick: () => follow(p) }, 'Output'));
    if (p.running && !ui.caps.signal)
      for (const s of SIGNALS)
        actions.append(el('button', { 'data-signal': s, onclick: () => signal(p.proc, s) }, s));
    return el('tr', { 'data-proc': p.proc, class: p.running ? 'running' : 'done' },
      el('td', { class: 'num' }, String(p.proc)), el('td', {}, p.session ?? ''), el('td', {}, p.tag ?? ''),
      el('td', { class: 'command' }, p.command), el('td', { class: 'state' }, state(p)), actions);
  });
  $('procs').tBodies[0].replaceChildren(...rows);
}

async function sessions() {
  if (ui.caps.sessions) return;
  let r;
  try {
    r = await call('sessions');
  } catch (e) {
    $('sessions-note').textContent = `The sandbox's processes could not be looked at: ${e.message}`;
    return;
  }
  const rows = r.commands.sort((a, b) => a.session.localeCompare(b.session) || a.pid - b.pid)
    .map((c) => el('tr', {}, el('td', {}, c.session), el('td', { class: 'num' }, String(c.pid)), el('td', { class: 'command' }, c.command)));
  $('sessions').tBodies[0].replaceChildren(...rows);
  if (!rows.length) $('sessions-note').textContent += ' None is running now.';
}

async function signal(proc, sig) {
  try {
    await call('signal', { proc, signal: sig });
    status(`sent ${sig} to process ${proc}`);
  } catch (e) {
    report(`signal ${sig} to ${proc}`, e);
  }
  list();
}

function append(stream, text) {
  const pane = $('proc-out');
  pane.append(stream === 'stderr' ? el('span', { class: 'stderr' }, text) : text);
  while (pane.textContent.length > OUT_MAX && pane.firstChild) pane.firstChild.remove();
  pane.scrollTop = pane.scrollHeight;
}

async function follow(p) {
  if (followed !== null) call('detach', { proc: followed }).catch(() => {});
  show(p);
  try {
    await call('attach', { proc: p.proc });
  } catch (e) {
    $('proc-out-state').textContent = ` (cannot follow it: ${e.message})`;
  }
}

// Output of a command run from here comes from its start, before its handle is known:
// kept until the answer names it.
let early = null;

function show(p) {
  followed = p.proc;
  decoders.stdout = new TextDecoder();
  decoders.stderr = new TextDecoder();
  $('proc-out').replaceChildren();
  $('proc-out-title').textContent = `Output of ${p.proc}: ${p.command}`;
  $('proc-out-state').textContent = ' (following)';
}

async function run(command) {
  if (followed !== null) call('detach', { proc: followed }).catch(() => {});
  followed = null;
  early = [];
  try {
    const r = await call('run', { command });
    show({ proc: r.proc, command });
    const kept = early;
    early = null;
    for (const ev of kept) if (ev.proc === r.proc) event(ev);
    status(`started process ${r.proc}`);
    list();
  } catch (e) {
    early = null;
    report(`run ${command}`, e);
  }
}

function event(ev) {
  if (early && ev.proc !== followed) {
    early.push(ev);
    return;
  }
  if (ev.proc !== followed) return;
  if (ev.event === 'output') {
    append(ev.stream, decoders[ev.stream].decode(fromBase64(ev.data), { stream: true }));
  } else if (ev.event === 'exit') {
    $('proc-out-state').textContent = ev.signal ? ` (killed by ${ev.signal})` : ` (exited with ${ev.exit_code})`;
    if (shown) list();
  } else {
    $('proc-out-state').textContent = ` (${ev.message})`;
  }
}

export function visible(yes) {
  shown = yes;
  clearInterval(timer);
  timer = null;
  if (!yes) return;
  list();
  sessions();
  let n = 0;
  timer = setInterval(() => {
    list();
    if (++n % Math.round(SESSIONS_MS / POLL_MS) === 0) sessions();
  }, POLL_MS);
}

export function init() {
  if (ui.caps.procs) $('procs').replaceWith(el('p', { class: 'notice' }, ui.caps.procs));
  $('sessions-note').textContent = ui.caps.sessions ? ui.caps.sessions
    : `Found by their $ASP_SESSION (asp mcp, asp tool and asp exec-server set it), across every connection to the sandbox.${ui.caps.reattach ? ' Here ' + ui.caps.reattach + '.' : ''}`;
  if (ui.caps.run) {
    $('run-command').disabled = true;
    $('run-command').placeholder = ui.caps.run;
  }
  $('run').addEventListener('submit', (e) => {
    e.preventDefault();
    const c = $('run-command').value.trim();
    if (c) run(c);
  });
  for (const name of ['output', 'exit', 'lost']) on(name, event);
}
