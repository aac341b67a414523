/**
 * The client machinery under the generated Client: transports, the config's defaults
 * (cwd, env, timeout), and Process, the async iterator a spawn returns.
 */
import { type OpDesc, type RecordDesc, decodeRecord, encodeParams } from "./codec.js";
import { type Config, checkHeaders, headersOf, loadConfig, readSecret } from "./config.js";
import { AspError, copyError } from "./errors.js";
import { HttpTransport, type RpcConn, StdioTransport, type Subscriber, type Transport } from "./transport.js";
import { type Message, type WireMap, errorFromMap } from "./wire.js";
import { Connection } from "./socket.js";
import { type TreeCounts, type TreeOptions, downloadDir, uploadDir } from "./tree.js";

/** What the generated spec.ts gives the runtime. */
export interface SpecTables {
  PROTOCOL: number;
  MAX_MESSAGE: number;
  ERROR_CODES: readonly string[];
  OPS: Record<string, OpDesc>;
  NOTES: Record<string, RecordDesc>;
  STREAM_END: string;
  CONFIG_SCHEMA: string;
  CONFIG_V0_SCHEMA: string;
}

/** Defaults applied to every call, as a config's are. */
export interface ClientOptions {
  /** Relative paths (and an absent or relative cwd) join this sandbox folder. */
  cwd?: string;
  /** Added to every exec and spawn env (the call's own entries win). */
  env?: Record<string, string>;
  /** Used when a call gives no timeout_ms (or 0). */
  timeout_ms?: number;
  /** The deadline of calls without a time limit of their own (default 60000; docs/faults.md). */
  call_timeout_ms?: number;
}

export interface HttpOptions extends ClientOptions {
  /** PEM file of CA certificates for an https URL. */
  ca_file?: string;
  /** http.websocket: absent, POST and a WebSocket for streams; true, every call over the
   * WebSocket; false, POST only (spawn and proc_attach unsupported). */
  websocket?: boolean;
  /** Headers for every request and the upgrade, for a gateway in front of the listener
   * (http.headers); the names the transport sets itself are refused. */
  headers?: Record<string, string> | [string, string][];
}

/** A relative sandbox path joined to the config's cwd, as the C client does it. */
export function joinPath(base: string, name: string): string {
  return base + (base.endsWith("/") ? "" : "/") + name;
}

/**
 * A process started by Client.spawn (or followed by Client.proc_attach). Iterate it
 * (`for await`) for its output chunks in order, then its exit event; a transport that
 * dies meanwhile throws AspError (transport_error) from the iterator.
 */
