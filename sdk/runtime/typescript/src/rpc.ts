/**
 * The RPC engine every pipelined connection shares (stdio, the WebSocket): request ids,
 * pending calls, followers, message handling, and the deadline rules of docs/faults.md
 * (callOn). No I/O: transport.ts and ws.ts carry the bytes.
 */
import { AspError, copyError } from "./errors.js";
import { type Message, NOTIFY, RESPONSE, type WireMap, decodeMessage, request } from "./wire.js";

export const UINT32_MAX = 0xffffffff;
/* Node runs a timer of more than 2^31 - 1 ms at once (with a warning). */
const MAX_DELAY = 0x7fffffff;

export interface Timer {
  clear(): void;
}

/** setTimeout for any delay (an exec's timeout_ms may be days), chained past MAX_DELAY. */
export function later(fn: () => void, ms: number, unref: boolean): Timer {
  let t: NodeJS.Timeout;
  const arm = (left: number) => {
    t = left > MAX_DELAY ? setTimeout(() => arm(left - MAX_DELAY), MAX_DELAY) : setTimeout(fn, left);
    if (unref) t.unref();
  };
  arm(ms);
  return { clear: () => clearTimeout(t) };
}

/** Receives a connection's process notifications (Process in base.ts). */
export interface Subscriber {
  push(event: Record<string, unknown>): void;
  fail(err: AspError): void;
}

export interface Hooks {
  /** Runs when the response is a result, before any later message is read. */
  onResult?: (result: WireMap, conn: RpcConn | null) => void;
  /** Runs after the id is assigned and before the request is written. */
  beforeSend?: (conn: RpcConn) => void;
}

export interface Transport {
  readonly carriesNotifications: boolean;
  /** The unsupported error of spawn or proc_attach where carriesNotifications is false. */
  streamsRefused?(name: string): AspError;
  readonly describe: string;
  maxMessage: number;
  call(method: string, params: WireMap, hooks?: Hooks): Promise<Message>;
  close(): Promise<void>;
}

export type NotifyHandler = (conn: RpcConn, method: string, params: WireMap) => AspError | null;

export function tooLarge(n: number, limit: number): AspError {
  return new AspError(
    "too_large",
    `request of ${n} bytes is larger than max_message (${limit}); send the data in smaller pieces`,
  );
}

export interface Pending {
  resolve(m: Message): void;
  reject(e: AspError): void;
  hooks?: Hooks;
}

/** The time limit a call has of its own (exec's and proc_wait's timeout_ms), added to
 * call_timeout_ms; null when it has none, so it may wait for ever (then it probes). */
export function ownLimit(method: string, params: WireMap): number | null {
  if (method !== "exec" && method !== "proc_wait") return 0;
  const t = Number((params as Record<string, unknown>).timeout_ms ?? 0);
  return t > 0 ? t : null;
}


/** What one pipelined connection knows, whatever carries its bytes (stdio, the
 * WebSocket): ids, the calls waiting, the processes followed, what each message from the
 * responder does, and how the connection ends. `peer` names the other end in messages. */
export abstract class RpcConn {
  protected readonly pending = new Map<number, Pending>();
  /** Ids of calls that timed out: their late answers are dropped, not stray. */
  protected readonly abandoned = new Set<number>();
  /** A call missed its deadline and no answer came since (docs/faults.md). */
  suspect = false;
  /** The first hello answer: a responder's hello does not change. */
  hello: Message | null = null;
  protected readonly subs = new Map<number, Set<Subscriber>>();
  private nextId = 1;
  dying = false;
  dead: AspError | null = null;
  protected closing = false;

  constructor(
    protected readonly peer: string,
    protected readonly onNotify: NotifyHandler,
    protected readonly maxMessageOf: () => number,
  ) {}

  /** Writes one message (the connection frames it). */
  abstract send(body: Uint8Array): void;
  /** Ends the connection: every pending call and follower gets err. */
  abstract die(err: AspError | null, kill?: boolean): void;

  add(p: Pending): number {
    if (this.dying) throw this.gone();
    while (this.pending.has(this.nextId) || this.nextId === 0)
      this.nextId = this.nextId < UINT32_MAX ? this.nextId + 1 : 1;
    const id = this.nextId;
    this.nextId = id < UINT32_MAX ? id + 1 : 1;
    this.pending.set(id, p);
    return id;
  }

  forget(id: number): void {
    this.pending.delete(id);
  }

  /** The call gave up: false when it was answered meanwhile. */
  abandon(id: number): boolean {
    if (!this.pending.delete(id)) return false;
    this.abandoned.add(id);
    return true;
  }

  /** Why the connection died, once it has (for a call that was no longer pending). */
  async deathOf(): Promise<AspError> {
    while (!this.dead) await new Promise((r) => setTimeout(r, 10));
    return copyError(this.dead);
  }

  subscribe(proc: number, s: Subscriber): void {
    if (this.dying) throw this.gone();
    let set = this.subs.get(proc);
    if (!set) this.subs.set(proc, (set = new Set()));
    set.add(s);
  }

  unsubscribe(proc: number, s: Subscriber): void {
    const set = this.subs.get(proc);
    if (set) {
      set.delete(s);
      if (!set.size) this.subs.delete(proc);
    }
  }

