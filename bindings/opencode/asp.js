// The one connection of an OpenCode process to the sandbox: a long-lived `asp mcp
// --vocabulary opencode` child, spoken to over stdio (MCP, newline-delimited JSON-RPC),
// shared by every tool file (docs/harnesses.md, "OpenCode"). The tools' behaviour is the
// tools layer's (docs/tools.md, "Vocabularies"); this file only carries calls.
//
// No imports beyond Node's built-ins: OpenCode loads tool files without installing
// anything for them.
import { spawn } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const VOCABULARY = "opencode";
const KEY = Symbol.for("asp.opencode.servers");

// The asp command: the one asp bind wrote, else $ASP_BIN, else the asp installed beside
// this file (PREFIX/share/asp/bindings/opencode → PREFIX/bin/asp), else asp on PATH.
function aspCommand(given) {
  if (given) return given;
  if (process.env.ASP_BIN) return process.env.ASP_BIN;
  try {
    const here = dirname(realpathSync(fileURLToPath(import.meta.url)));
    const installed = join(here, "..", "..", "..", "..", "bin", "asp");
    if (existsSync(installed)) return installed;
  } catch {
    // not a file URL: fall through to PATH
  }
  return "asp";
}

class Server {
  // `config`: the .asp.json (undefined: found as asp finds it, from OpenCode's directory)
  constructor(asp, config) {
    this.asp = asp;
    this.config = config;
    this.child = null;
    this.pending = new Map();
    this.nextId = 1;
    this.stderr = "";
    this.ready = null;
  }

  // Starts the child once (again after it died) and initializes MCP.
  start() {
    if (this.ready) return this.ready;
    const cmd = aspCommand(this.asp);
    const args = ["mcp", "--vocabulary", VOCABULARY];
    if (this.config) args.push("--config", this.config);
    const child = spawn(cmd, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: process.env,
    });
    this.child = child;
    let buf = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) this.onMessage(line);
      }
    });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => {
      this.stderr = (this.stderr + chunk).slice(-4000);
    });
    const gone = (why) => {
      if (this.child !== child) return;
      this.child = null;
      this.ready = null;
      const err = new Error(
        `the asp tools server (${cmd} mcp) ${why}${this.stderr ? `: ${this.stderr.trim()}` : ""}`,
      );
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    child.on("error", (e) => gone(`could not start (${e.message}); set ASP_BIN or put asp on PATH`));
    child.on("exit", (code, signal) => gone(`exited (${signal ?? `code ${code}`})`));
    // The child must not keep OpenCode alive; it ends when its stdin closes.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) s.unref?.();
    this.ready = this.request("initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "asp-opencode-binding", version: "1" },
    }).then(() => {
      this.notify("notifications/initialized", {});
    });
    return this.ready;
  }

  onMessage(line) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      return;
    }
    const p = msg.id !== undefined ? this.pending.get(msg.id) : undefined;
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.error) p.reject(new Error(msg.error.message));
    else p.resolve(msg.result);
  }

  send(obj) {
    if (!this.child) throw new Error("the asp tools server is not running");
    this.child.stdin.write(`${JSON.stringify(obj)}\n`);
  }

  notify(method, params) {
    this.send({ jsonrpc: "2.0", method, params });
  }

  request(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      try {
        this.send({ jsonrpc: "2.0", id, method, params });
      } catch (e) {
        this.pending.delete(id);
        reject(e);
      }
    });
  }

  async call(name, args, abort) {
    await this.start();
    const id = this.nextId;
    const onAbort = () => {
      try {
        this.notify("notifications/cancelled", { requestId: id, reason: "aborted" });
      } catch {
        // the server is gone: nothing to cancel
      }
    };
    abort?.addEventListener("abort", onAbort, { once: true });
    try {
      return await this.request("tools/call", { name, arguments: args });
    } finally {
      abort?.removeEventListener("abort", onAbort);
    }
  }
}

// One server per asp and config for the whole OpenCode process, whichever file loads this.
function server(opts) {
  globalThis[KEY] ??= new Map();
  const key = `${opts.asp ?? ""}\0${opts.config ?? ""}`;
  if (!globalThis[KEY].has(key)) globalThis[KEY].set(key, new Server(opts.asp, opts.config));
  return globalThis[KEY].get(key);
}

// OpenCode requires every property of a plain JSON Schema: an optional one is offered as
// nullable, and the tools layer reads null as left out.
function openCodeArgs(schema) {
  const required = new Set(schema.required ?? []);
  const args = {};
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    if (required.has(name)) {
      args[name] = prop;
    } else {
      args[name] = {
        ...prop,
        type: [prop.type, "null"],
        description: `${prop.description ?? ""} (null: the default)`.trim(),
      };
    }
  }
  return args;
}

async function listTools(srv) {
  srv.listing ??= srv
    .start()
    .then(() => srv.request("tools/list", {}))
    .then((r) => new Map(r.tools.map((t) => [t.name, t])))
    .catch((e) => {
      srv.listing = null;
      throw e;
    });
  return srv.listing;
}

// The OpenCode tool `name`: its description and arguments from the tools layer, each call
// a tools/call on the shared server. `opts`: {asp, config} (asp bind writes both). When
// asp cannot be reached at load time the tool still replaces the built-in, and its calls
// say why they cannot run.
export async function aspTool(name, opts = {}) {
  const srv = server(opts);
  let desc;
  try {
    desc = (await listTools(srv)).get(name);
  } catch (e) {
    return {
      description: `Unavailable: ${e.message}`,
      args: {},
      async execute() {
        throw new Error(`The ${name} tool cannot reach the sandbox: ${e.message}`);
      },
    };
  }
  if (!desc) throw new Error(`asp mcp --vocabulary ${VOCABULARY} has no tool called ${name}`);
  return {
    description: desc.description,
    args: openCodeArgs(desc.inputSchema),
    async execute(args, ctx) {
      const r = await srv.call(name, args, ctx?.abort);
      const text = (r.content ?? []).map((c) => c.text ?? "").join("\n");
      if (r.isError) throw new Error(text);
      return text;
    },
  };
}