export class Process<E extends { proc?: number | bigint } = Record<string, unknown>>
  implements AsyncIterableIterator<E>, Subscriber
{
  /** The process handle. */
  proc = -1;
  /** The op's result (spawn: { proc }). */
  result: unknown = undefined;
  /** The exit event, once it came. */
  exit: E | undefined = undefined;
  /** @internal */ conn: RpcConn | null = null;
  private readonly queue: E[] = [];
  private waiters: Array<() => void> = [];
  private ended = false;
  private error: AspError | null = null;

  constructor(
    private readonly client: ClientBase,
    private readonly endEvent: string,
  ) {}

  /** @internal */
  push(event: Record<string, unknown>): void {
    if (this.ended) return;
    this.queue.push(event as E);
    if ((event as { event?: string }).event === this.endEvent) {
      this.exit = event as E;
      this.ended = true;
      this.detach();
    }
    this.wake();
  }

  /** @internal */
  fail(err: AspError): void {
    if (!this.ended) {
      this.error = err;
      this.ended = true;
    }
    this.wake();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private detach(): void {
    if (this.conn && this.proc >= 0) this.conn.unsubscribe(this.proc, this);
    this.conn = null;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(): Promise<IteratorResult<E, undefined>> {
    while (!this.queue.length && !this.ended) await new Promise<void>((r) => this.waiters.push(r));
    if (this.queue.length) return { value: this.queue.shift() as E, done: false };
    if (this.error) throw copyError(this.error);
    return { value: undefined, done: true };
  }

  /**
   * The next event, or undefined once the exit has been returned (Python's next_event).
   * With timeoutMs, rejects with AspError "timeout" when nothing came in time; the
   * process is still followed, and a later call gets what comes next.
   */
  async nextEvent(timeoutMs?: number): Promise<E | undefined> {
    if (timeoutMs !== undefined && !this.queue.length && !this.ended) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      let wake: (() => void) | undefined;
      const came = await new Promise<boolean>((resolve) => {
        wake = () => resolve(true);
        this.waiters.push(wake);
        timer = setTimeout(() => resolve(false), Math.max(0, timeoutMs));
      });
      clearTimeout(timer);
      if (!came) {
        this.waiters = this.waiters.filter((w) => w !== wake);
        if (!this.queue.length && !this.ended)
          throw new AspError("timeout", `no event from process ${this.proc} in ${timeoutMs} ms`);
      }
    }
    const r = await this.next();
    return r.done ? undefined : r.value;
  }

  async return(): Promise<IteratorResult<E, undefined>> {
    this.close();
    return { value: undefined, done: true };
  }

  /** Reads to the end: stdout and stderr bytes and the exit event. */
  async collect(): Promise<{ stdout: Uint8Array; stderr: Uint8Array; exit: E | undefined }> {
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    for await (const ev of this) {
      const o = ev as { stream?: string; data?: Uint8Array };
      if (o.stream === "stdout" && o.data) out.push(o.data);
      else if (o.stream === "stderr" && o.data) err.push(o.data);
    }
    return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), exit: this.exit };
  }

  /** Writes to the process's stdin (proc_write); eof closes it. */
  write(data: Uint8Array | string = new Uint8Array(0), eof = false): Promise<unknown> {
    return this.client._call("proc_write", { proc: this.proc, data, eof });
  }

  /** Signals the process group (proc_signal). */
  signal(signal = "TERM"): Promise<unknown> {
    return this.client._call("proc_signal", { proc: this.proc, signal });
  }

  /** Sets the terminal's window size (proc_resize): for a process spawned with tty. */
  resize(rows: number, cols: number): Promise<unknown> {
    return this.client._call("proc_resize", { proc: this.proc, rows, cols });
  }

  /** Waits for the exit on the responder (proc_wait). */
  wait(timeout_ms = 0): Promise<unknown> {
    return this.client._call("proc_wait", { proc: this.proc, timeout_ms });
  }

  /** Stops following the process here; it keeps running in the sandbox. */
  close(): void {
    this.ended = true;
    this.detach();
    this.wake();
  }
}

type Ctor<T> = new (transport: Transport, options?: ClientOptions, config?: Config) => T;

/** Shared by every generated Client: see Client for the methods. */
export class ClientBase {
  /** Set by the generated subclass. */
  static spec: SpecTables;
  static readonly SDK_NAME: string = "TypeScript";

  readonly cwd?: string;
  readonly env: Record<string, string>;
  readonly timeout_ms: number;

  constructor(
    protected readonly transport: Transport,
    options: ClientOptions = {},
    /** The config the client came from, when it came from one. */
    readonly config?: Config,
  ) {
    this.cwd = options.cwd;
    this.env = { ...(options.env ?? {}) };
    this.timeout_ms = options.timeout_ms ?? 0;
  }

  protected get spec(): SpecTables {
    return (this.constructor as typeof ClientBase).spec;
  }

  /** A client speaking to `argv` (e.g. ["asp-agent", "--stdio"]) over its stdin/stdout. */
  static async stdio<T extends ClientBase>(this: Ctor<T> & typeof ClientBase, argv: string[], options?: ClientOptions): Promise<T> {
    let self: T | undefined;
    const t = new StdioTransport(
      argv,
      this.spec.MAX_MESSAGE,
      (conn, method, params) => (self as ClientBase).onNotify(conn, method, params),
      options?.call_timeout_ms,
    );
    self = new this(t, options);
    await t.connection(); // start it now, so a bad argv fails here
    return self;
  }

