// report.mjs: the Markdown table of scripts/node-bench.sh from lock_bench.mjs's JSON lines
// (one file): per loop count and system, the medians over the rounds, and Ticketing's
// pairs/s divided by redlock's (and by the Rust client's on the same cluster).
import fs from "node:fs";

const runs = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const NAMES = {
  ticketing: "Ticketing (Node package, 3 nodes)",
  redis: "redlock 5 over ioredis (1 Redis)",
  rust: "Ticketing (Rust client, same 3 nodes)",
};
const rows = ["| loops | system | pairs/s | p50 | p99 | errors | Ticketing ÷ it |", "|------:|--------|--------:|----:|----:|-------:|---------------:|"];
for (const loops of [...new Set(runs.map((r) => r.loops))].sort((a, b) => b - a)) {
  const of = (system) => runs.filter((r) => r.loops === loops && r.system === system);
  const rate = (system) => median(of(system).map((r) => r.pairs_per_s));
  for (const system of ["ticketing", "redis", "rust"]) {
    const rs = of(system);
    if (rs.length === 0) continue;
    const ratio = system === "ticketing" ? "—" : `${(rate("ticketing") / rate(system)).toFixed(2)}×`;
    const errors = rs.reduce((n, r) => n + r.errors, 0);
    rows.push(
      `| ${loops} | ${NAMES[system]} | ${Math.round(rate(system))} | ${median(rs.map((r) => r.p50_ms)).toFixed(2)} ms | ` +
        `${median(rs.map((r) => r.p99_ms)).toFixed(2)} ms | ${errors} | ${ratio} |`,
    );
  }
}
console.log(rows.join("\n"));
