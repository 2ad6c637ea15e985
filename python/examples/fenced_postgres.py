"""Fencing against PostgreSQL from Python (docs/python.md, docs/fencing.md).

Worker A is granted seat:N with a 1 s lease and stalls (a GC pause, a swapped-out
process, a stopped VM); worker B queues for the key and gets it, with a larger token,
when A's lease ends, and sells the seat. A wakes up and tries to sell too: its write
carries the older token, so the database rejects it. Sold once, to B.

    TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \\
    FENCE_PG="host=/run/postgresql dbname=postgres" python3 fenced_postgres.py

Needs psycopg 3 (`pip install "psycopg[binary]"`). Exits 0 when the seat was sold
exactly once, to B; 1 otherwise. tests/python_package.rs runs it against a real
`ticketing server` and a throw-away PostgreSQL.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import psycopg

import ticketing

# The schema of docs/fencing.md §2, shared with examples/fenced_postgres.rs.
SCHEMA = (Path(__file__).resolve().parents[2] / "examples" / "fenced_postgres.sql").read_text()


def sell_fenced(db: psycopg.Connection, seat: int, who: str, token: int) -> str:
    """Sells `seat` to `who` under fencing token `token`, or refuses."""
    with db.transaction():
        # 1. compare-and-advance the high-water mark; the row stays locked until COMMIT
        row = db.execute(
            "UPDATE seats SET fence = %s WHERE id = %s AND fence < %s RETURNING sold_to",
            (token, seat, token),
        ).fetchone()
        if row is None:
            return "rejected"          # a newer token has written: our lease is over; stop
        if row[0] is not None:
            return "already sold"      # read under the row lock, so it is current
        # 2. the business writes, in the same transaction
        db.execute("UPDATE seats SET sold_to = %s WHERE id = %s", (who, seat))
        db.execute("INSERT INTO sales (seat_id, buyer, token) VALUES (%s, %s, %s)", (seat, who, token))
        return "sold"


def main() -> int:
    addrs = os.environ.get("TICKETING_ADDRS", "127.0.0.1:5225").split(",")
    secret = os.environ["TICKETING_AUTH_TOKEN"]
    conninfo = os.environ["FENCE_PG"]
    seat = int(os.environ.get("FENCE_SEAT", "42"))
    key = f"seat:{seat}"
    start = time.monotonic()

    def say(who: str, what: str) -> None:
        print(f"{(time.monotonic() - start) * 1000:6.0f} ms  {who}  {what}", flush=True)

    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(SCHEMA)
        db.execute("DELETE FROM sales WHERE seat_id = %s", (seat,))
        db.execute(
            "INSERT INTO seats (id) VALUES (%s) ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0", (seat,)
        )

    client = ticketing.Client(addrs, auth_token=secret)
    a_client, b_client = client.with_owner("fence-A"), client.with_owner("fence-B")
    b_sold = threading.Event()
    results = {}

    def worker_b() -> None:
        with psycopg.connect(conninfo, autocommit=True) as db:
            say("B", "queues for the key behind A")
            with b_client.lock(key, lease=10, wait=10) as lock:
                say("B", f"granted at A's lease expiry, token {lock.token}")
                results["B"] = sell_fenced(db, seat, "B", lock.token)
                say("B", f"sells with token {lock.token}: {results['B']}")
        b_sold.set()

    lock_a = a_client.acquire(key, lease=1, wait=0)
    say("A", f"granted, token {lock_a.token}, lease {lock_a.lease:.0f} s")
    b = threading.Thread(target=worker_b)
    b.start()
    say("A", "stalls (GC pause, swapped out, VM stopped...)")
    if not b_sold.wait(20):
        say("A", "B never sold: giving up")
        return 1
    say("A", f"wakes up, lease expired locally: {lock_a.expired}; goes on with its sale")
    with psycopg.connect(conninfo, autocommit=True) as db:
        results["A"] = sell_fenced(db, seat, "A", lock_a.token)
        say("A", f"sells with token {lock_a.token}: {results['A']}")
        say("A", f"release: {lock_a.release()}")
        sold_to, fence = db.execute("SELECT sold_to, fence FROM seats WHERE id = %s", (seat,)).fetchone()
        ledger = db.execute("SELECT buyer, token FROM sales WHERE seat_id = %s ORDER BY id", (seat,)).fetchall()
    b.join()
    say("-", f"seat {seat}: sold_to={sold_to}, fence={fence}, sales ledger: {ledger}")
    sold_once = results == {"A": "rejected", "B": "sold"} and sold_to == "B" and len(ledger) == 1
    print("sold once, to B" if sold_once else "NOT sold once", flush=True)
    return 0 if sold_once else 1


if __name__ == "__main__":
    sys.exit(main())