  /** A client of asp-agent --listen at `url`: calls as POST URL/v1/rpc; spawn and
   * proc_attach, whose output comes as notifications, over one WebSocket (GET URL/v1/ws)
   * opened when the first needs it. `websocket: true` sends every call over the
   * WebSocket, `false` none (streams are then unsupported), as http.websocket; `headers`
   * go with every request and the upgrade, as http.headers. */
  static http<T extends ClientBase>(this: Ctor<T> & typeof ClientBase, url: string, token?: string, options?: HttpOptions, config?: Config): T {
    let self: T | undefined;
    const headers = checkHeaders(options?.headers);
    const t = new HttpTransport(
      url,
      token,
      this.spec.MAX_MESSAGE,
      options?.ca_file,
      options?.call_timeout_ms,
      options?.websocket,
      (conn, method, params) => (self as ClientBase).onNotify(conn, method, params),
      headers,
    );
    self = new this(t, options, config);
    return self;
  }

  /** A client for the sandbox .asp.json names: the file at `path`, else $ASP_CONFIG,
   * else .asp.json in the working directory or a parent. */
  static async fromConfig<T extends ClientBase>(this: Ctor<T> & typeof ClientBase, path?: string): Promise<T> {
    const cfg = loadConfig(path);
    const options: HttpOptions = { cwd: cfg.cwd, env: Object.fromEntries(cfg.env), timeout_ms: cfg.timeout_ms };
    if (cfg.transport === "stdio") {
      let self: T | undefined;
      const t = new StdioTransport(
        cfg.stdio.command as string[],
        this.spec.MAX_MESSAGE,
        (conn, method, params) => (self as ClientBase).onNotify(conn, method, params),
        cfg.call_timeout_ms,
      );
      self = new this(t, options, cfg);
      await t.connection();
      return self;
    }
    if (cfg.transport === "http") {
      const token = readSecret(cfg.http.token_env, cfg.http.token_file);
      const opts = {
        ...options,
        ca_file: cfg.http.ca_file,
        call_timeout_ms: cfg.call_timeout_ms,
        websocket: cfg.http.websocket,
        headers: headersOf(cfg),
      };
      return this.http(cfg.http.url as string, token, opts, cfg) as T;
    }
    throw new AspError(
      "unsupported",
      `${cfg.path}: the ${this.SDK_NAME} SDK cannot serve transport ${cfg.transport}; use the asp CLI or the C library`,
      { path: cfg.path },
    );
  }

  /** Finds and validates a config without connecting. */
  static loadConfig(path?: string): Config {
    return loadConfig(path);
  }

  /** Closes the connection: a stdio responder gets EOF, answers what is in flight and
   * exits. Calls after close throw transport_error. */
  async close(): Promise<void> {
    await this.transport.close();
  }

  /** "stdio ARGV..." or the HTTP URL. */
  get transportName(): string {
    return this.transport.describe;
  }

  get maxMessage(): number {
    return this.transport.maxMessage;
  }

  /** The config's defaults: relative paths join cwd, env merges, timeout fills. */
  private apply(op: OpDesc, params: Record<string, unknown>): Record<string, unknown> {
    const out: Record<string, unknown> = { ...params };
    for (const f of op.params.fields) {
      const v = out[f.name];
      if (f.role === "path") {
        if ((v === undefined || v === null) && f.name === "cwd" && this.cwd) out[f.name] = this.cwd;
        else if (typeof v === "string" && v && this.cwd && !v.startsWith("/")) out[f.name] = joinPath(this.cwd, v);
      } else if (f.role === "env" && Object.keys(this.env).length) {
        if (v === undefined || v === null) out[f.name] = { ...this.env };
        else if (typeof v === "object") out[f.name] = { ...this.env, ...(v as Record<string, string>) };
      } else if (f.role === "timeout" && this.timeout_ms && !v) {
        out[f.name] = this.timeout_ms;
      }
    }
    return out;
  }

  private result(op: OpDesc, msg: Message): Record<string, unknown> {
    if (msg.error) throw errorFromMap(msg.error, this.spec.ERROR_CODES);
    return decodeRecord(op.result, msg.result);
  }

