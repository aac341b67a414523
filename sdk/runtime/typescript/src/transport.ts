/**
 * Transports: stdio (a child process speaking framed msgpack on its stdin/stdout; calls
 * are pipelined and matched to their responses by id) and HTTP (one POST /v1/rpc per
 * call, with node:http).
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";

import { AspError } from "./errors.js";
import {
  type Hooks,
  type NotifyHandler,
  RpcConn,
  type Timer,
  type Transport,
  UINT32_MAX,
  callOn,
  later,
  ownLimit,
  tooLarge,
} from "./rpc.js";
import { type Message, RESPONSE, type WireMap, decodeMessage, frame, request } from "./wire.js";

export type { Hooks, NotifyHandler, Subscriber, Transport } from "./rpc.js";
export { RpcConn } from "./rpc.js";
import { WsConn } from "./ws.js";

/** One running responder process and the reader that serves it. */
export class StdioConn extends RpcConn {
  private readonly child: ChildProcess;
  private chunks: Buffer[] = [];
  private buffered = 0;
  private stderrTail: string[] = [];
  private stderrPartial = "";
  private spawned = false;
  private exited: Promise<[number | null, NodeJS.Signals | null]>;
  readonly started: Promise<void>;

  constructor(private readonly t: StdioTransport) {
    super("the stdio responder", t.onNotify, () => t.maxMessage);
    const argv = t.argv;
    this.child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
    this.started = new Promise((resolve, reject) => {
      this.child.once("spawn", () => {
        this.spawned = true;
        resolve();
      });
      this.child.once("error", (e: NodeJS.ErrnoException) => {
        const code = e.code === "ENOENT" ? "not_found" : "transport_error";
        const err = new AspError(code, `cannot start the stdio responder ${argv[0]}: ${e.message}`);
        reject(err);
        this.die(err);
      });
    });
    this.started.catch(() => undefined);
    this.exited = new Promise((resolve) => this.child.once("close", (code, sig) => resolve([code, sig])));
    this.child.stdout?.on("data", (b: Buffer) => this.onData(b));
    this.child.stdout?.on("error", () => undefined); // the end is reported by "end"/"close"
    this.child.stderr?.on("error", () => undefined);
    this.child.stdout?.on("end", () => {
      if (!this.dying) this.die(null);
    });
    this.child.stdin?.on("error", (e: Error) => {
      this.die(new AspError("transport_error", `cannot write to the stdio responder: ${e.message}`), true);
    });
    this.child.stderr?.setEncoding("utf8");
    this.child.stderr?.on("data", (s: string) => {
      const lines = (this.stderrPartial + s).split("\n");
      this.stderrPartial = lines.pop() ?? "";
      for (const l of lines) if (l) this.stderrTail.push(l);
      if (this.stderrTail.length > 8) this.stderrTail.splice(0, this.stderrTail.length - 8);
    });
  }

  send(body: Uint8Array): void {
    this.child.stdin?.write(frame(body));
  }

  private onData(b: Buffer): void {
    if (this.dying) return;
    this.chunks.push(b);
    this.buffered += b.length;
    while (this.buffered >= 4 && !this.dying) {
      let head = this.chunks[0];
      if (head.length < 4) {
        head = Buffer.concat(this.chunks);
        this.chunks = [head];
      }
      const n = head.readUInt32BE(0);
      if (n > this.t.maxMessage) {
        this.die(new AspError("protocol_error", `the stdio responder sent a message of ${n} bytes, more than max_message (${this.t.maxMessage})`), true);
        return;
      }
      if (this.buffered < 4 + n) return;
      const all = this.chunks.length === 1 ? head : Buffer.concat(this.chunks);
      const body = new Uint8Array(n);
      body.set(all.subarray(4, 4 + n));
      const rest = all.subarray(4 + n);
      this.chunks = rest.length ? [rest] : [];
      this.buffered = rest.length;
      const err = this.handle(body);
      if (err) {
        this.die(err, err.code === "protocol_error");
        return;
      }
    }
  }

  private async explain(err: AspError): Promise<AspError> {
    const timer = new Promise<null>((r) => setTimeout(() => r(null), 1000).unref());
    const status = await Promise.race([this.exited, timer]);
    let what = err.message;
    if (status) {
      const [code, sig] = status;
      if (sig) what += `; the responder was killed by ${sig.replace(/^SIG/, "")}`;
      else if (code !== null) what += `; the responder exited with status ${code}`;
    }
    if (this.stderrPartial) this.stderrTail.push(this.stderrPartial);
    const tail = this.stderrTail.filter((s) => s);
    if (tail.length) what += `; its last stderr lines: ${tail.slice(-3).join(" | ")}`;
    return new AspError(err.code, what);
  }

