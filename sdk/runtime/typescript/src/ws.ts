/**
 * The WebSocket of asp-agent --listen (docs/http.md): RFC 6455's client side over
 * node:net and node:tls, no dependency. GET PREFIX/v1/ws with subprotocol asp.v1 and the
 * bearer token; one binary message is one msgpack message. Frames out are masked; frames
 * in are reassembled within max_message, pings answered, close frames reported with
 * their code. The framing is pure functions over bytes; WsConn carries them.
 */
import { createHash, randomBytes } from "node:crypto";
import * as net from "node:net";
import * as tls from "node:tls";

import { AspError } from "./errors.js";
import { type NotifyHandler, RpcConn } from "./rpc.js";

export const SUBPROTOCOL = "asp.v1";
const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/** The most an upgrade answer's status line and headers may take. */
export const MAX_HEAD = 16384;
export const CONT = 0x0,
  TEXT = 0x1,
  BINARY = 0x2,
  CLOSE = 0x8,
  PING = 0x9,
  PONG = 0xa;
export const NORMAL = 1000,
  GOING_AWAY = 1001,
  PROTOCOL_ERROR = 1002,
  UNSUPPORTED_DATA = 1003,
  TOO_BIG = 1009;

/** The server broke the framing: close the WebSocket with `code`. */
export class WsError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** The upgrade request (with the `extra` headers) and the Sec-WebSocket-Accept its answer
 * must carry. */
export function handshake(
  hostport: string,
  path: string,
  token?: string,
  key?: string,
  extra: [string, string][] = [],
): { request: Buffer; accept: string } {
  const k = key ?? randomBytes(16).toString("base64");
  const lines = [
    `GET ${path} HTTP/1.1`,
    `Host: ${hostport}`,
    "Upgrade: websocket",
    "Connection: Upgrade",
    `Sec-WebSocket-Key: ${k}`,
    "Sec-WebSocket-Version: 13",
    `Sec-WebSocket-Protocol: ${SUBPROTOCOL}`,
  ];
  if (token) lines.push(`Authorization: Bearer ${token}`);
  for (const [k, v] of extra) lines.push(`${k}: ${v}`);
  const accept = createHash("sha1").update(k + GUID).digest("base64");
  return { request: Buffer.from(lines.join("\r\n") + "\r\n\r\n", "latin1"), accept };
}

/** Where the answer's headers end (past the blank line), or -1 for not yet. */
export function headEnd(buf: Buffer): number {
  const i = buf.indexOf("\r\n\r\n");
  if (i < 0) {
    if (buf.length > MAX_HEAD) throw new AspError("protocol_error", `the WebSocket upgrade answer's headers pass ${MAX_HEAD} bytes`);
    return -1;
  }
  return i + 4;
}

/** Checks the answer to the upgrade; throws saying why it was refused. */
export function checkAnswer(head: Buffer, rest: Buffer, url: string, accept: string): void {
  const lines = head.toString("latin1").split("\r\n");
  const m = /^HTTP\/\S+ (\d{3})/.exec(lines[0]);
  if (!m) throw new AspError("protocol_error", `${url} answered the WebSocket upgrade with ${JSON.stringify(lines[0].slice(0, 80))}, not HTTP`);
  const status = Number(m[1]);
  const h = new Map<string, string>();
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    if (i > 0) h.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
  }
  if (status === 401)
    throw new AspError(
      "unauthorized",
      `${url} answered 401 Unauthorized to the WebSocket upgrade: the bearer token is missing or wrong; set the one asp-agent --listen was given (http.token_env or http.token_file)`,
    );
  if (status === 403)
    throw new AspError(
      "unauthorized",
      `${url} answered 403 Forbidden to the WebSocket upgrade: something in front of asp-agent --listen refused it; if a gateway wants a header of its own, set http.headers`,
    );
  if (status !== 101) {
    const body = rest.subarray(0, 200).toString("utf8").trim();
    throw new AspError(
      "transport_error",
      `${url} answered HTTP ${status} to the WebSocket upgrade, not 101${body ? ` (${body})` : ""}; is it asp-agent --listen, and does every proxy on the way pass WebSocket upgrades (else set http.websocket to false)?`,
    );
  }
  if ((h.get("upgrade") ?? "").toLowerCase() !== "websocket" || !(h.get("connection") ?? "").toLowerCase().includes("upgrade"))
    throw new AspError("protocol_error", `${url} answered 101 without Upgrade: websocket`);
  if (h.get("sec-websocket-accept") !== accept)
    throw new AspError("protocol_error", `${url} answered the WebSocket upgrade with a wrong Sec-WebSocket-Accept`);
  if (h.get("sec-websocket-protocol") !== SUBPROTOCOL)
    throw new AspError("protocol_error", `${url} did not agree to the WebSocket subprotocol ${SUBPROTOCOL}`);
}