  /** @internal One call: params -> wire -> response -> result object. */
  async _call(name: string, params: unknown): Promise<unknown> {
    const op = this.spec.OPS[name];
    const wire = encodeParams(op.params, this.apply(op, (params ?? {}) as Record<string, unknown>));
    const msg = await this.transport.call(op.name, wire);
    const result = this.result(op, msg);
    if (name === "hello" && typeof result.max_message === "number" && result.max_message > 0)
      this.transport.maxMessage = result.max_message;
    return result;
  }

  /**
   * connect, as a Node.js Duplex: a TCP connection opened from inside the sandbox. Reads
   * end when the peer shuts its side; end() half-closes; destroy() resets it.
   */
  async openConnection(port: number, host?: string): Promise<Connection> {
    const params: Record<string, unknown> = { port };
    if (host !== undefined) params.host = host;
    const p = await this._stream<{ proc?: number | bigint }>("connect", params, "result");
    return new Connection(p as unknown as ConstructorParameters<typeof Connection>[0]);
  }

  /**
   * Copies the local directory `sourceDir` into the sandbox directory `targetDir` (made
   * with its parents when absent, merged into when it exists) as one tar stream
   * (tree_write): files, directories and symlinks with their modes and mtimes. A refused
   * stream, or any failure, leaves nothing there.
   */
  async uploadDir(sourceDir: string, targetDir: string, options?: TreeOptions): Promise<TreeCounts> {
    return uploadDir(this as never, sourceDir, targetDir, options);
  }

  /**
   * Copies the sandbox directory `sourceDir` into the local directory `targetDir` (made
   * when absent, merged into when it exists) as one tar stream (tree_read), checked and
   * unpacked through a temporary directory: a failure leaves nothing.
   */
  async downloadDir(sourceDir: string, targetDir: string, options?: TreeOptions): Promise<TreeCounts> {
    return downloadDir(this as never, sourceDir, targetDir, options);
  }

  /** @internal An op whose process is followed by notifications: spawn (the handle
   * comes in the result) or proc_attach (the handle is in the params). */
  async _stream<E extends { proc?: number | bigint }>(name: string, params: unknown, procFrom: "result" | "params"): Promise<Process<E>> {
    const op = this.spec.OPS[name];
    if (!this.transport.carriesNotifications)
      throw (
        this.transport.streamsRefused?.(name) ??
        new AspError("unsupported", `${name} needs a transport that carries notifications; ${this.transport.describe} does not: run the process with exec`)
      );
    const wire = encodeParams(op.params, this.apply(op, (params ?? {}) as Record<string, unknown>));
    const p = new Process<E>(this, this.spec.STREAM_END);
    const hooks =
      procFrom === "result"
        ? {
            onResult: (result: WireMap, conn: RpcConn | null) => {
              const proc = result?.proc;
              if (conn && typeof proc === "number" && Number.isInteger(proc) && proc >= 0) {
                p.proc = proc;
                p.conn = conn;
                conn.subscribe(proc, p);
              }
            },
          }
        : {
            beforeSend: (conn: RpcConn) => {
              p.proc = Number(wire.proc);
              p.conn = conn;
              conn.subscribe(p.proc, p);
            },
          };
    try {
      const msg = await this.transport.call(op.name, wire, hooks);
      p.result = this.result(op, msg);
    } catch (e) {
      p.close();
      throw e;
    }
    return p;
  }

  /** @internal */
  onNotify(conn: RpcConn, method: string, params: WireMap): AspError | null {
    const desc = this.spec.NOTES[method];
    if (!desc) return null; // a notification this SDK does not know: ignore it
    let ev: Record<string, unknown>;
    try {
      ev = decodeRecord(desc, params);
    } catch (e) {
      return new AspError("protocol_error", `the responder sent a bad ${method} notification: ${(e as Error).message}`);
    }
    ev.event = method;
    conn.route(typeof ev.proc === "number" ? ev.proc : undefined, ev);
    return null;
  }
}
