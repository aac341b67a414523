/**
 * .asp.json: discovery, the view the client reads, and the few rules a schema cannot say
 * (docs/design.md, ".asp.json"), as core/src/config.c. The rules themselves are the
 * tables asp-sdkgen made from spec/asp.schema.json and spec/asp.v0.schema.json
 * (configTables.ts), walked by configCheck.ts, so a file gets the C core's messages, word
 * for word.
 */
import * as fs from "node:fs";
import * as os from "node:os";

import { Ctx, type SchemaNode, cut, validate, valueOk, walk } from "./configCheck.js";
import { V0, V1 } from "./configTables.js";
import { AspError } from "./errors.js";
import { JsonError, type JsonObject, type JsonValue, parse as parseJson } from "./json.js";

const CONFIG_MAX_BYTES = 1024 * 1024;
const SECRET_MAX_BYTES = 64 * 1024;
const PATH_MAX = 4096;

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: false });
const byteLength = (s: string) => enc.encode(s).length;

/** glibc's strerror text for the errors file access can give. */
const STRERROR: Record<string, [number, string]> = {
  EPERM: [1, "Operation not permitted"],
  ENOENT: [2, "No such file or directory"],
  EIO: [5, "Input/output error"],
  ENXIO: [6, "No such device or address"],
  EBADF: [9, "Bad file descriptor"],
  EAGAIN: [11, "Resource temporarily unavailable"],
  ENOMEM: [12, "Cannot allocate memory"],
  EACCES: [13, "Permission denied"],
  EBUSY: [16, "Device or resource busy"],
  EEXIST: [17, "File exists"],
  ENOTDIR: [20, "Not a directory"],
  EISDIR: [21, "Is a directory"],
  EINVAL: [22, "Invalid argument"],
  ENFILE: [23, "Too many open files in system"],
  EMFILE: [24, "Too many open files"],
  ETXTBSY: [26, "Text file busy"],
  EFBIG: [27, "File too large"],
  ENOSPC: [28, "No space left on device"],
  EROFS: [30, "Read-only file system"],
  ENAMETOOLONG: [36, "File name too long"],
  ENOTEMPTY: [39, "Directory not empty"],
  ELOOP: [40, "Too many levels of symbolic links"],
};
const ERRNO_CODES: Record<string, string> = {
  ENOENT: "not_found",
  EACCES: "permission_denied",
  EPERM: "permission_denied",
  EEXIST: "already_exists",
  ENOTDIR: "not_a_directory",
  EISDIR: "is_a_directory",
  ENOTEMPTY: "not_empty",
  EINVAL: "invalid_argument",
};

function error(code: string, msg: string, path?: string): AspError {
  return new AspError(code, cut(msg), path === undefined ? undefined : { path });
}

/** An error of a system call, as asp_error_errno words it: "what: strerror". */
export function osError(e: unknown, what: string, path?: string): AspError {
  const name = (e as NodeJS.ErrnoException)?.code ?? "EIO";
  const known = STRERROR[name];
  const errno = known ? known[0] : -((e as NodeJS.ErrnoException)?.errno ?? 0) || undefined;
  const text = known ? known[1] : String((e as Error)?.message ?? e);
  return new AspError(ERRNO_CODES[name] ?? "io_error", cut(`${what}: ${text}`), { errno, path });
}

const isInt = (v: unknown): v is bigint => typeof v === "bigint";
const isObj = (v: unknown): v is JsonObject => v instanceof Map;

type Kind =
  | "skip" | "transport" | "string" | "local_path" | "uint" | "u64" | "bool" | "hostkey" | "env" | "argv"
  | "headers";
