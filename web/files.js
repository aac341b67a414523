// Files: a tree loaded folder by folder, the open folder's entries (rename, delete,
// download, uploads dropped on it), and a viewer: text with line numbers paged through
// byte ranges, images.
import { call, el, ui, report, status, fromBase64, toBase64, join, parent, basename, ask } from './app.js';
import * as changes from './changes.js';

const $ = (id) => document.getElementById(id);
const PAGE = 256 * 1024; // bytes of text per viewer page
const CHUNK = 512 * 1024; // bytes per upload chunk
const IN_FLIGHT = 4; // upload chunks sent before the first answer
const IMAGES = /\.(png|jpe?g|gif|webp|bmp|ico|svg)$/i;

let folder = null; // the open folder
const fileUrl = (path, download) =>
  `/file?path=${encodeURIComponent(path)}${download ? '&download=1' : ''}`;

function size(n) {
  if (n < 1024) return `${n} B`;
  const u = ['KiB', 'MiB', 'GiB', 'TiB'];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return `${n.toFixed(n < 10 ? 1 : 0)} ${u[i]}`;
}

const when = (ms) => new Date(ms).toLocaleString();

// --- the tree --------------------------------------------------------------------------------

function treeNode(path, name) {
  const kids = el('ul', { class: 'tree' });
  const li = el('li', { class: 'dir', 'data-path': path });
  const label = el('span', { class: 'name', title: path }, name);
  label.addEventListener('click', async () => {
    if (li.classList.contains('open')) {
      li.classList.remove('open');
      kids.replaceChildren();
    } else {
      await expand(li, kids, path);
    }
    open(path);
  });
  li.append(label, kids);
  return li;
}

async function expand(li, kids, path) {
  let r;
  try {
    r = await call('list', { path });
  } catch (e) {
    report(`list ${path}`, e);
    return;
  }
  li.classList.add('open');
  kids.replaceChildren(...r.entries.filter((e) => e.type === 'dir' && !e.lossy)
    .map((e) => treeNode(join(path, e.name), e.name)));
}

// Expands the tree along `path` from the root shown.
async function reveal(path) {
  const under = (p) => path === p || path.startsWith(p.endsWith('/') ? p : p + '/');
  for (;;) {
    const next = [...document.querySelectorAll('#tree li.dir')]
      .find((li) => under(li.dataset.path) && !li.classList.contains('open'));
    if (!next) return;
    await expand(next, next.querySelector('ul'), next.dataset.path);
    if (!next.classList.contains('open')) return; // it could not be listed
  }
}

// --- the open folder ---------------------------------------------------------------------------

export async function open(path) {
  folder = path;
  $('viewer').hidden = true;
  $('folder').hidden = false;
  $('folder-path').textContent = path;
  $('goto-path').value = path;
  await refresh();
  changes.watch(path);
}

export async function refresh() {
  if (!folder) return;
  const path = folder;
  let r;
  try {
    r = await call('list', { path });
  } catch (e) {
    report(`list ${path}`, e);
    return;
  }
  if (path !== folder) return;
  const rows = r.entries.map((e) => {
    const full = join(path, e.name);
    const name = e.type === 'dir'
      ? el('a', { href: '#', class: 'dir', onclick: (ev) => { ev.preventDefault(); reveal(full); open(full); } }, e.name + '/')
      : e.type === 'file'
        ? el('a', { href: '#', class: 'file', onclick: (ev) => { ev.preventDefault(); view(full); } }, e.name)
        : el('span', { class: 'other', title: e.type }, `${e.name} (${e.type})`);
    const actions = el('td', { class: 'actions' });
    if (!e.lossy) {
      if (e.type === 'file') actions.append(el('a', { class: 'button', href: fileUrl(full, true), download: e.name }, 'Download'));
      if (!ui.caps.upload) {
        actions.append(el('button', { onclick: () => rename(full, e.name) }, 'Rename'));
        actions.append(el('button', { onclick: () => remove(full, e.type) }, 'Delete'));
      }
    }
    return el('tr', { 'data-name': e.name }, el('td', {}, name),
      el('td', { class: 'num' }, e.type === 'dir' ? '' : size(e.size)), el('td', {}, when(e.mtime_ms)), actions);
  });
  $('entries').tBodies[0].replaceChildren(...rows);
}

async function rename(path, name) {
  const to = await ask(`Rename ${path} to:`, name);
  if (!to || to === name) return;
  try {
    await call('rename', { from: path, to: join(parent(path), to) });
    status(`renamed ${name} to ${to}`);
  } catch (e) {
    report(`rename ${path}`, e);
  }
  refresh();
}

async function remove(path, type) {
  const ok = await ask(type === 'dir' ? `Delete the folder ${path} and everything in it?` : `Delete ${path}?`);
  if (!ok) return;
  try {
    await call('remove', { path, recursive: type === 'dir' });
    status(`deleted ${path}`);
  } catch (e) {
    report(`delete ${path}`, e);
  }
  refresh();
}

// --- uploads -----------------------------------------------------------------------------------

