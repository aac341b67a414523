/**
 * A JSON reader that accepts and refuses exactly what the C core's (jansson 2.14 with
 * JSON_REJECT_DUPLICATES) does, with the same line, column and words, so .asp.json errors
 * read the same from every SDK. It keeps what JSON.parse loses: duplicate keys are
 * refused, integers (bigint) and reals (number) stay apart, object order is kept (Map).
 */

export type JsonValue = null | boolean | bigint | number | string | JsonValue[] | JsonObject;
export type JsonObject = Map<string, JsonValue>;

export class JsonError extends Error {
  constructor(
    readonly line: number,
    readonly column: number,
    readonly text: string,
  ) {
    super(text);
  }
}

const EOF = -1;
const ERR = -2;
const T_INVALID = -1;
const T_EOF = 0;
const T_STRING = 256;
const T_INTEGER = 257;
const T_REAL = 258;
const T_TRUE = 259;
const T_FALSE = 260;
const T_NULL = 261;
const MAX_DEPTH = 2048;
const TEXT_MAX = 160;
const INT64_MAX = (1n << 63n) - 1n;
const INT64_MIN = -(1n << 63n);

const utf8 = new TextDecoder("utf-8");
const utf8Lossy = new TextDecoder("utf-8", { fatal: false });
const enc = new TextEncoder();

function utf8First(c: number): number {
  if (c < 0x80) return 1;
  if (c <= 0xc1) return 0;
  if (c <= 0xdf) return 2;
  if (c <= 0xef) return 3;
  if (c <= 0xf4) return 4;
  return 0;
}

function utf8Full(buf: number[]): boolean {
  const n = buf.length;
  const u = buf[0];
  let value: number;
  if (n === 2) value = u & 0x1f;
  else if (n === 3) value = u & 0x0f;
  else if (n === 4) value = u & 0x07;
  else return false;
  for (let i = 1; i < n; i++) {
    const b = buf[i];
    if (b < 0x80 || b > 0xbf) return false;
    value = (value << 6) + (b & 0x3f);
  }
  if (value > 0x10ffff) return false;
  if (value >= 0xd800 && value <= 0xdfff) return false;
  if ((n === 2 && value < 0x80) || (n === 3 && value < 0x800) || (n === 4 && value < 0x10000))
    return false;
  return true;
}

const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isAlpha = (c: number) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const isXDigit = (c: number) =>
  isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

function hex(n: number): string {
  return n.toString(16).toUpperCase().padStart(4, "0");
}

class Lex {
  private i = 0;
  private buf: number[] = [];
  private bpos = 0;
  private state = 0;
  private line = 1;
  private column = 0;
  private lastColumn = 0;
  saved: number[] = [];
  token = T_INVALID;
  value: Uint8Array | bigint | number | null = null;
  depth = 0;

  constructor(private readonly data: Uint8Array) {}

  error(msg: string): never {
    const nul = this.saved.indexOf(0);
    const cstr = nul >= 0 ? this.saved.slice(0, nul) : this.saved;
    if (cstr.length > 0) {
      if (this.saved.length <= 20) msg = `${msg} near '${utf8Lossy.decode(new Uint8Array(cstr))}'`;
    } else if (this.state !== ERR) {
      msg = `${msg} near end of file`;
    }
    const b = enc.encode(msg);
    if (b.length >= TEXT_MAX) msg = utf8Lossy.decode(b.subarray(0, TEXT_MAX - 1));
    throw new JsonError(this.line, this.column, msg);
  }

  get(): number {
    if (this.state) return this.state;
    if (this.bpos >= this.buf.length) {
      if (this.i >= this.data.length) {
        this.state = EOF;
        return EOF;
      }
      const c = this.data[this.i++];
      this.bpos = 0;
      if (c >= 0x80) {
        const count = utf8First(c);
        if (!count) {
          this.state = ERR;
          this.error(`unable to decode byte 0x${c.toString(16)}`);
        }
        const b = [c];
        for (let k = 1; k < count; k++) b.push(this.i < this.data.length ? this.data[this.i++] : 0xff);
        if (!utf8Full(b)) {
          this.state = ERR;
          this.error(`unable to decode byte 0x${c.toString(16)}`);
        }
        this.buf = b;
      } else {
        this.buf = [c];
      }
    }
    const c = this.buf[this.bpos++];
    if (c === 0x0a) {
      this.line++;
      this.lastColumn = this.column;
      this.column = 0;
    } else if (utf8First(c)) {
      this.column++;
    }
    return c;
  }

  unget(c: number): void {
    if (c < 0) return;
    if (c === 0x0a) {
      this.line--;
      this.column = this.lastColumn;
    } else if (utf8First(c)) {
      this.column--;
    }
    this.bpos--;
    if (c === 0 && this.bpos === 0) this.buf = []; // a C string: an ungot NUL is lost
  }

