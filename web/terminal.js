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
    const r = await call('term_open', { rows: term.rows, cols: term.cols });
    proc = r.proc;
    $('term-state').textContent = `a login shell in the sandbox (process ${proc})`;
    term.focus();
  } catch (e) {
    $('term-state').textContent = `the shell could not start: ${e.message}`;
    report('terminal', e);
    $('term-new').hidden = false;
  }
}

// Keys go one request at a time, in order; what is typed meanwhile goes in the next one.
let typed = '';
let sending = false;

async function type(data) {
  typed += data;
  if (sending) return;
  sending = true;
  while (typed && proc !== null) {
    const chunk = typed;
    typed = '';
    try {
      await call('term_input', { proc, data: chunk });
    } catch (e) {
      report('terminal input', e);
      typed = '';
    }
  }
  sending = false;
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
  term.onData(type);
  term.onResize(({ rows, cols }) => {
    if (proc !== null) call('term_resize', { proc, rows, cols }).catch(() => {});
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