async function upload(file, dir) {
  const target = join(dir, file.name);
  const bar = el('progress', { max: file.size || 1, value: 0 });
  const line = el('div', { class: 'upload' }, `${file.name} → ${dir} `, bar);
  $('uploads').append(line);
  try {
    let begin;
    try {
      begin = await call('upload_begin', { path: target, size: file.size });
    } catch (e) {
      if (e.code !== 'already_exists' || !(await ask(`${target} exists. Replace it?`))) throw e;
      begin = await call('upload_begin', { path: target, size: file.size, overwrite: true });
    }
    let sent = 0, next = 0;
    const inFlight = new Set();
    while (next < file.size || inFlight.size) {
      while (next < file.size && inFlight.size < IN_FLIGHT) {
        const offset = next;
        const end = Math.min(file.size, offset + CHUNK);
        next = end;
        const p = file.slice(offset, end).arrayBuffer().then((buf) =>
          call('upload_chunk', { upload: begin.upload, offset, data: toBase64(new Uint8Array(buf)) }))
          .then(() => { sent += end - offset; bar.value = sent; inFlight.delete(p); });
        inFlight.add(p);
      }
      await Promise.race(inFlight);
    }
    await call('upload_end', { upload: begin.upload });
    line.remove();
    status(`uploaded ${file.name} (${size(file.size)}) to ${dir}`);
  } catch (e) {
    line.classList.add('bad');
    line.append(` failed: ${e.message}`);
    report(`upload ${target}`, e);
  }
  if (dir === folder) refresh();
}

function uploads(list, dir) {
  if (ui.caps.upload) {
    status(ui.caps.upload, true);
    return;
  }
  for (const f of list) upload(f, dir);
}

// --- the viewer --------------------------------------------------------------------------------

const viewer = { path: null, pages: [], size: 0 };

export async function view(path) {
  viewer.path = path;
  viewer.pages = [{ offset: 0, line: 1 }];
  $('folder').hidden = true;
  $('viewer').hidden = false;
  $('viewer-path').textContent = path;
  $('viewer-download').href = fileUrl(path, true);
  $('viewer-download').setAttribute('download', basename(path));
  if (IMAGES.test(path)) {
    $('viewer-range').textContent = '';
    $('viewer-prev').hidden = $('viewer-next').hidden = true;
    $('viewer-body').replaceChildren(el('img', { src: fileUrl(path, false), alt: path, class: 'image' }));
    return;
  }
  await page();
}

// Reads the page starting at the last offset in viewer.pages; lines are not cut in two.
async function page() {
  const { path } = viewer;
  const at = viewer.pages[viewer.pages.length - 1];
  let r;
  try {
    r = await call('read', { path, offset: at.offset, length: PAGE });
  } catch (e) {
    report(`read ${path}`, e);
    return;
  }
  if (path !== viewer.path) return;
  let bytes = fromBase64(r.data);
  viewer.size = r.size;
  if (at.offset === 0 && bytes.subarray(0, 8192).includes(0)) {
    $('viewer-range').textContent = size(r.size);
    $('viewer-prev').hidden = $('viewer-next').hidden = true;
    $('viewer-body').replaceChildren(el('p', { class: 'muted' }, `A binary file of ${size(r.size)}: download it to look inside.`));
    return;
  }
  if (!r.eof) {
    const nl = bytes.lastIndexOf(10);
    if (nl >= 0) bytes = bytes.subarray(0, nl + 1);
  }
  const text = new TextDecoder('utf-8').decode(bytes);
  const lines = text.split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  at.end = at.offset + bytes.length;
  at.lines = lines.length;
  const list = el('ol', { class: 'code', start: at.line });
  for (const l of lines) list.append(el('li', {}, l));
  $('viewer-body').replaceChildren(list);
  $('viewer-range').textContent = r.size ? `bytes ${at.offset + 1}–${at.end} of ${r.size}, lines ${at.line}–${at.line + lines.length - 1}` : 'empty';
  $('viewer-prev').hidden = $('viewer-next').hidden = r.size <= PAGE;
  $('viewer-prev').disabled = viewer.pages.length === 1;
  $('viewer-next').disabled = at.end >= r.size;
}

function nextPage() {
  const at = viewer.pages[viewer.pages.length - 1];
  if (at.end >= viewer.size) return;
  viewer.pages.push({ offset: at.end, line: at.line + at.lines });
  page();
}

function prevPage() {
  if (viewer.pages.length > 1) viewer.pages.pop();
  page();
}

// --- start ----------------------------------------------------------------------------------------

export async function init() {
  if (ui.caps.files) {
    $('view-files').replaceChildren(el('p', { class: 'notice' }, `Files are unavailable: ${ui.caps.files}`));
    return;
  }
  const home = ui.hello.home;
  $('goto').addEventListener('submit', async (e) => {
    e.preventDefault();
    const p = $('goto-path').value.trim();
    if (p) goTo(p);
  });
  $('folder-up').addEventListener('click', () => folder && goTo(parent(folder)));
  $('folder-refresh').addEventListener('click', () => refresh());
  $('upload-pick').addEventListener('click', () => $('upload-input').click());
  $('upload-input').addEventListener('change', (e) => { uploads([...e.target.files], folder); e.target.value = ''; });
  const drop = $('drop');
  for (const t of [drop, $('entries')]) {
    t.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
    t.addEventListener('dragleave', () => drop.classList.remove('over'));
    t.addEventListener('drop', (e) => {
      e.preventDefault();
      drop.classList.remove('over');
      uploads([...e.dataTransfer.files], folder);
    });
  }
  $('viewer-close').addEventListener('click', () => { $('viewer').hidden = true; $('folder').hidden = false; refresh(); });
  $('viewer-next').addEventListener('click', nextPage);
  $('viewer-prev').addEventListener('click', prevPage);
  if (ui.caps.upload) {
    $('upload-pick').disabled = true;
    drop.textContent = ui.caps.upload;
  }
  await goTo(home);
}

// Opens `path`, the tree rooted at it unless the tree's root holds it already.
async function goTo(path) {
  const root = $('tree').firstChild?.dataset.path;
  const under = root && (path === root || path.startsWith(root.endsWith('/') ? root : root + '/'));
  if (!under) $('tree').replaceChildren(treeNode(path, path));
  await reveal(path);
  await open(path);
}
