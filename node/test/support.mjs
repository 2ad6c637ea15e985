// support.mjs: real `ticketing server` processes for the tests, on loopback only, always
// stopped; and waiting on facts (never on a sleep).
//
// The binary is $TICKETING_BIN, else the repository's target/release/ticketing.
// tests/node_package.rs (run by `cargo test --release`) sets TICKETING_BIN and
// TICKETING_LIBRARY to what that cargo run built.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const SECRET = "node-test-secret-0123456789";
const here = path.dirname(fileURLToPath(import.meta.url));

export function binary() {
  const configured = process.env.TICKETING_BIN;
  if (configured) return configured;
  const built = path.resolve(here, "..", "..", "target", "release", "ticketing");
  if (fs.existsSync(built)) return built;
  throw new Error("no ticketing binary: set TICKETING_BIN or run `cargo build --release`");
}

const running = new Set();
process.on("exit", () => {
  for (const server of running) server.process.kill("SIGKILL");
});

/** One standalone `ticketing server` on 127.0.0.1 (a port of its own); its log lines are
 * collected as they come. */
export class Server {
  static async start(env = {}) {
    const server = new Server(env);
    await server.listening;
    return server;
  }

  constructor(env) {
    this.log = [];
    this.addr = null;
    this.process = spawn(binary(), ["server"], {
      env: { TICKETING_AUTH_TOKEN: SECRET, TICKETING_LISTEN: "127.0.0.1:0", RUST_LOG: "info", ...env },
      stdio: ["ignore", "ignore", "pipe"],
    });
    running.add(this);
    this.listening = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the server did not listen within 10 s:\n${this.log.join("\n")}`)), 10_000);
      let rest = "";
      this.process.stderr.on("data", (chunk) => {
        rest += chunk.toString();
        const lines = rest.split("\n");
        rest = lines.pop();
        for (const line of lines) {
          this.log.push(line);
          const at = line.indexOf(" listening on ");
          if (at >= 0 && this.addr === null) {
            this.addr = line.slice(at + 14).split(/\s/)[0];
            clearTimeout(timer);
            resolve();
          }
        }
      });
      this.process.on("exit", () => {
        clearTimeout(timer);
        reject(new Error(`the server exited:\n${this.log.join("\n")}`));
      });
    });
    this.listening.catch(() => {});
    this.exited = new Promise((resolve) => this.process.on("exit", resolve));
  }

  /** SIGSTOP, then wait until every thread of the process is stopped: the signal is
   * delivered asynchronously, and a thread still running could answer. */
  async pause() {
    this.process.kill("SIGSTOP");
    const tasks = `/proc/${this.process.pid}/task`;
    await until(() => {
      const states = fs.readdirSync(tasks).map((t) => {
        try {
          return fs.readFileSync(`${tasks}/${t}/stat`, "utf8").split(")").pop().trim().split(" ")[0];
        } catch {
          return "T";
        }
      });
      return states.length > 0 && states.every((s) => s === "T" || s === "t");
    }, "the server's threads stopped");
  }

  resume() {
    this.process.kill("SIGCONT");
  }

  async stop() {
    running.delete(this);
    if (this.process.exitCode === null && this.process.signalCode === null) {
      this.process.kill("SIGKILL"); // ends a stopped process too
      await this.exited;
    }
  }
}

/** Waits until `fact()` (sync or async) is truthy, checking every 5 ms, at most `limit`
 * ms; fails naming `what`. */
export async function until(fact, what, limit = 10_000) {
  const end = Date.now() + limit;
  for (;;) {
    const value = await fact();
    if (value) return value;
    if (Date.now() > end) throw new Error(`not within ${limit} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A key of this test's own. */
let keys = 0;
export function key(name) {
  keys += 1;
  return `node-${process.pid}-${keys}-${name}`;
}