  die(err: AspError | null, kill = false): void {
    if (this.dying) return;
    this.dying = true;
    void this.finish(err, kill);
  }

  private async finish(err: AspError | null, kill: boolean): Promise<void> {
    const closing = this.closing;
    if (kill) this.terminate();
    if (!err) {
      err = new AspError("transport_error", closing ? "the client was closed" : "the stdio responder closed the connection");
      if (!closing) err = await this.explain(err);
    } else if (err.code === "transport_error" && !closing && !err.message.startsWith("cannot start")) {
      err = await this.explain(err);
    }
    this.failAll(err);
    this.child.stdin?.destroy();
  }

  private terminate(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill("SIGTERM");
      const t = setTimeout(() => {
        if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
      }, 2000);
      t.unref();
    }
  }

  async close(timeoutMs = 5000): Promise<void> {
    this.closing = true;
    if (!this.spawned) {
      this.die(null); // it never started: nothing to wait for
      return;
    }
    this.child.stdin?.end();
    const timer = (ms: number) => new Promise<null>((r) => setTimeout(() => r(null), ms).unref());
    // On EOF the responder answers what is in flight, ends its processes and exits.
    if (!(await Promise.race([this.exited, timer(timeoutMs)]))) {
      this.terminate();
      await Promise.race([this.exited, timer(3000)]);
    }
    this.die(null);
  }
}

/** Speaks the RPC over a child's stdin/stdout. A dead responder fails every pending call
 * with transport_error; the next call starts a new one. */
export class StdioTransport implements Transport {
  readonly carriesNotifications = true;
  readonly argv: string[];
  readonly describe: string;
  private conn: StdioConn | null = null;
  private closed = false;

  constructor(
    argv: string[],
    public maxMessage: number,
    readonly onNotify: NotifyHandler,
    /** The deadline of calls without a time limit of their own (docs/faults.md). */
    readonly callTimeoutMs = 60000,
  ) {
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string"))
      throw new AspError("invalid_argument", "stdio needs an argv array, such as ['asp-agent', '--stdio']");
    this.argv = [...argv];
    this.describe = `stdio ${this.argv.join(" ")}`;
  }

  async connection(): Promise<StdioConn> {
    if (this.closed) throw new AspError("transport_error", "the client was closed");
    if (!this.conn || this.conn.dying) this.conn = new StdioConn(this);
    const c = this.conn;
    await c.started;
    return c;
  }

  async call(method: string, params: WireMap, hooks?: Hooks): Promise<Message> {
    const conn = await this.connection();
    // hello is answered once per connection (the liveness probe is not).
    if (method === "hello" && conn.hello) return conn.hello;
    const msg = await callOn(this, conn, method, params, hooks, 0);
    if (method === "hello" && !msg.error) conn.hello = msg;
    return msg;
  }

  async close(): Promise<void> {
    this.closed = true;
    const c = this.conn;
    this.conn = null;
    if (c) await c.close();
  }
}

/** asp-agent --listen (docs/http.md): POST /v1/rpc, one request per call, on kept-alive
 * connections, and one WebSocket (ws.ts) for streams. With `websocket` undefined spawn
 * and proc_attach go over the WebSocket, opened when the first needs it (the listener
 * sends a process's output to the connection that started or attached it), the rest
 * over POST; true sends every call over the WebSocket, false none (streams are then
 * unsupported). The stdio client's deadlines apply (docs/faults.md): connecting and each send or read
 * make progress within call_timeout_ms, and the answer starts within call_timeout_ms plus
 * the op's own timeout_ms; an exec or proc_wait without one is probed with hello on a
 * connection of its own every call_timeout_ms instead. */
export class HttpTransport implements Transport {
  readonly describe: string;
  private ws: Promise<WsConn> | null = null;
  private readonly rpcUrl: URL;
  private nextId = 0;
  /** The server's hello answer, kept until a transport_error. */
  private hello: Message | null = null;
  private closed = false;
  private readonly agent: http.Agent;
  private readonly ca?: Buffer;

