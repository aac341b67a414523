/** The one error class of the SDK: anything ASP reports or detects. */
export class AspError extends Error {
  /** The protocol's error code: "not_found", "invalid_argument", "transport_error", ... */
  readonly code: string;
  /** The errno behind an io_error, when the responder gave one. */
  readonly errno?: number;
  /** The path concerned, when the responder gave one. */
  readonly path?: string;

  constructor(code: string, message: string, extra?: { errno?: number; path?: string }) {
    super(message);
    this.name = "AspError";
    this.code = code;
    if (extra?.errno !== undefined) this.errno = extra.errno;
    if (extra?.path !== undefined) this.path = extra.path;
  }

  override toString(): string {
    return `${this.code}: ${this.message}`;
  }
}

/** A fresh copy, so each caller gets its own stack. */
export function copyError(e: AspError): AspError {
  return new AspError(e.code, e.message, { errno: e.errno, path: e.path });
}
