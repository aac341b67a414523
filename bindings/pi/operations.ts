/**
 * pi's pluggable Operations on the sandbox: the raw I/O under pi's own tools (its factories
 * keep every model-facing behaviour: truncation, line numbers, diffs, messages). Each
 * operation is one or a few ASP calls; paths go through the workspace mapping.
 */
import type {
  BashOperations,
  EditOperations,
  FindOperations,
  LsOperations,
  ReadOperations,
  WriteOperations,
} from "@mariozechner/pi-coding-agent";
import { AspError } from "asp-sdk";
import type { Sandbox } from "./sandbox.js";

/** A file read whole, in pieces of what one message carries. */
async function readAll(sb: Sandbox, path: string): Promise<Buffer> {
  const p = sb.path(path);
  return sb.call(async (c) => {
    const parts: Uint8Array[] = [];
    let offset = 0;
    for (;;) {
      const r = await c.read({ path: p, offset });
      parts.push(r.data);
      offset += r.data.length;
      if (r.eof || r.data.length === 0) break;
    }
    return Buffer.concat(parts);
  });
}

async function stat(sb: Sandbox, path: string) {
  const p = sb.path(path);
  return sb.call((c) => c.stat({ path: p }));
}

async function exists(sb: Sandbox, path: string): Promise<boolean> {
  try {
    await stat(sb, path);
    return true;
  } catch (e) {
    if (e instanceof AspError && e.code === "not_found") return false;
    throw e;
  }
}

async function writeFile(sb: Sandbox, path: string, content: string): Promise<void> {
  const p = sb.path(path);
  await sb.call((c) => c.write({ path: p, data: content, atomic: true, mkdirs: true }));
}

/** Image types pi shows as images, by their first bytes. */
function imageType(b: Uint8Array): string | null {
  const at = (i: number, ...xs: number[]) => xs.every((x, k) => b[i + k] === x);
  if (at(0, 0x89, 0x50, 0x4e, 0x47)) return "image/png";
  if (at(0, 0xff, 0xd8, 0xff)) return "image/jpeg";
  if (at(0, 0x47, 0x49, 0x46, 0x38)) return "image/gif";
  if (at(0, 0x52, 0x49, 0x46, 0x46) && at(8, 0x57, 0x45, 0x42, 0x50)) return "image/webp";
  return null;
}

export function readOperations(sb: Sandbox): ReadOperations {
  return {
    readFile: (p) => readAll(sb, p),
    access: async (p) => {
      await stat(sb, p);
    },
    detectImageMimeType: async (p) => {
      const path = sb.path(p);
      const r = await sb.call((c) => c.read({ path, offset: 0, length: 16 }));
      return imageType(r.data);
    },
  };
}

export function writeOperations(sb: Sandbox): WriteOperations {
  return {
    writeFile: (p, content) => writeFile(sb, p, content),
    mkdir: async (dir) => {
      const path = sb.path(dir);
      await sb.call((c) => c.mkdir({ path, parents: true }));
    },
  };
}

export function editOperations(sb: Sandbox): EditOperations {
  return {
    readFile: (p) => readAll(sb, p),
    writeFile: (p, content) => writeFile(sb, p, content),
    access: async (p) => {
      await stat(sb, p);
    },
  };
}

export function lsOperations(sb: Sandbox): LsOperations {
  // pi stats every entry after listing; the listing already says which are directories.
  const types = new Map<string, string>();
  return {
    exists: (p) => exists(sb, p),
    stat: async (p) => {
      const known = types.get(sb.path(p));
      const type = known ?? (await stat(sb, p)).type;
      return { isDirectory: () => type === "dir" };
    },
    readdir: async (p) => {
      const dir = sb.path(p);
      const r = await sb.call((c) => c.list({ path: dir }));
      for (const e of r.entries) types.set(`${dir === "/" ? "" : dir}/${e.name}`, e.type);
      return r.entries.map((e) => e.name);
    },
  };
}

export function findOperations(sb: Sandbox): FindOperations {
  return {
    exists: (p) => exists(sb, p),
    glob: async (pattern, cwd, { limit }) => {
      const dir = sb.path(cwd);
      // hidden names too, as pi's fd --hidden; .git is never entered; pi's other ignore,
      // node_modules, is applied to the answer (the op takes no ignore list)
      const r = await sb.call((c) => c.glob({ path: dir, pattern, max_results: limit, hidden: true }));
      const kept = r.paths.filter((p) => !p.includes("/node_modules/"));
      // answers are under the sandbox directory; pi relativizes them against its own
      return kept.map((p) => (p === dir || p.startsWith(`${dir}/`) ? cwd + p.slice(dir.length) : p));
    },
  };
}

/** pi's shell on the sandbox: one spawned `bash -c` (sh where there is no bash), stdout and
 * stderr as they come, the group killed on abort or timeout. The harness's environment is
 * not sent: the sandbox has its own (and the config's env). */
export function bashOperations(sb: Sandbox): BashOperations {
  return {
    exec: async (command, cwd, { onData, signal, timeout }) => {
      const dir = sb.path(cwd);
      const timeout_ms = timeout && timeout > 0 ? Math.round(timeout * 1000) : 0;
      return sb.call(async (c) => {
        let p;
        for (const shell of ["bash", "/bin/sh"]) {
          try {
            p = await c.spawn({ argv: [shell, "-c", command], cwd: dir, timeout_ms, stdin_eof: true, tag: "pi bash" });
            break;
          } catch (e) {
            if (!(e instanceof AspError && e.code === "not_found" && shell === "bash")) throw e;
          }
        }
        if (!p) throw new Error("no shell in the sandbox");
        const proc = p;
        const onAbort = () => {
          proc.signal("KILL").catch(() => {});
        };
        if (signal?.aborted) onAbort();
        else signal?.addEventListener("abort", onAbort, { once: true });
        try {
          for await (const ev of proc) {
            if (ev.event === "output") onData(Buffer.from(ev.data));
            else if (ev.event === "exit") {
              if (signal?.aborted) throw new Error("aborted");
              if (ev.timed_out) throw new Error(`timeout:${timeout}`);
              const code = Number(ev.exit_code);
              return { exitCode: ev.signal ? null : code };
            }
          }
        } finally {
          signal?.removeEventListener("abort", onAbort);
        }
        throw new AspError("transport_error", "the command's exit never came");
      });
    },
  };
}