  getSave(): number {
    const c = this.get();
    if (c >= 0) this.saved.push(c);
    return c;
  }

  ungetUnsave(c: number): void {
    if (c >= 0) {
      this.unget(c);
      this.saved.pop();
    }
  }

  saveCached(): void {
    while (this.bpos < this.buf.length) this.saved.push(this.buf[this.bpos++]);
  }

  scanString(): void {
    this.value = null;
    this.token = T_INVALID;
    let c = this.getSave();
    while (c !== 0x22) {
      if (c === ERR) return;
      if (c === EOF) this.error("premature end of input");
      if (c >= 0 && c <= 0x1f) {
        this.ungetUnsave(c);
        if (c === 0x0a) this.error("unexpected newline");
        this.error(`control character 0x${c.toString(16)}`);
      }
      if (c === 0x5c) {
        c = this.getSave();
        if (c === 0x75) {
          c = this.getSave();
          for (let k = 0; k < 4; k++) {
            if (!(c >= 0 && isXDigit(c))) this.error("invalid escape");
            c = this.getSave();
          }
        } else if (c >= 0 && '"\\/bfnrt'.includes(String.fromCharCode(c))) {
          c = this.getSave();
        } else {
          this.error("invalid escape");
        }
      } else {
        c = this.getSave();
      }
    }
    const raw = this.saved.slice(1, -1);
    const out: number[] = [];
    let p = 0;
    const hex4 = (at: number) => parseInt(String.fromCharCode(...raw.slice(at, at + 4)), 16);
    while (p < raw.length) {
      const b = raw[p];
      if (b !== 0x5c) {
        out.push(b);
        p++;
        continue;
      }
      const e = raw[p + 1];
      if (e === 0x75) {
        let value = hex4(p + 2);
        p += 6;
        if (value >= 0xd800 && value <= 0xdbff) {
          if (raw[p] === 0x5c && raw[p + 1] === 0x75) {
            const value2 = hex4(p + 2);
            p += 6;
            if (value2 >= 0xdc00 && value2 <= 0xdfff) {
              value = ((value - 0xd800) << 10) + (value2 - 0xdc00) + 0x10000;
            } else {
              this.error(`invalid Unicode '\\u${hex(value)}\\u${hex(value2)}'`);
            }
          } else {
            this.error(`invalid Unicode '\\u${hex(value)}'`);
          }
        } else if (value >= 0xdc00 && value <= 0xdfff) {
          this.error(`invalid Unicode '\\u${hex(value)}'`);
        }
        for (const x of enc.encode(String.fromCodePoint(value))) out.push(x);
      } else {
        const m: Record<number, number> = { 0x62: 8, 0x66: 12, 0x6e: 10, 0x72: 13, 0x74: 9 };
        out.push(m[e] ?? e);
        p += 2;
      }
    }
    this.value = new Uint8Array(out);
    this.token = T_STRING;
  }

  scanNumber(c: number): void {
    this.token = T_INVALID;
    if (c === 0x2d) c = this.getSave();
    if (c === 0x30) {
      c = this.getSave();
      if (isDigit(c)) {
        this.ungetUnsave(c);
        return;
      }
    } else if (isDigit(c)) {
      do c = this.getSave();
      while (isDigit(c));
    } else {
      this.ungetUnsave(c);
      return;
    }
    if (c !== 0x2e && c !== 0x45 && c !== 0x65) {
      this.ungetUnsave(c);
      const v = BigInt(String.fromCharCode(...this.saved));
      if (v > INT64_MAX) this.error("too big integer");
      if (v < INT64_MIN) this.error("too big negative integer");
      this.token = T_INTEGER;
      this.value = v;
      return;
    }
    if (c === 0x2e) {
      c = this.get();
      if (!isDigit(c)) {
        this.unget(c);
        return;
      }
      this.saved.push(c);
      do c = this.getSave();
      while (isDigit(c));
    }
    if (c === 0x45 || c === 0x65) {
      c = this.getSave();
      if (c === 0x2b || c === 0x2d) c = this.getSave();
      if (!isDigit(c)) {
        this.ungetUnsave(c);
        return;
      }
      do c = this.getSave();
      while (isDigit(c));
    }
    this.ungetUnsave(c);
    const v = Number(String.fromCharCode(...this.saved));
    if (!Number.isFinite(v)) this.error("real number overflow");
    this.token = T_REAL;
    this.value = v;
  }

