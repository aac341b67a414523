// Changes: a watch on the open folder; each change is logged here and the folder's
// listing (Files) is refreshed from it.
import { call, on, el, ui, report } from './app.js';
import * as files from './files.js';

const $ = (id) => document.getElementById(id);
const KEEP = 500; // rows kept in the log

let watching = null; // { path, proc }
let refreshTimer = null;

export async function watch(path) {
  $('watch-path').textContent = path;
  if (ui.caps.watch) {
    $('watch-state').textContent = `(${ui.caps.watch})`;
    return;
  }
  if (watching && watching.path === path) return;
  watching = { path, proc: null };
  $('watch-state').textContent = '(watching)';
  try {
    const r = await call('watch', { path });
    if (watching && watching.path === path) watching.proc = r.proc;
  } catch (e) {
    $('watch-state').textContent = `(cannot watch: ${e.message})`;
    report(`watch ${path}`, e);
  }
}

function log(ev) {
  const body = $('changes').tBodies[0];
  const what = ev.kind === 'renamed' ? `renamed from ${ev.old_path}` : ev.kind;
  body.prepend(el('tr', { 'data-kind': ev.kind }, el('td', {}, new Date().toLocaleTimeString()),
    el('td', {}, what), el('td', {}, ev.type || ''), el('td', {}, ev.path)));
  while (body.rows.length > KEEP) body.deleteRow(body.rows.length - 1);
}

export function init() {
  on('fs', (ev) => {
    if (!watching || ev.proc !== watching.proc) return;
    log(ev);
    // a burst of changes is one refresh
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => files.refresh(), 100);
  });
  on('watch_end', (ev) => {
    if (!watching || ev.proc !== watching.proc) return;
    $('watch-state').textContent = ev.error ? `(the watch ended: ${ev.error})` : '(the watch ended: the folder is gone)';
    watching = null;
  });
}