const FIELDS: [string, Kind][] = [
  ["version", "skip"], ["transport", "transport"], ["cwd", "string"], ["env", "env"],
  ["timeout_ms", "u64"], ["call_timeout_ms", "uint"], ["ssh.host", "string"], ["ssh.port", "uint"],
  ["ssh.user", "string"], ["ssh.identity_file", "local_path"], ["ssh.identity_env", "string"],
  ["ssh.password_env", "string"], ["ssh.known_hosts", "local_path"],
  ["ssh.host_key_sha256", "string"], ["ssh.host_key", "string"],
  ["ssh.strict_host_key_checking", "hostkey"], ["ssh.connect_timeout_ms", "uint"],
  ["ssh.agent", "string"], ["stdio.command", "argv"], ["http.url", "string"],
  ["http.token_env", "string"], ["http.token_file", "local_path"],
  ["http.ca_file", "local_path"], ["http.websocket", "bool"], ["http.headers", "headers"],
  ["workspace.local", "local_path"], ["workspace.sandbox", "string"],
];
const TRANSPORTS = ["stdio", "ssh", "http"];

/** The view reads only what the schema defines, and knows every transport it names. */
function checkFields(): void {
  for (const [p] of FIELDS)
    if (walk(V1, p) === undefined)
      throw error("internal", `the SDK's config view reads ${p}, which spec/asp.schema.json does not define`);
  for (const name of walk(V1, "transport")?.values ?? [])
    if (typeof name !== "string" || !TRANSPORTS.includes(name))
      throw error("internal", `spec/asp.schema.json names a transport the SDK does not know: ${typeof name === "string" ? name : "(not a string)"}`);
}

function docAt(doc: JsonValue, dotted: string): JsonValue | undefined {
  let node: JsonValue | undefined = doc;
  for (const seg of dotted.split(".")) {
    node = isObj(node) ? node.get(seg) : undefined;
    if (node === undefined) return undefined;
  }
  return node;
}

// ---- version 0 (core/src/config.c map_v0, docs/decisions.md "Files of the ASP v0 draft") --

/** "version": "0"; also 0 beside "connection", so the v0 schema names the version. */
function isV0(doc: JsonValue): boolean {
  if (!isObj(doc)) return false;
  const v = doc.get("version");
  return v === "0" || (isInt(v) && v === 0n && doc.has("connection"));
}

/** The version 1 document a valid v0 document means, keys in the C core's order. */
function v0ToV1(v0: JsonObject): JsonObject {
  const connV = v0.get("connection");
  const conn: JsonObject = isObj(connV) ? connV : new Map();
  const idV = conn.get("identity");
  const id: JsonObject = isObj(idV) ? idV : new Map();
  const v1: JsonObject = new Map<string, JsonValue>([
    ["version", 1n],
    ["transport", "ssh"],
  ]);
  const ssh: JsonObject = new Map();
  if (v0.has("workspace")) v1.set("cwd", v0.get("workspace") as JsonValue);
  for (const k of ["host", "port", "user"]) if (conn.has(k)) ssh.set(k, conn.get(k) as JsonValue);
  if (id.has("file")) ssh.set("identity_file", id.get("file") as JsonValue);
  if (id.has("env")) ssh.set("identity_env", id.get("env") as JsonValue);
  const hk = conn.get("host_key");
  if (typeof hk !== "string") ssh.set("strict_host_key_checking", "accept-new");
  else ssh.set(hk.startsWith("SHA256:") ? "host_key_sha256" : "host_key", hk);
  v1.set("ssh", ssh);
  return v1;
}

// ---- paths -------------------------------------------------------------------------------

function join(d: string, name: string): string {
  while (name.startsWith("./")) name = name.slice(2);
  if (name === ".") name = "";
  if (!name) return d;
  return d + (d.endsWith("/") ? "" : "/") + name;
}

function absolute(path: string): string {
  let out: string;
  if (path.startsWith("/")) out = path;
  else {
    let cwd: string;
    try {
      cwd = process.cwd();
    } catch (e) {
      throw osError(e, "cannot get the working directory");
    }
    out = join(cwd, path);
  }
  if (byteLength(out) >= PATH_MAX) throw error("too_large", `path too long: ${path}`, path);
  return out;
}

function homeDir(): string | null {
  const home = process.env.HOME;
  if (home) return home;
  try {
    return os.userInfo().homedir || null;
  } catch {
    return null;
  }
}

