// types.test.mjs: the package's types (index.d.cts, index.d.mts) against a strict TypeScript program (test/typed.mts) that
// uses every call of the API and `await using`; the compiled program then runs against a
// real node (where the locks it disposes of must be released).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { SECRET, Server } from "./support.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const tsc = path.join(here, "..", "node_modules", "typescript", "bin", "tsc");

let server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server?.stop();
});

test("a strict TypeScript program type-checks against the package's types and runs, await using included", (t) => {
  assert.ok(fs.existsSync(tsc), "typescript is a devDependency: npm install in node/");
  // Compiled inside the package, which it imports by name ("ticketing": a self-reference).
  const out = fs.mkdtempSync(path.join(here, ".typed-"));
  t.after(() => fs.rmSync(out, { recursive: true, force: true }));
  const args = [tsc, "--strict", "--noEmitOnError", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
    "--lib", "es2022,esnext.disposable", "--types", "node", "--outDir", out, "--rootDir", here, path.join(here, "typed.mts")];
  const compiled = spawnSync(process.execPath, args, { encoding: "utf8" });
  assert.equal(compiled.status, 0, `tsc:\n${compiled.stdout}${compiled.stderr}`);
  const ran = spawnSync(process.execPath, [path.join(out, "typed.mjs")], {
    encoding: "utf8",
    env: { ...process.env, ADDR: server.addr, SECRET },
    timeout: 30_000,
  });
  assert.equal(ran.status, 0, `${ran.stdout}${ran.stderr}`);
  assert.deepEqual(ran.stdout.trim().split(os.EOL).map((l) => l.replace(/\d+/g, "N")), [
    "held typed true",
    "after the block: free",
    "sold under N",
    "busy, definitive true",
    "released",
    "hold -seat:N:N,-stock:N:N pool N/N true false true",
    "in line N N",
  ]);
});