  scan(): number {
    this.saved = [];
    this.value = null;
    let c: number;
    do c = this.get();
    while (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d);
    if (c === EOF) return (this.token = T_EOF);
    if (c === ERR) return (this.token = T_INVALID);
    this.saved.push(c);
    if (c === 0x7b || c === 0x7d || c === 0x5b || c === 0x5d || c === 0x3a || c === 0x2c) {
      this.token = c;
    } else if (c === 0x22) {
      this.scanString();
    } else if (isDigit(c) || c === 0x2d) {
      this.scanNumber(c);
    } else if (isAlpha(c)) {
      do c = this.getSave();
      while (isAlpha(c));
      this.ungetUnsave(c);
      const word = String.fromCharCode(...this.saved);
      this.token =
        word === "true" ? T_TRUE : word === "false" ? T_FALSE : word === "null" ? T_NULL : T_INVALID;
    } else {
      this.saveCached();
      this.token = T_INVALID;
    }
    return this.token;
  }

  parseObject(): JsonObject {
    const obj: JsonObject = new Map();
    let t = this.scan();
    if (t === 0x7d) return obj;
    for (;;) {
      if (t !== T_STRING) this.error("string or '}' expected");
      const raw = this.value as Uint8Array;
      if (raw.includes(0)) this.error("NUL byte in object key not supported");
      const key = utf8.decode(raw);
      if (obj.has(key)) this.error("duplicate object key");
      if (this.scan() !== 0x3a) this.error("':' expected");
      this.scan();
      obj.set(key, this.parseValue());
      if (this.scan() !== 0x2c) break;
      t = this.scan();
    }
    if (this.token !== 0x7d) this.error("'}' expected");
    return obj;
  }

  parseArray(): JsonValue[] {
    const arr: JsonValue[] = [];
    let t = this.scan();
    if (t === 0x5d) return arr;
    while (t) {
      arr.push(this.parseValue());
      if (this.scan() !== 0x2c) break;
      t = this.scan();
    }
    if (this.token !== 0x5d) this.error("']' expected");
    return arr;
  }

  parseValue(): JsonValue {
    if (++this.depth > MAX_DEPTH) this.error("maximum parsing depth reached");
    let v: JsonValue;
    switch (this.token) {
      case T_STRING: {
        const raw = this.value as Uint8Array;
        if (raw.includes(0)) this.error("\\u0000 is not allowed without JSON_ALLOW_NUL");
        v = utf8.decode(raw);
        break;
      }
      case T_INTEGER:
      case T_REAL:
        v = this.value as bigint | number;
        break;
      case T_TRUE:
        v = true;
        break;
      case T_FALSE:
        v = false;
        break;
      case T_NULL:
        v = null;
        break;
      case 0x7b:
        v = this.parseObject();
        break;
      case 0x5b:
        v = this.parseArray();
        break;
      case T_INVALID:
        this.error("invalid token");
      // falls through (error never returns)
      default:
        this.error("unexpected token");
    }
    this.depth--;
    return v;
  }
}

/** Parses one JSON document (an object or array) from bytes. */
export function parse(data: Uint8Array): JsonValue {
  const lex = new Lex(data);
  lex.scan();
  if (lex.token !== 0x5b && lex.token !== 0x7b) lex.error("'[' or '{' expected");
  const result = lex.parseValue();
  lex.scan();
  if (lex.token !== T_EOF) lex.error("end of file expected");
  return result;
}

/** A string as jansson's json_dumps writes it. */
export function dumpString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const o = ch.codePointAt(0) as number;
    if (ch === "\\") out += "\\\\";
    else if (ch === '"') out += '\\"';
    else if (o < 0x20) {
      const named: Record<number, string> = { 8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t" };
      out += named[o] ?? `\\u${hex(o)}`;
    } else out += ch;
  }
  return out + '"';
}

/** C's printf("%.17g"). */
function g17(x: number): string {
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [m, e] = x.toExponential(16).split("e");
  const exp = parseInt(e, 10);
  const strip = (s: string) => (s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s);
  if (exp < -4 || exp >= 17) {
    const a = Math.abs(exp);
    return `${strip(m)}e${exp < 0 ? "-" : "+"}${a < 10 ? "0" : ""}${a}`;
  }
  return strip(x.toFixed(16 - exp));
}

/** A real as jansson writes it: %.17g, ".0" when it looks like an integer, and the
 * exponent without '+' and leading zeros. */
export function dumpReal(x: number): string {
  let s = g17(x);
  if (!s.includes(".") && !s.includes("e")) s += ".0";
  const i = s.indexOf("e");
  if (i >= 0) {
    let exp = s.slice(i + 1);
    let sign = "";
    if (exp.startsWith("-")) {
      sign = "-";
      exp = exp.slice(1);
    } else if (exp.startsWith("+")) {
      exp = exp.slice(1);
    }
    s = `${s.slice(0, i)}e${sign}${exp.replace(/^0+/, "")}`;
  }
  return s;
}