function localPath(v: Ctx, base: string, p: string): string {
  let out: string;
  if (p.startsWith("~")) {
    if (p.length > 1 && p[1] !== "/") throw v.fail("value", "only ~/ is expanded, not ~user/; write the full path");
    const home = homeDir();
    if (!home) throw v.fail("value", "cannot expand ~: $HOME is not set");
    out = join(home, p.length > 1 ? p.slice(2) : "");
  } else if (p.startsWith("/")) out = p;
  else out = join(base, p);
  if (byteLength(out) >= PATH_MAX) throw v.fail("value", `path longer than ${PATH_MAX - 1} bytes`);
  return out;
}

// ---- the view ----------------------------------------------------------------------------

/** A loaded, validated .asp.json, as asp_config_view shows it: strings are undefined when
 * absent, schema defaults applied, local paths absolute. */
export interface Config {
  path?: string;
  transport: "stdio" | "ssh" | "http";
  cwd?: string;
  /** In file order. */
  env: [string, string][];
  timeout_ms: number;
  /** Deadline of calls without a time limit of their own. */
  call_timeout_ms: number;
  ssh: Record<string, string | number | boolean>;
  stdio: { command?: string[] };
  http: {
    url?: string;
    token_env?: string;
    token_file?: string;
    ca_file?: string;
    websocket?: boolean;
    /** http.headers in file order: the value as written, or the variable holding it. */
    headers: { name: string; value?: string; env?: string }[];
  };
  /** The harness's directory (absolute) and the sandbox directory it stands for
   * (workspace.ts maps between them). */
  workspace: { local?: string; sandbox?: string };
  /** The whole validated file as version 1 (keys the view lacks too): objects are Maps,
   * integers bigints. */
  document: JsonObject;
}

function viewBug(path: string): AspError {
  return error("internal", `spec/asp.schema.json lets ${path} hold a value the SDK's config view cannot represent`);
}

function buildField(v: Ctx, path: string, kind: Kind, doc: JsonValue, cfg: Config, base: string): void {
  let val: JsonValue | undefined = docAt(doc, path);
  if (val === undefined) {
    const d = walk(V1, path)?.default;
    val = typeof d === "number" ? BigInt(d) : d;
  }
  if (val === undefined || val === null || kind === "skip") return;
  v.path = path.split(".");
  const dot = path.lastIndexOf(".");
  const section = dot >= 0 ? path.slice(0, dot) : "";
  const leaf = path.slice(dot + 1);
  const store = (x: string | number | boolean) => {
    if (section === "ssh") cfg.ssh[leaf] = x;
    else if (section === "http") (cfg.http as Record<string, unknown>)[leaf] = x;
    else if (section === "workspace") (cfg.workspace as Record<string, unknown>)[leaf] = x;
    else (cfg as unknown as Record<string, unknown>)[leaf] = x;
  };
  switch (kind) {
    case "transport":
      if (typeof val !== "string" || !TRANSPORTS.includes(val)) throw viewBug(path);
      cfg.transport = val as Config["transport"];
      return;
    case "string":
      if (typeof val !== "string") throw viewBug(path);
      store(val);
      return;
    case "local_path":
      if (typeof val !== "string") throw viewBug(path);
      store(localPath(v, base, val));
      return;
    case "uint":
    case "u64":
      if (!isInt(val) || val < 0n || (kind === "uint" && val > 0xffffffffn)) throw viewBug(path);
      store(Number(val));
      return;
    case "bool":
      if (typeof val !== "boolean") throw viewBug(path);
      store(val);
      return;
    case "hostkey":
      if (typeof val === "boolean" || val === "accept-new") store(val);
      else throw viewBug(path);
      return;
    case "env":
      if (!isObj(val)) throw viewBug(path);
      cfg.env = [];
      for (const [k, x] of val) {
        if (typeof x !== "string") throw viewBug(path);
        cfg.env.push([k, x]);
      }
      return;
    case "headers":
      if (!isObj(val)) throw viewBug(path);
      for (const [name, x] of val) {
        if (typeof x === "string") cfg.http.headers.push({ name, value: x });
        else if (isObj(x) && typeof x.get("env") === "string") cfg.http.headers.push({ name, env: x.get("env") as string });
        else throw viewBug(path);
      }
      return;
    case "argv": {
      if (!Array.isArray(val) || !val.every((x) => typeof x === "string")) throw viewBug(path);
      const argv = [...(val as string[])];
      if (argv.length && (argv[0].includes("/") || argv[0].startsWith("~"))) {
        v.path.push(0);
        argv[0] = localPath(v, base, argv[0]);
      }
      cfg.stdio.command = argv;
      return;
    }
  }
}

