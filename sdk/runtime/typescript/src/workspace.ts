/**
 * The workspace path mapping (docs/design.md, ".asp.json"), as core/src/workspace.c does it:
 * a binding that serves a harness's own tools receives the harness's paths; a path under
 * the local directory is sent as the same path under the sandbox directory, every other
 * path unchanged, and paths shown back are mapped the other way. Lexical and
 * component-wise, no I/O: /home/me/proj2 is not under /home/me/proj. When one directory
 * lies inside the other (both on one machine), a path already on the target side is kept,
 * so nothing is mapped twice.
 */
import type { Config } from "./config.js";

/** The lexical normal form of `path`: "." and empty components dropped, ".." pops one (at
 * "/" it stays "/"), no trailing slash; a relative path stays relative ("" is "."). */
export function normalizePath(path: string): string {
  const abs = path.startsWith("/");
  const out: string[] = [];
  let fixed = 0; // leading ".." of a relative path cannot be popped
  for (const c of path.split("/")) {
    if (c === "" || c === ".") continue;
    if (c === "..") {
      if (out.length > fixed) out.pop();
      else if (!abs) {
        out.push("..");
        fixed = out.length;
      }
      continue;
    }
    out.push(c);
  }
  const s = out.join("/");
  return abs ? `/${s}` : s || ".";
}

/** Whether the normalised absolute `path` is `dir` or lies under it. */
function under(dir: string, path: string): boolean {
  if (dir === "/") return path.startsWith("/");
  return path === dir || path.startsWith(`${dir}/`);
}

function rebase(from: string, to: string, path: string): string {
  const rest = from === "/" ? path : path.slice(from.length);
  return normalizePath(`${to}/${rest}`);
}

export class Workspace {
  /** The normalised absolute directories. */
  readonly local: string;
  readonly sandbox: string;
  private readonly sandboxInsideLocal: boolean;
  private readonly localInsideSandbox: boolean;

  constructor(local: string, sandbox: string) {
    if (!local.startsWith("/") || !sandbox.startsWith("/"))
      throw new Error(`workspace: local (${local}) and sandbox (${sandbox}) must be absolute directories`);
    this.local = normalizePath(local);
    this.sandbox = normalizePath(sandbox);
    const same = this.local === this.sandbox;
    this.sandboxInsideLocal = !same && under(this.local, this.sandbox);
    this.localInsideSandbox = !same && under(this.sandbox, this.local);
  }

  /**
   * The mapping a config asks for: workspace.local, else the directory holding the config
   * file; workspace.sandbox, else the config's cwd, else `startDir` (hello's cwd), a
   * relative one joined to `startDir`. undefined when there is nothing to map (a config
   * from memory without workspace.local, or the two directories the same).
   */
  static fromConfig(cfg: Config, startDir?: string): Workspace | undefined {
    let local = cfg.workspace?.local;
    if (local === undefined) {
      if (cfg.path === undefined) return undefined;
      local = cfg.path.slice(0, cfg.path.lastIndexOf("/")) || "/";
    }
    const sb = cfg.workspace?.sandbox ?? cfg.cwd;
    let sandbox: string;
    if (sb !== undefined && sb.startsWith("/")) sandbox = sb;
    else if (startDir === undefined || !startDir.startsWith("/"))
      throw new Error(
        `workspace: the sandbox directory ${sb ?? "(the start directory)"} is relative and the responder gave no absolute start directory to join it to; set workspace.sandbox to an absolute path`,
      );
    else sandbox = sb === undefined ? startDir : `${startDir}/${sb}`;
    const w = new Workspace(local, sandbox);
    return w.local === w.sandbox ? undefined : w;
  }

  /** The sandbox path for the harness's `path`; a relative one joins `base` first (the
   * harness's working directory) and stays relative without it. */
  toSandbox(path: string, base?: string): string {
    const p = !path.startsWith("/") && base !== undefined ? `${base}/${path}` : path;
    return map(this.local, this.sandbox, this.sandboxInsideLocal, p);
  }

  /** The harness's path for the sandbox's absolute `path`; with the sandbox inside the
   * harness's directory every path is the harness's already (normalised only). */
  toLocal(path: string): string {
    if (this.sandboxInsideLocal) return normalizePath(path);
    return map(this.sandbox, this.local, this.localInsideSandbox, path);
  }
}

function map(from: string, to: string, keepUnderTo: boolean, path: string): string {
  const n = normalizePath(path);
  if (!n.startsWith("/") || (keepUnderTo && under(to, n)) || !under(from, n)) return n;
  return rebase(from, to, n);
}
