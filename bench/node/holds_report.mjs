// holds_report.mjs: the Markdown tables of scripts/node-holds-bench.sh from
// holds_bench.mjs's JSON lines (one file): per workload and system the medians over the
// rounds and the package's pairs/s divided by each other's within each round, with its
// target; then the runs of the waiters.
import fs from "node:fs";

const runs = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const range = (xs) => `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;
const NAMES = {
  "stock ticketing": "Ticketing, Node package (3 nodes): `client.hold` of 1 of 1000",
  "stock rust": "Ticketing, Rust client (same 3 nodes): `ticketing bench stock`, 64 threads",
  "stock redis-semaphore": "redis-semaphore `Semaphore` (limit 1000) over ioredis (1 Redis)",
  "multi ticketing": "Ticketing, Node package (3 nodes): `client.hold` of 4 keys",
  "multi rust": "Ticketing, Rust client (same 3 nodes): `ticketing bench multi`, 64 threads",
  "multi redlock": "redlock 5 `acquire` of 4 resources over ioredis (1 Redis)",
};
// The package's target against each (none: for context only).
const TARGETS = { "stock rust": 0.8 };

const rows = [
  "| workload | system | pairs/s (median) | p50 | p99 | errors | Node package ÷ it: median of the rounds' (each round's) | load average (1 min) |",
  "|---|---|---:|---:|---:|---:|---:|---|",
];
for (const workload of ["stock", "multi"]) {
  const of = (system) => runs.filter((r) => r.workload === workload && r.system === system);
  const rate = (system) => median(of(system).map((r) => r.pairs_per_s));
  for (const system of ["ticketing", "rust", "redis-semaphore", "redlock"]) {
    const rs = of(system);
    if (rs.length === 0) continue;
    const name = `${workload} ${system}`;
    let ratio = "—";
    if (system !== "ticketing") {
      // The package's pairs/s over this system's, per round (the runs of one round are
      // neighbours in time), and their median.
      const rounds = of("ticketing").slice(0, rs.length).map((t, i) => t.pairs_per_s / rs[i].pairs_per_s);
      const r = median(rounds);
      ratio = `**${r.toFixed(2)}×** (${rounds.map((x) => `${x.toFixed(2)}×`).join(", ")})`;
      if (TARGETS[name] !== undefined) ratio += `; target ≥ ${TARGETS[name]}×: ${r >= TARGETS[name] ? "met" : "missed"}`;
    }
    rows.push(
      `| ${workload} | ${NAMES[name]} | ${Math.round(rate(system)).toLocaleString("en-US")} | ` +
        `${median(rs.map((r) => r.p50_ms)).toFixed(2)} ms | ${median(rs.map((r) => r.p99_ms)).toFixed(2)} ms | ` +
        `${rs.reduce((n, r) => n + r.errors, 0)} | ${ratio} | ${range(rs.map((r) => r.load1))} |`,
    );
  }
}

const waiters = runs.filter((r) => r.workload === "waiters");
const n = (x) => x.toLocaleString("en-US");
if (waiters.length) {
  rows.push(
    "",
    "| run | holds waiting (one client) | hand-offs/s | granted | places heard (waiters told) | threads: at start / 1 waiting / all waiting | errors | load average (1 min) |",
    "|---:|---:|---:|---:|---|---|---:|---:|",
  );
  waiters.forEach((w, i) =>
    rows.push(
      `| ${i + 1} | ${n(w.waiters)} | ${n(w.handoffs_per_s)} (${w.handoff_s} s) | ${n(w.granted)} | ` +
        `${n(w.places)} (${n(w.waiters_told)}; ${n(w.waiters_told_before_handoff)} before the first hand-off) | ` +
        `${w.threads_at_start} / ${w.threads_one_waiting} / ${w.threads_waiting} | ${w.errors} | ${w.load1.toFixed(1)} |`,
    ),
  );
  rows.push(
    "",
    "| run | phase | worst lateness of a 1 ms timer | of that interval: main thread on a CPU / waiting for one | longest run of the main thread between two ticks |",
    "|---:|---|---:|---|---:|",
  );
  const PHASES = { queueing: "10,000 holds started (100 per turn of the loop)", waiting: "2 s of waiting", handoff: "hand-offs" };
  waiters.forEach((w, i) => {
    for (const [phase, what] of Object.entries(PHASES)) {
      const s = w.stall_ms[phase];
      if (!s) continue;
      rows.push(`| ${i + 1} | ${what} | ${s.late} ms | ${s.cpu} / ${s.queued} ms | ${s.busy} ms |`);
    }
  });
}
console.log(rows.join("\n"));