/** payload XOR the 4-byte key repeated (RFC 6455 5.3), into a new buffer. */
export function mask(payload: Uint8Array, key: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(payload.length);
  for (let i = 0; i < payload.length; i++) out[i] = payload[i] ^ key[i & 3];
  return out;
}

/** One client frame: masked, as a client's must be. */
export function frame(opcode: number, payload: Uint8Array = new Uint8Array(0), fin = true, key?: Uint8Array): Buffer {
  const k = key ?? randomBytes(4);
  const n = payload.length;
  const b0 = (fin ? 0x80 : 0) | opcode;
  let head: Buffer;
  if (n < 126) head = Buffer.from([b0, 0x80 | n]);
  else if (n < 65536) {
    head = Buffer.alloc(4);
    head[0] = b0;
    head[1] = 0x80 | 126;
    head.writeUInt16BE(n, 2);
  } else {
    head = Buffer.alloc(10);
    head[0] = b0;
    head[1] = 0x80 | 127;
    head.writeBigUInt64BE(BigInt(n), 2);
  }
  return Buffer.concat([head, k, mask(payload, k)]);
}

export function closeFrame(code = NORMAL, reason = ""): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(code, 0);
  return frame(CLOSE, Buffer.concat([b, Buffer.from(reason, "utf8").subarray(0, 120)]));
}

export type WsEvent =
  | { kind: "message"; data: Uint8Array }
  | { kind: "ping" | "pong"; data: Uint8Array }
  | { kind: "close"; code: number | null; reason: string };

/** Server frames in, events out; throws WsError on a framing error, a text message (the
 * protocol is binary) or a message above maxMessage. */
export class Decoder {
  private buf: Buffer = Buffer.alloc(0);
  private parts: Buffer[] = [];
  private size = 0;
  private fragmented = false;

  constructor(public maxMessage: number) {}

  feed(data: Buffer): WsEvent[] {
    this.buf = this.buf.length ? Buffer.concat([this.buf, data]) : data;
    const out: WsEvent[] = [];
    for (;;) {
      const ev = this.next();
      if (ev === null) return out;
      if (ev !== true) out.push(ev);
    }
  }

