// Terminal: a login shell in the sandbox on a terminal (spawn with tty), drawn by
// xterm.js, which asp carries as it was built (no network needed); resizes follow the
// window (proc_resize).
import { call, on, el, ui, report, fromBase64 } from './app.js';

const $ = (id) => document.getElementById(id);

let term = null;
let fit = null;
let proc = null;
let started = false;

async function start() {
  started = true;
  $('term-new').hidden = true;
  term.reset();
  fit.fit();
  $('term-state').textContent = 'starting a shell…';
  try {
    const { rows, cols } = term;
    const r = await call('term_open', { rows, cols });
    proc = r.proc;
    // a resize while the shell started was not sent: the terminal's size now is
    if (term.rows !== rows || term.cols !== cols) send({ op: 'term_resize', rows: term.rows, cols: term.cols });
    shown();
    term.focus();
  } catch (e) {
    $('term-state').textContent = `the shell could not start: ${e.message}`;
    report('terminal', e);
    $('term-new').hidden = false;
  }
}

// Keys and resizes go one request at a time, in the order they came (a program redraws
// for the size it was told before the keys that follow); keys typed meanwhile go together,
// and of resizes in a row only the last.
const queue = [];
let sending = false;

function send(item) {
  const last = queue[queue.length - 1];
  if (last && last.op === item.op && item.op === 'term_input') last.data += item.data;
  else if (last && last.op === item.op) Object.assign(last, item);
  else queue.push(item);
  if (!sending) drain();
}

async function drain() {
  sending = true;
  while (queue.length && proc !== null) {
    const { op, ...args } = queue.shift();
    try {
      await call(op, { proc, ...args });
    } catch (e) {
      report(op === 'term_input' ? 'terminal input' : 'terminal resize', e);
    }
  }
  queue.length = 0;
  sending = false;
}

function shown() {
  $('term-state').textContent = `a login shell in the sandbox (process ${proc}, ${term.rows}×${term.cols})`;
}

export function visible(yes) {
  if (!yes || !term) return;
  if (!started) start();
  else fit.fit();
  term.focus();
}

export function init() {
  if (ui.caps.terminal) {
    $('term').replaceWith(el('p', { class: 'notice' }, ui.caps.terminal));
    return;
  }
  term = new window.Terminal({
    fontFamily: '"DejaVu Sans Mono", "Liberation Mono", monospace', fontSize: 14,
    cursorBlink: true, scrollback: 5000,
  });
  fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open($('term'));
  term.onData((data) => send({ op: 'term_input', data }));
  term.onResize(({ rows, cols }) => {
    if (proc === null) return;
    send({ op: 'term_resize', rows, cols });
    shown();
  });
  new ResizeObserver(() => { if ($('view-terminal').classList.contains('active')) fit.fit(); }).observe($('term'));
  on('output', (ev) => { if (ev.proc === proc) term.write(fromBase64(ev.data)); });
  on('exit', (ev) => {
    if (ev.proc !== proc) return;
    proc = null;
    const how = ev.signal ? `was ended by ${ev.signal}` : `exited with ${ev.exit_code}`;
    term.write(`\r\n[the shell ${how}]\r\n`);
    $('term-state').textContent = `the shell ${how}`;
    $('term-new').hidden = false;
  });
  $('term-new').addEventListener('click', start);
}
