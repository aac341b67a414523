/**
 * The sandbox one pi process works in: the .asp.json found from pi's working directory
 * ($ASP_CONFIG, else .asp.json here or above), one connection opened on first use and
 * again after it failed, and the workspace mapping of the SDK (Workspace), which turns the
 * harness's paths into the sandbox's.
 */
import { AspError, Client, type Config, Workspace } from "asp-sdk";

export class Sandbox {
  private client?: Promise<Client>;
  /** undefined when the harness's and the sandbox's directories are the same. */
  workspace?: Workspace;
  /** The sandbox directory pi's tools resolve relative paths against. */
  cwd: string;

  private constructor(
    readonly config: Config | undefined,
    readonly localCwd: string,
    readonly configError?: Error,
  ) {
    this.cwd = localCwd;
  }

  /**
   * The sandbox of the config pi's directory finds. When the config names no absolute
   * sandbox directory, asks the responder's hello for its start directory. A missing or bad
   * config, or a sandbox down at start, is kept: every tool call then fails with it, so no
   * tool quietly acts on the harness's machine.
   */
  static async open(localCwd: string): Promise<Sandbox> {
    let cfg: Config;
    try {
      cfg = Client.loadConfig();
    } catch (e) {
      return new Sandbox(undefined, localCwd, e as Error);
    }
    const s = new Sandbox(cfg, localCwd);
    try {
      const sb = cfg.workspace?.sandbox ?? cfg.cwd;
      const start = sb !== undefined && sb.startsWith("/") ? undefined : (await (await s.connect()).hello({})).cwd;
      s.workspace = Workspace.fromConfig(cfg, start);
      s.cwd = s.workspace ? s.workspace.toSandbox(localCwd) : localCwd;
    } catch (e) {
      return new Sandbox(cfg, localCwd, e as Error);
    }
    return s;
  }

  /** The connection, opened now if there is none (or the last one failed). */
  connect(): Promise<Client> {
    if (this.configError) return Promise.reject(this.configError);
    if (!this.client) {
      const c = Client.fromConfig(this.config?.path);
      this.client = c;
      c.catch(() => {
        if (this.client === c) this.client = undefined;
      });
    }
    return this.client;
  }

  /** Runs `fn` on the connection; a broken connection is dropped, so the next call redials. */
  async call<T>(fn: (c: Client) => Promise<T>): Promise<T> {
    const p = this.connect();
    const c = await p;
    try {
      return await fn(c);
    } catch (e) {
      if (e instanceof AspError && e.code === "transport_error" && this.client === p) {
        this.client = undefined;
        c.close().catch(() => {});
      }
      throw e;
    }
  }

  /** The sandbox path for a path pi resolved (the harness's or already the sandbox's). */
  path(p: string): string {
    return this.workspace ? this.workspace.toSandbox(p, this.cwd) : p;
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    if (c) await (await c.catch(() => undefined))?.close();
  }
}