  private next(): WsEvent | true | null {
    const buf = this.buf;
    if (buf.length < 2) return null;
    const b0 = buf[0],
      b1 = buf[1];
    const fin = (b0 & 0x80) !== 0,
      op = b0 & 0x0f;
    let n = b1 & 0x7f,
      at = 2;
    if (b0 & 0x70) throw new WsError(PROTOCOL_ERROR, "the server set reserved bits of a frame");
    if (b1 & 0x80) throw new WsError(PROTOCOL_ERROR, "the server sent a masked frame");
    if (n === 126) {
      if (buf.length < 4) return null;
      n = buf.readUInt16BE(2);
      at = 4;
    } else if (n === 127) {
      if (buf.length < 10) return null;
      const big = buf.readBigUInt64BE(2);
      n = big > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(big);
      at = 10;
    }
    if (op >= 0x8) {
      if (n > 125 || !fin) throw new WsError(PROTOCOL_ERROR, "the server sent a control frame that is fragmented or longer than 125 bytes");
    } else if (op === TEXT) throw new WsError(UNSUPPORTED_DATA, "the server sent a text message; asp.v1 is binary");
    else if (op !== CONT && op !== BINARY) throw new WsError(PROTOCOL_ERROR, `the server sent a frame of opcode ${op}`);
    else if (op === CONT && !this.fragmented) throw new WsError(PROTOCOL_ERROR, "the server sent a continuation frame outside a message");
    else if (op === BINARY && this.fragmented) throw new WsError(PROTOCOL_ERROR, "the server began a message inside another one");
    if (op < 0x8 && this.size + n > this.maxMessage)
      throw new WsError(TOO_BIG, `the server sent a message larger than max_message (${this.maxMessage})`);
    if (buf.length < at + n) return null;
    const payload = buf.subarray(at, at + n);
    this.buf = buf.subarray(at + n);
    if (op === PING || op === PONG) return { kind: op === PING ? "ping" : "pong", data: Buffer.from(payload) };
    if (op === CLOSE)
      return payload.length >= 2
        ? { kind: "close", code: payload.readUInt16BE(0), reason: payload.subarray(2).toString("utf8") }
        : { kind: "close", code: null, reason: "" };
    this.parts.push(payload);
    this.size += n;
    if (!fin) {
      this.fragmented = true;
      return true;
    }
    const whole = this.parts.length === 1 ? this.parts[0] : Buffer.concat(this.parts);
    this.parts = [];
    this.size = 0;
    this.fragmented = false;
    return { kind: "message", data: new Uint8Array(whole.buffer, whole.byteOffset, whole.length) };
  }
}

/** The transport_error of a WebSocket that ended, as the C client words it. */
export function closedError(url: string, code: number | null, reason: string): AspError {
  if (code === GOING_AWAY) return new AspError("transport_error", `${url} closed the WebSocket: going away (the listener is shutting down)`);
  if (code !== null) return new AspError("transport_error", `${url} closed the WebSocket (code ${code}${reason ? ": " + reason : ""})`);
  return new AspError("transport_error", `the connection to ${url} was lost (did the listener stop?)`);
}

/** What a WebSocket is opened with (HttpTransport gives it). */
export interface WsTarget {
  readonly url: string;
  readonly token?: string;
  readonly headers?: [string, string][];
  readonly ca?: Buffer;
  readonly caFile?: string;
  readonly callTimeoutMs: number;
  maxMessage: number;
  readonly onNotify: NotifyHandler;
}

/** One WebSocket to GET PREFIX/v1/ws, pipelining calls (callOn in rpc.ts). */
export class WsConn extends RpcConn {
  private readonly decoder: Decoder;
  private closedPromise: Promise<void>;

  private constructor(
    private readonly t: WsTarget,
    private readonly sock: net.Socket,
  ) {
    super(t.url, t.onNotify, () => t.maxMessage);
    this.decoder = new Decoder(t.maxMessage);
    this.closedPromise = new Promise((r) => sock.once("close", () => r()));
    sock.on("data", (b: Buffer) => this.receive(b));
    sock.on("error", (e: Error) => this.die(this.closing ? null : new AspError("transport_error", `cannot read from ${t.url}: ${e.message}`)));
    sock.on("close", () => this.die(this.eofError(null, "")));
  }