  constructor(
    readonly url: string,
    private readonly token: string | undefined,
    public maxMessage: number,
    private readonly caFile?: string,
    /** The deadline of calls without a time limit of their own (docs/faults.md). */
    readonly callTimeoutMs = 60000,
    /** http.websocket: undefined (POST, and the WebSocket for streams), true or false. */
    readonly websocket?: boolean,
    private readonly onNotify?: NotifyHandler,
    /** http.headers: [name, value], checked by the caller. */
    private readonly extraHeaders: [string, string][] = [],
  ) {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new AspError("invalid_argument", `http needs a URL like http://127.0.0.1:8722, got ${JSON.stringify(url)}`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:")
      throw new AspError("invalid_argument", `http needs a URL like http://127.0.0.1:8722, got ${JSON.stringify(url)}`);
    u.pathname = u.pathname.replace(/\/+$/, "") + "/v1/rpc";
    this.rpcUrl = u;
    this.describe = url;
    if (caFile) this.ca = fs.readFileSync(caFile);
    this.agent = u.protocol === "https:" ? new https.Agent({ keepAlive: true, ca: this.ca }) : new http.Agent({ keepAlive: true });
  }

  get carriesNotifications(): boolean {
    return this.websocket !== false && this.onNotify !== undefined;
  }

  streamsRefused(name: string): AspError {
    if (this.websocket === false)
      return new AspError(
        "unsupported",
        `${name} needs the WebSocket, and ${this.url} has http.websocket false (POST only): run the process with exec, poll it with proc_wait, or drop http.websocket`,
      );
    return new AspError("unsupported", `${name} needs a transport that carries notifications; ${this.url} does not: run the process with exec`);
  }

  /** The WebSocket, opened now if there is none or it died. */
  private async wsConnection(): Promise<WsConn> {
    if (this.closed) throw new AspError("transport_error", "the client was closed");
    const cur = this.ws;
    if (cur) {
      const c = await cur.catch(() => null);
      if (c && !c.dying) return c;
      if (this.ws !== cur) return this.wsConnection(); // another call reopened it meanwhile
    }
    const self = this;
    const opening = WsConn.open({
      url: this.url,
      token: this.token,
      headers: this.extraHeaders,
      ca: this.ca,
      caFile: this.caFile,
      callTimeoutMs: this.callTimeoutMs || 60000,
      get maxMessage() {
        return self.maxMessage;
      },
      set maxMessage(n: number) {
        self.maxMessage = n;
      },
      onNotify: this.onNotify as NotifyHandler,
    });
    this.ws = opening;
    opening.catch(() => {
      if (this.ws === opening) this.ws = null;
    });
    return opening;
  }

  private headers(): Record<string, string> {
    const h: Record<string, string> = { "Content-Type": "application/msgpack", Accept: "application/msgpack" };
    if (this.token) h.Authorization = `Bearer ${this.token}`;
    for (const [k, v] of this.extraHeaders) h[k] = v;
    return h;
  }

  /**
   * One POST. The socket must progress within call_timeout_ms while connecting, sending
   * and reading the answer; between the end of the send and the answer's start, `limit`
   * bounds the wait (`onLate` decides then: throw, or wait `ms` longer). `fresh` uses a
   * connection of its own (the probe: the waiting call's is busy).
   */
  private post(
    body: Uint8Array,
    limit: number,
    onLate: () => Promise<number>,
    fresh = false,
  ): Promise<[number, Uint8Array]> {
    const ms = this.callTimeoutMs || 60000;
    const mod = this.rpcUrl.protocol === "https:" ? https : http;
    return new Promise((resolve, reject) => {
      let done = false;
      let timer: Timer | undefined;
      const finish = (e: AspError | null, v?: [number, Uint8Array]) => {
        if (done) return;
        done = true;
        timer?.clear();
        if (e) {
          req.destroy(); // the answer may still come: this connection is spent
          reject(e);
        } else resolve(v as [number, Uint8Array]);
      };
      const opts: https.RequestOptions = { method: "POST", headers: this.headers(), agent: fresh ? false : this.agent };
      if (fresh && this.ca) opts.ca = this.ca;
      const req = mod.request(this.rpcUrl, opts, (res) => {
        timer?.clear();
        req.setTimeout(ms); // the body: each read within call_timeout_ms
        const len = res.headers["content-length"];
        if (len !== undefined && Number(len) > this.maxMessage) {
          finish(new AspError("protocol_error", `the server at ${this.url} sent ${len} bytes, more than max_message (${this.maxMessage})`));
          return;
        }
        const chunks: Buffer[] = [];
        let n = 0;
        res.on("data", (c: Buffer) => {
          n += c.length;
          if (n > this.maxMessage)
            finish(new AspError("protocol_error", `the server at ${this.url} sent more than max_message (${this.maxMessage}) bytes`));
          else chunks.push(c);
        });
        res.on("end", () => finish(null, [res.statusCode ?? 0, new Uint8Array(Buffer.concat(chunks))]));
        res.on("error", (e) => finish(new AspError("transport_error", `cannot read the answer of ${this.url}: ${e.message}`)));
      });
      let answering = false; // the answer has started (or the socket timed out while reading it)
      req.on("response", () => (answering = true));
      req.setTimeout(ms, () => {
        const what = answering ? "cannot read the answer of" : "cannot reach";
        finish(new AspError("transport_error", `${what} ${this.url}: no progress within call_timeout_ms (${ms} ms)`));
      });
      req.on("error", (e: NodeJS.ErrnoException) => {
        const retry = !answering && !fresh && req.reusedSocket && (e.code === "ECONNRESET" || e.code === "EPIPE");
        if (retry && !done) {
          // A kept-alive connection the server had closed: once more, on a new one.
          done = true;
          timer?.clear();
          this.post(body, limit, onLate, true).then(resolve, reject);
          return;
        }
        finish(new AspError("transport_error", `${answering ? "cannot read the answer of" : "cannot reach"} ${this.url}: ${e.message}`));
      });
      const late = () => {
        if (done || answering) return;
        onLate().then(
          (more) => {
            if (done || answering) return;
            timer = later(late, more, false);
          },
          (e: AspError) => finish(e),
        );
      };
      req.end(body, () => {
        // Sent: the answer's deadline counts from here, with no progress bound meanwhile.
        if (done || answering) return;
        req.setTimeout(0);
        timer = later(late, limit, false);
      });
    });
  }

  /** Whether the server answers hello within call_timeout_ms, on a connection of its own. */
  private async probe(): Promise<boolean> {
    const ms = this.callTimeoutMs || 60000;
    try {
      const [status] = await this.post(request(0, "hello", {}), ms, () => Promise.reject(new AspError("timeout", "")), true);
      return status === 200;
    } catch {
      return false;
    }
  }

  async call(method: string, params: WireMap, hooks?: Hooks): Promise<Message> {
    // hello is answered once, until a call finds the server gone.
    if (method === "hello" && this.hello && !this.closed) return this.hello;
    let msg: Message;
    const stream = hooks?.onResult !== undefined || hooks?.beforeSend !== undefined;
    try {
      if (this.websocket === true || (stream && this.websocket !== false)) {
        const conn = await this.wsConnection();
        msg = await callOn(this, conn, method, params, hooks, 0);
      } else msg = await this.callOnce(method, params, hooks);
    } catch (e) {
      if (e instanceof AspError && e.code === "transport_error") this.hello = null;
      throw e;
    }
    if (method === "hello" && !msg.error) this.hello = msg;
    return msg;
  }

  private async callOnce(method: string, params: WireMap, hooks?: Hooks): Promise<Message> {
    if (this.closed) throw new AspError("transport_error", "the client was closed");
    this.nextId = this.nextId < UINT32_MAX ? this.nextId + 1 : 1;
    const id = this.nextId;
    const body = request(id, method, params);
    if (body.length > this.maxMessage) throw tooLarge(body.length, this.maxMessage);
    const ms = this.callTimeoutMs || 60000;
    const own = ownLimit(method, params);
    const limit = own === null ? ms : own + ms;
    const onLate = async (): Promise<number> => {
      if (own === null) {
        if (await this.probe()) return ms;
        throw new AspError("transport_error", `${method}: ${this.url} did not answer a liveness probe (hello) within call_timeout_ms (${ms} ms)`);
      }
      throw new AspError(
        "timeout",
        own
          ? `${method}: no answer within ${limit} ms (its timeout_ms ${own} + call_timeout_ms ${ms})`
          : `${method}: no answer within call_timeout_ms (${ms} ms)`,
      );
    };
    const [status, data] = await this.post(body, limit, onLate);
    if (status === 401)
      throw new AspError(
        "unauthorized",
        `${this.url} refused the request (HTTP 401): the token is missing or wrong; set the one asp-agent --listen was given (http.token_env or http.token_file)`,
      );
    if (status === 403)
      throw new AspError(
        "unauthorized",
        `${this.url} answered 403 Forbidden: something in front of asp-agent --listen refused the request; if a gateway wants a header of its own, set http.headers`,
      );
    if (status === 413) throw new AspError("too_large", `${this.url} refused the request as too large (HTTP 413)`);
    if (status === 400) throw new AspError("protocol_error", `${this.url} could not decode the request (HTTP 400)`);
    if (status !== 200) throw new AspError("transport_error", `${this.url} answered HTTP ${status}; is it asp-agent --listen?`);
    let msg: Message;
    try {
      msg = decodeMessage(data);
    } catch (e) {
      throw new AspError("protocol_error", `${this.url} sent a bad message: ${(e as Error).message}`);
    }
    if (msg.type !== RESPONSE || msg.id !== id)
      throw new AspError("protocol_error", `${this.url} did not answer request ${id} with its response`);
    if (hooks?.onResult && !msg.error) hooks.onResult(msg.result as WireMap, null);
    return msg;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.agent.destroy();
    const ws = this.ws;
    this.ws = null;
    const c = ws ? await ws.catch(() => null) : null;
    if (c) await c.close();
  }
}
