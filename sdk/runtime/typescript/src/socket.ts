// Connections opened from inside the sandbox (connect) as Node.js Duplex streams:
// Client.openConnection returns one. Reading follows the stream's backpressure (the
// events wait in the Process's queue while push() says the buffer is full); writing is
// one proc_write per chunk, each awaited; end() half-closes (proc_write eof); destroy()
// resets the connection (proc_signal KILL).
import { Duplex } from "node:stream";
import type { Process } from "./base.js";

type Event = { event?: string; data?: Uint8Array; eof?: boolean; error?: string; proc?: number | bigint };

export class Connection extends Duplex {
  /** The handle (proc_* ops, proc_list). */
  readonly proc: number;
  /** The exit event once the connection ended. */
  exit: Event | undefined = undefined;
  private wakeReader: (() => void) | null = null;
  private ended = false;

  constructor(private readonly p: Process<Event>) {
    super({ allowHalfOpen: true });
    this.proc = p.proc;
    void this.pump();
  }

  private async pump(): Promise<void> {
    try {
      for await (const ev of this.p) {
        if (ev.event === "output") {
          if (ev.data && ev.data.length && !this.push(Buffer.from(ev.data)))
            await new Promise<void>((r) => (this.wakeReader = r));
          if (ev.eof && !this.ended) {
            this.ended = true;
            this.push(null);
          }
        } else {
          this.exit = ev;
          if (ev.error) {
            this.destroy(new Error(`connection ${this.proc}: ${ev.error}`));
            return;
          }
          if (!this.ended) {
            this.ended = true;
            this.push(null);
          }
        }
      }
    } catch (e) {
      this.destroy(e as Error);
    }
  }

  override _read(): void {
    const r = this.wakeReader;
    this.wakeReader = null;
    r?.();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.p.write(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)).then(
      () => cb(),
      (e: Error) => cb(e),
    );
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.p.write(new Uint8Array(0), true).then(
      () => cb(),
      (e: Error) => cb(e),
    );
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    const done = () => {
      this.p.close();
      cb(err);
    };
    if (this.exit) done();
    else this.p.signal("KILL").then(done, done);
  }
}