  /** Connects, upgrades, and resolves once the WebSocket is open. */
  static open(t: WsTarget): Promise<WsConn> {
    const u = new URL(t.url);
    const secure = u.protocol === "https:";
    const port = Number(u.port) || (secure ? 443 : 80);
    const host = u.hostname.replace(/^\[|\]$/g, "");
    const path = u.pathname.replace(/\/+$/, "") + "/v1/ws";
    const { request, accept } = handshake(u.host, path, t.token, undefined, t.headers);
    return new Promise((resolve, reject) => {
      const sock = secure
        ? tls.connect({ host, port, ca: t.ca, servername: net.isIP(host) ? undefined : host })
        : net.connect({ host, port });
      sock.setNoDelay(true);
      let buf = Buffer.alloc(0);
      let done = false;
      const fail = (e: AspError) => {
        if (done) return;
        done = true;
        sock.destroy();
        reject(e);
      };
      const timer = setTimeout(
        () => fail(new AspError("transport_error", `${t.url} did not complete the WebSocket upgrade within call_timeout_ms (${t.callTimeoutMs} ms)`)),
        t.callTimeoutMs,
      );
      const onErr = (e: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        if (e.code && /^(ERR_TLS|ERR_SSL|CERT_|DEPTH_|SELF_SIGNED|UNABLE_TO)/.test(e.code))
          fail(
            new AspError(
              "transport_error",
              `TLS with ${t.url} failed: ${e.message}; is the server's certificate signed by ${t.caFile ?? "a CA this system trusts"}, and issued for this host name?`,
            ),
          );
        else fail(new AspError("transport_error", `cannot connect to ${t.url}: ${e.message}; is asp-agent --listen running there?`));
      };
      const onEnd = () => {
        clearTimeout(timer);
        fail(new AspError("transport_error", `${t.url} closed the connection during the WebSocket upgrade`));
      };
      const onData = (b: Buffer) => {
        buf = Buffer.concat([buf, b]);
        let end: number;
        try {
          end = headEnd(buf);
          if (end < 0) return;
          checkAnswer(buf.subarray(0, end), buf.subarray(end), t.url, accept);
        } catch (e) {
          clearTimeout(timer);
          fail(e as AspError);
          return;
        }
        clearTimeout(timer);
        sock.off("data", onData);
        sock.off("error", onErr);
        sock.off("close", onEnd);
        done = true;
        const c = new WsConn(t, sock);
        const rest = buf.subarray(end);
        if (rest.length) c.receive(rest);
        resolve(c);
      };
      sock.on("error", onErr);
      sock.on("close", onEnd);
      sock.on("data", onData);
      sock.write(request);
    });
  }

  send(body: Uint8Array): void {
    if (!this.sock.destroyed) this.sock.write(frame(BINARY, body));
  }

  private receive(b: Buffer): void {
    if (this.dying) return;
    this.decoder.maxMessage = this.maxMessageOf();
    let events: WsEvent[];
    try {
      events = this.decoder.feed(b);
    } catch (e) {
      const we = e as WsError;
      this.sock.write(closeFrame(we.code));
      this.die(new AspError("protocol_error", `${this.t.url}: ${we.message}`));
      return;
    }
    for (const ev of events) {
      if (this.dying) return;
      if (ev.kind === "message") {
        const err = this.handle(ev.data);
        if (err) {
          this.sock.write(closeFrame(PROTOCOL_ERROR));
          this.die(err);
          return;
        }
      } else if (ev.kind === "ping") this.sock.write(frame(PONG, ev.data));
      else if (ev.kind === "close") {
        const echo = ev.code === null || ev.code === 1005 || ev.code === 1006 || ev.code === 1015 ? NORMAL : ev.code;
        this.sock.write(closeFrame(echo));
        this.die(this.eofError(ev.code, ev.reason));
        return;
      }
    }
  }

  private eofError(code: number | null, reason: string): AspError {
    return this.closing ? new AspError("transport_error", "the client was closed") : closedError(this.t.url, code, reason);
  }

  die(err: AspError | null): void {
    if (this.dying) return;
    this.dying = true;
    this.failAll(err ?? this.eofError(null, ""));
    this.sock.end();
    const t = setTimeout(() => this.sock.destroy(), 2000);
    t.unref();
  }

  async close(timeoutMs = 5000): Promise<void> {
    this.closing = true;
    if (!this.sock.destroyed) this.sock.write(closeFrame(NORMAL));
    // The server answers with its close frame, then ends the connection.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.closedPromise, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    this.die(null);
    this.sock.destroy();
  }
}