function syntaxError(file: string, filePath: string | undefined, e: JsonError): AspError {
  let text = e.text;
  for (const [jansson, ours] of [
    ["\\u0000 is not allowed without JSON_ALLOW_NUL", "strings may not contain \\u0000"],
    ["NUL byte in object key not supported", "keys may not contain \\u0000"],
  ]) {
    if (text.startsWith(jansson)) {
      text = ours + text.slice(jansson.length);
      break;
    }
  }
  return error("invalid_argument", `${file}:${e.line > 0 ? e.line : 1}:${e.column > 0 ? e.column : 1}: invalid JSON: ${text}`, filePath);
}

/** Validates config bytes. `filename` names the file in messages and its folder is the
 * base of relative paths; undefined means "<memory>" and the working directory. */
export function parseConfig(data: Uint8Array, filename: string | undefined): Config {
  let file = "<memory>",
    base: string;
  if (filename !== undefined) {
    file = absolute(filename);
    base = file.slice(0, file.lastIndexOf("/")) || "/";
  } else {
    try {
      base = process.cwd();
    } catch (e) {
      throw osError(e, "cannot get the working directory");
    }
  }
  if (data.length > CONFIG_MAX_BYTES)
    throw error("too_large", `${file}: ${data.length} bytes, more than a config may hold (${CONFIG_MAX_BYTES}); is it the right file?`, filename);
  checkFields();
  const filePath = filename !== undefined ? file : undefined;
  let doc: JsonValue;
  try {
    doc = parseJson(data);
  } catch (e) {
    if (e instanceof JsonError) throw syntaxError(file, filePath, e);
    throw e;
  }
  const v = new Ctx(data, file, filePath);
  // A file of the v0 draft is checked against its own rules, then read as what it means.
  if (isV0(doc)) {
    validate(v, V0, doc);
    doc = v0ToV1(doc as JsonObject);
  }
  validate(v, V1, doc);
  const cfg: Config = { transport: "stdio", env: [], timeout_ms: 0, call_timeout_ms: 60000, ssh: {}, stdio: {}, http: { headers: [] }, workspace: {}, document: doc as JsonObject };
  if (filename !== undefined) cfg.path = file;
  for (const [path, kind] of FIELDS) buildField(v, path, kind, doc, cfg, base);
  return cfg;
}

