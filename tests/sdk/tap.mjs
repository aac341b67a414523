// The TAP-like lines and the tally the TypeScript SDK tests share.
let passed = 0,
  failed = 0;

export function report(ok, name, detail = "") {
  if (ok) {
    passed++;
    console.log(`ok - ${name}`);
  } else {
    failed++;
    console.log(`FAIL - ${name} ${detail}`);
  }
}

/** Runs `fn`; a throw (with its stack) is a failure of `what`. */
export async function test(what, fn) {
  try {
    await fn();
    report(true, what);
  } catch (e) {
    report(false, `${what}:`, `${e?.stack ?? e}`);
  }
}

/** [code or "ok", message, milliseconds] of one call. */
export async function attempt(fn) {
  const t0 = performance.now();
  try {
    await fn();
    return ["ok", "", performance.now() - t0];
  } catch (e) {
    return [e.code, e.message, performance.now() - t0];
  }
}

/** The closing line; the exit code says whether anything failed. */
export function finish() {
  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed ? 1 : 0;
}