  route(proc: number | undefined, event: Record<string, unknown>): void {
    if (proc === undefined) return;
    for (const s of [...(this.subs.get(proc) ?? [])]) s.push(event);
  }

  protected gone(): AspError {
    return this.dead ? copyError(this.dead) : new AspError("transport_error", `the connection to ${this.peer} is ending`);
  }

  /** Does what one message says; returns the error that ends the connection, or null. */
  protected handle(body: Uint8Array): AspError | null {
    let msg: Message;
    try {
      msg = decodeMessage(body);
    } catch (e) {
      return new AspError("protocol_error", `${this.peer} sent a bad message: ${(e as Error).message}`);
    }
    if (msg.type === RESPONSE) {
      const p = this.pending.get(msg.id as number);
      if (!p) {
        if (this.abandoned.delete(msg.id as number)) return null; // late: the call gave up
        return new AspError("protocol_error", `${this.peer} answered request id ${msg.id}, which no call is waiting for; closing the connection`);
      }
      this.pending.delete(msg.id as number);
      this.suspect = false; // the responder answers
      if (p.hooks?.onResult && !msg.error) {
        try {
          p.hooks.onResult(msg.result as WireMap, this);
        } catch (e) {
          p.reject(e instanceof AspError ? e : new AspError("internal", String(e)));
          return null;
        }
      }
      p.resolve(msg);
      return null;
    }
    if (msg.type === NOTIFY) return this.onNotify(this, msg.method as string, msg.params as WireMap);
    return new AspError("protocol_error", `${this.peer} sent a request; a responder only answers`);
  }

  /** Every pending call and every follower gets err; later calls get it too. */
  protected failAll(err: AspError): void {
    this.dead = err;
    const pending = [...this.pending.values()];
    this.pending.clear();
    const subs = [...this.subs.values()];
    this.subs.clear();
    for (const p of pending) p.reject(copyError(err));
    for (const set of subs) for (const s of set) s.fail(err);
  }
}

/**
 * One call on `conn` within its deadline: call_timeout_ms plus the op's own limit
 * (`explicitMs` instead when set). A miss is timeout and makes the connection suspect;
 * a second miss in a row kills it. A call with no limit of its own probes with hello
 * every call_timeout_ms and kills the connection when the probe is not answered.
 */
export function callOn(
t: { callTimeoutMs: number; maxMessage: number },
conn: RpcConn,
method: string,
params: WireMap,
hooks: Hooks | undefined,
explicitMs: number,
): Promise<Message> {
  const ms = t.callTimeoutMs || 60000;
  const own = explicitMs ? 0 : ownLimit(method, params);
  const limit = explicitMs || (own === null ? ms : own + ms);
  return new Promise<Message>((outerResolve, outerReject) => {
    let timer: Timer | undefined;
    let settled = false;
    const resolve = (m: Message) => {
      settled = true;
      timer?.clear();
      outerResolve(m);
    };
    const reject = (e: unknown) => {
      settled = true;
      timer?.clear();
      outerReject(e);
    };
    let id: number;
    try {
      id = conn.add({ resolve, reject, hooks });
    } catch (e) {
      reject(e);
      return;
    }
    const fatal = (why: string) => {
      if (!conn.abandon(id)) return;
      conn.die(new AspError("transport_error", why), true);
      void conn.deathOf().then(reject);
    };
    const expired = () => {
      if (settled) return;
      if (own === null && !explicitMs) {
        callOn(t, conn, "hello", {}, undefined, ms).then(
          () => arm(ms),
          (e: AspError) => {
            if (e.code !== "timeout") return arm(ms); // it answered, or died (then so do we)
            fatal(`${method}: the responder did not answer a liveness probe (hello) within call_timeout_ms (${ms} ms), so the connection is closed (the next call reconnects)`);
          },
        );
        return;
      }
      if (explicitMs) {
        if (conn.abandon(id)) reject(new AspError("timeout", `${method}: no answer within ${limit} ms`));
        return;
      }
      if (conn.suspect) {
        fatal(`${method}: no answer within ${limit} ms, the second missed deadline in a row: the responder is not answering, so the connection is closed (the next call reconnects)`);
        return;
      }
      if (!conn.abandon(id)) return;
      conn.suspect = true;
      reject(
        new AspError(
          "timeout",
          own
            ? `${method}: no answer within ${limit} ms (its timeout_ms ${own} + call_timeout_ms ${ms}); the connection is suspect: one more missed deadline closes it`
            : `${method}: no answer within call_timeout_ms (${ms} ms); the connection is suspect: one more missed deadline closes it`,
        ),
      );
    };
    const arm = (after: number) => {
      if (settled) return;
      timer = later(expired, after, true);
    };
    const body = request(id, method, params);
    if (body.length > t.maxMessage) {
      conn.forget(id);
      reject(tooLarge(body.length, t.maxMessage));
      return;
    }
    try {
      hooks?.beforeSend?.(conn);
    } catch (e) {
      conn.forget(id);
      reject(e);
      return;
    }
    conn.send(body);
    arm(limit);
  });
}