function readFile(path: string, limit: number, what: string): Uint8Array {
  let fd: number;
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY);
  } catch (e) {
    throw osError(e, `cannot open ${what} ${path}`, path);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    while (total <= limit) {
      const b = new Uint8Array(65536);
      let n: number;
      try {
        n = fs.readSync(fd, b, 0, b.length, null);
      } catch (e) {
        throw osError(e, `cannot read ${what} ${path}`, path);
      }
      if (n === 0) break;
      chunks.push(b.subarray(0, n));
      total += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  if (total > limit) throw error("too_large", `${what} ${path} is larger than ${limit} bytes; is it the right file?`, path);
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** The config's absolute path: $ASP_CONFIG when set and non-empty, else .asp.json in
 * startDir (default: the working directory), then each parent up to /. */
export function findConfig(startDir?: string): string {
  const env = process.env.ASP_CONFIG;
  if (env) {
    let st: fs.Stats;
    try {
      st = fs.statSync(env);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT")
        throw error("not_found", `ASP_CONFIG names ${env}, which does not exist; point it at a .asp.json or unset it`, env);
      throw osError(e, `cannot use ASP_CONFIG=${env}`, env);
    }
    if (st.isDirectory()) throw error("is_a_directory", `ASP_CONFIG names ${env}, a directory; point it at a .asp.json file`, env);
    return absolute(env);
  }
  let start = absolute(startDir ?? ".");
  while (start.length > 1 && start.endsWith("/")) start = start.slice(0, -1);
  let d = start;
  for (;;) {
    const cand = join(d, ".asp.json");
    if (byteLength(cand) >= PATH_MAX) throw error("too_large", `path too long: ${d}`, d);
    try {
      if (!fs.statSync(cand).isDirectory()) return cand;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" && code !== "ENOTDIR") throw osError(e, `cannot look for ${cand}`, cand);
    }
    if (d === "/") break;
    const i = d.lastIndexOf("/");
    d = i > 0 ? d.slice(0, i) : "/";
  }
  throw error("not_found", `no .asp.json in ${start} or any parent directory; create one with \`asp init\`, or set ASP_CONFIG to its path`, start);
}

/** Reads and validates the config at path, or the one findConfig() finds. */
export function loadConfig(path?: string): Config {
  const p = path ?? findConfig();
  return parseConfig(readFile(p, CONFIG_MAX_BYTES, "config"), p);
}

/** A secret named by an *_env key or an *_file key, as asp_config_secret reads it;
 * undefined when both are undefined. */
/** Extra HTTP headers as [name, value] pairs, from a record or pairs, checked as the schema
 * checks http.headers (the names the transport sets itself refused). */
export function checkHeaders(headers?: Record<string, string> | [string, string][]): [string, string][] {
  const items: [string, string][] = Array.isArray(headers) ? [...headers] : Object.entries(headers ?? {});
  const h = walk(V1, "http.headers") as SchemaNode;
  const names = V1.nodes[h.names as number],
    values = V1.nodes[h.more as number];
  for (const [name, value] of items) {
    if (typeof name !== "string" || !valueOk(V1.nodes, names, name))
      throw error("invalid_argument", `headers: ${JSON.stringify(name)}: expected ${names.expected}`);
    if (typeof value !== "string" || !valueOk(V1.nodes, values, value))
      throw error("invalid_argument", `headers: ${name}: expected ${values.expected}, got ${JSON.stringify(value)}`);
  }
  return items;
}

/** http.headers with each {"env": NAME} read from the environment. */
export function headersOf(cfg: Config): [string, string][] {
  const where = cfg.path ?? "the config";
  return cfg.http.headers.map(({ name, value, env }) => {
    if (env !== undefined) {
      value = process.env[env];
      if (value === undefined) throw error("not_found", `http.headers.${name} in ${where}: environment variable ${env} is not set`);
      if ([...value].some((c) => (c < " " && c !== "\t") || c === "\x7f"))
        throw error(
          "invalid_argument",
          `http.headers.${name} in ${where}: the variable ${env} holds a control character (a newline?), which a header cannot carry`,
          cfg.path,
        );
    }
    return [name, value as string];
  });
}

export function readSecret(envName?: string, filePath?: string): string | undefined {
  const value = envName ? process.env[envName] : undefined;
  let s: string;
  if (value !== undefined) s = value;
  else if (filePath) {
    const raw = readFile(filePath, SECRET_MAX_BYTES, "secret file");
    if (raw.includes(0)) throw error("invalid_argument", `secret file ${filePath} holds a NUL byte`, filePath);
    s = dec.decode(raw);
  } else if (envName) {
    throw error("not_found", `environment variable ${envName} is not set; export it with the secret or name a file in the config's *_file key`);
  } else return undefined;
  if (s.endsWith("\n")) s = s.slice(0, -1);
  if (s.endsWith("\r")) s = s.slice(0, -1);
  if (!s) {
    if (value !== undefined) throw error("invalid_argument", `environment variable ${envName} is empty`);
    throw error("invalid_argument", `secret file ${filePath} is empty`, filePath);
  }
  return s;
}
