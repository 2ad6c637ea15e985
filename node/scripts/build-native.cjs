// build-native.cjs: the package's install step — builds the crate's shared library with
// cargo and copies it into node/native/, where lib/native.cjs loads it; and, when npm
// linked the package (`npm install ./node` makes node_modules/ticketing a link to the
// repository's node/ and installs none of its dependencies), installs its one run-time
// dependency, koffi, in node/ from node/package-lock.json. The package itself is
// JavaScript over koffi: no compiler, no Node headers, no addon of its own.
//
// TICKETING_LIBRARY set: no library is built (the package loads that file at run time).
// TICKETING_PREBUILT_LIBRARY=/path/to/libticketing.so: copied instead of building.
"use strict";

const { spawnSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const NAME = process.platform === "darwin" ? "libticketing.dylib" : "libticketing.so";
const here = path.resolve(__dirname, "..");
const target = path.join(here, "native", NAME);

function fail(message) {
  console.error(`ticketing: ${message}`);
  process.exit(1);
}

function build() {
  const manifest = path.join(here, "..", "Cargo.toml");
  if (!fs.existsSync(manifest)) {
    fail(
      `${manifest} not found: install the package from the repository (npm install ./node), or set ` +
        "TICKETING_PREBUILT_LIBRARY to a built libticketing.so",
    );
  }
  const cargo = process.env.CARGO || "cargo";
  const args = ["build", "--release", "--lib", "--locked", "--manifest-path", manifest, "--message-format=json-render-diagnostics"];
  console.error(`ticketing: ${cargo} ${args.join(" ")}`);
  // Diagnostics and progress go to stderr; stdout carries cargo's JSON messages.
  const result = spawnSync(cargo, args, { stdio: ["ignore", "pipe", "inherit"], maxBuffer: 256 * 1024 * 1024 });
  if (result.error) fail(`${cargo} could not run (${result.error.code}): building the package needs a Rust toolchain (rustup)`);
  if (result.status !== 0) fail(`cargo failed with exit status ${result.status}`);
  for (const line of result.stdout.toString().split("\n")) {
    if (!line.startsWith("{")) continue;
    const message = JSON.parse(line);
    if (message.reason !== "compiler-artifact" || message.target?.name !== "ticketing") continue;
    const built = (message.filenames ?? []).find((f) => f.endsWith(NAME));
    if (built) return built;
  }
  return fail(`cargo built no ${NAME}`);
}

/** koffi where node/lib/native.cjs looks for it, installed there when it is not. */
function dependencies() {
  try {
    require.resolve("koffi", { paths: [here] });
    return;
  } catch {
    // not installed: the package was linked
  }
  const npm = process.env.npm_execpath;
  const args = ["install", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"];
  console.error(`ticketing: npm ${args.join(" ")} (in ${here}: the package's dependencies)`);
  const result = npm
    ? spawnSync(process.execPath, [npm, ...args], { cwd: here, stdio: ["ignore", "inherit", "inherit"] })
    : spawnSync("npm", args, { cwd: here, stdio: ["ignore", "inherit", "inherit"] });
  if (result.status !== 0) fail(`installing koffi in ${here} failed (npm exit status ${result.status})`);
}

dependencies();
if (process.env.TICKETING_LIBRARY) {
  console.error(`ticketing: TICKETING_LIBRARY is set: the package loads ${process.env.TICKETING_LIBRARY}; nothing built`);
} else {
  const source = process.env.TICKETING_PREBUILT_LIBRARY || build();
  fs.mkdirSync(path.dirname(target), { recursive: true });
  // A new file rather than an overwrite: a running process may have the old one mapped.
  fs.rmSync(target, { force: true });
  fs.copyFileSync(source, target);
  // The release profile keeps line tables for Rust backtraces; the installed copy does
  // not need them (best effort).
  spawnSync("strip", ["--strip-debug", target], { stdio: "ignore" });
  console.error(`ticketing: ${target}`);
}
