"""A ticket sale against PostgreSQL from Python: buyers take 2 of 100 tickets through a counted key, and families hold 4 adjacent seats, all or nothing (docs/python.md, docs/fencing.md §2.1).

    TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \\
    FENCE_PG="host=/run/postgresql dbname=postgres" python3 ticket_sale.py

**The stock.** 60 buyers want 2 tickets each of a sale of 100. Each holds one of the 8
permits of the key ``checkout:<sale>`` (``Permits(key, 1, 8)``: at most 8 checkouts at
once, the rest wait in arrival order and hear their place in line), then decrements the
stock with the store's own conditional write — only while 2 are left, in the same
statement — and records the order with the hold's token, in one transaction. 50 buyers
get 2 tickets, 10 are told it is sold out: nothing is oversold, even by a checkout that
outlived its lease.

**The seats.** Three families each hold the keys of 4 adjacent seats in ONE hold
(granted all at once or not at all, one token for the 4), two of them overlapping and
naming their seats in opposite orders (no deadlock), while a single buyer takes one
seat of the first family's block with a plain acquire. Each fences every seat row it
writes with its token, in one transaction: a family buys all 4 seats or none.

Needs psycopg 3 (`pip install "psycopg[binary]"`). Exits 0 when nothing was oversold
and no seat was sold twice; 1 otherwise. The same sale as examples/ticket_sale.rs;
tests/python_package.rs runs it against a real `ticketing server` and a throw-away
PostgreSQL.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import psycopg

import ticketing
from ticketing import Permits

_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The seats and sales of docs/fencing.md §2, and the stock and orders of §2.1: the
# schemas of examples/fenced_postgres.sql and examples/ticket_sale.sql.
SCHEMA = (_EXAMPLES / "fenced_postgres.sql").read_text() + (_EXAMPLES / "ticket_sale.sql").read_text()

STOCK, EACH, BUYERS, CHECKOUTS = 100, 2, 60, 8
LEASE, WAIT = 30, 120


def checkout(db: psycopg.Connection, sale: int, who: str, token: int) -> bool:
    """2 tickets for `who`: the conditional decrement and the order, one transaction.
    False: sold out, nothing written."""
    with db.transaction():
        taken = db.execute(
            "UPDATE stock SET left_count = left_count - %s WHERE sale_id = %s AND left_count >= %s RETURNING left_count",
            (EACH, sale, EACH),
        ).fetchone()
        if taken is None:
            return False
        db.execute("INSERT INTO orders (sale_id, buyer, count, token) VALUES (%s, %s, %s, %s)",
                   (sale, who, EACH, token))
        return True


def run_sale(client: ticketing.Client, conninfo: str, sale: int) -> Dict[str, int]:
    """The stock sale: BUYERS threads sharing one client, each with its own owner."""
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(SCHEMA)
        db.execute("INSERT INTO stock (sale_id, left_count) VALUES (%s, %s) "
                   "ON CONFLICT (sale_id) DO UPDATE SET left_count = %s", (sale, STOCK, STOCK))
        db.execute("DELETE FROM orders WHERE sale_id = %s", (sale,))
    key = f"checkout:{sale}"
    counts = {"bought": 0, "sold_out": 0, "inside": 0, "most_inside": 0, "told_place": 0}
    guard = threading.Lock()
    start = threading.Barrier(BUYERS)
    errors: List[BaseException] = []

    def buyer(i: int) -> None:
        told: List[ticketing.Place] = []
        try:
            with psycopg.connect(conninfo, autocommit=True) as db:
                start.wait()
                # Heard on this thread while it waits: where it stands, and how long.
                with client.with_owner(f"buyer-{i}").hold([Permits(key, 1, CHECKOUTS)], lease=LEASE, wait=WAIT,
                                                          on_place=told.append) as lock:
                    with guard:
                        counts["inside"] += 1
                        counts["most_inside"] = max(counts["most_inside"], counts["inside"])
                    bought = checkout(db, sale, f"buyer-{i}", lock.token)
                    with guard:
                        counts["inside"] -= 1
            with guard:
                counts["bought" if bought else "sold_out"] += 1
                counts["told_place"] += bool(told)
        except BaseException as e:  # reported by main
            errors.append(e)

    threads = [threading.Thread(target=buyer, args=(i,)) for i in range(BUYERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    with psycopg.connect(conninfo, autocommit=True) as db:
        counts["left"] = db.execute("SELECT left_count FROM stock WHERE sale_id = %s", (sale,)).fetchone()[0]
        counts["ordered"] = db.execute("SELECT coalesce(sum(count), 0) FROM orders WHERE sale_id = %s",
                                       (sale,)).fetchone()[0]
    return counts


def buy_seats(db: psycopg.Connection, seats: List[int], who: str, token: int) -> bool:
    """Every seat of `seats` for `who` under `token`, fencing each row (compare-and-advance
    of its high-water token) before reading it, in one transaction: all or none."""
    try:
        with db.transaction():
            for seat in seats:
                row = db.execute("UPDATE seats SET fence = %s WHERE id = %s AND fence < %s RETURNING sold_to",
                                 (token, seat, token)).fetchone()
                if row is None or row[0] is not None:
                    raise _Taken()  # a newer token has written it, or it is sold: roll back
            for seat in seats:
                db.execute("UPDATE seats SET sold_to = %s WHERE id = %s", (who, seat))
                db.execute("INSERT INTO sales (seat_id, buyer, token) VALUES (%s, %s, %s)", (seat, who, token))
        return True
    except _Taken:
        return False


class _Taken(Exception):
    """A seat of the block was taken: the transaction rolls back."""


def run_seats(client: ticketing.Client, conninfo: str, first: int) -> Tuple[Dict[str, Tuple[List[int], int]],
                                                                          Dict[int, List[str]]]:
    """The seat sale over seats first..first+9: every buyer at once, each family's seats
    in one hold. Returns what each bought (all it asked for, or nothing) under which
    token, and the sales ledger per seat."""
    buyers = {
        "family-a": list(range(first, first + 4)),
        "family-b": list(reversed(range(first + 2, first + 6))),  # overlaps a, opposite order
        "family-c": list(range(first + 6, first + 10)),
        "single": [first + 1],
    }
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(SCHEMA)
        for seat in range(first, first + 10):
            db.execute("DELETE FROM sales WHERE seat_id = %s", (seat,))
            db.execute("INSERT INTO seats (id) VALUES (%s) ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0",
                       (seat,))
    bought: Dict[str, Tuple[List[int], int]] = {}
    start = threading.Barrier(len(buyers))
    errors: List[BaseException] = []

    def buy(who: str, seats: List[int]) -> None:
        try:
            with psycopg.connect(conninfo, autocommit=True) as db:
                me = client.with_owner(who)
                start.wait()
                if len(seats) == 1:
                    lock = me.acquire(f"seat:{seats[0]}", lease=LEASE, wait=WAIT)
                else:
                    lock = me.hold([f"seat:{seat}" for seat in seats], lease=LEASE, wait=WAIT)
                with lock:
                    bought[who] = (seats if buy_seats(db, seats, who, lock.token) else [], lock.token)
        except BaseException as e:  # reported by main
            errors.append(e)

    threads = [threading.Thread(target=buy, args=item) for item in buyers.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    ledger: Dict[int, List[str]] = {}
    with psycopg.connect(conninfo, autocommit=True) as db:
        for seat, buyer in db.execute("SELECT seat_id, buyer FROM sales WHERE seat_id >= %s AND seat_id < %s "
                                      "ORDER BY id", (first, first + 10)):
            ledger.setdefault(seat, []).append(buyer)
    return bought, ledger


def main() -> int:
    addrs = os.environ.get("TICKETING_ADDRS", "127.0.0.1:5225").split(",")
    client = ticketing.Client(addrs, auth_token=os.environ["TICKETING_AUTH_TOKEN"], owner="ticket-sale")
    conninfo = os.environ["FENCE_PG"]

    sale = run_sale(client, conninfo, 1)
    print(f"stock of {STOCK}, {BUYERS} buyers of {EACH}: {sale['bought']} bought, {sale['sold_out']} sold out; "
          f"{sale['ordered']} tickets ordered, {sale['left']} left; at most {sale['most_inside']} checkouts at once "
          f"(capacity {CHECKOUTS}); {sale['told_place']} buyers told their place in line", flush=True)
    bought, ledger = run_seats(client, conninfo, 201)
    for who, (seats, token) in sorted(bought.items()):
        print(f"{who}: {f'seats {seats}' if seats else 'nothing (a seat was taken)'}, token {token}", flush=True)
    twice = {seat: buyers for seat, buyers in ledger.items() if len(buyers) > 1}
    oversold = sale["ordered"] > STOCK or sale["most_inside"] > CHECKOUTS or sale["ordered"] + sale["left"] != STOCK
    if oversold or twice:
        print(f"OVERSOLD: {sale}, seats sold twice: {twice}", flush=True)
        return 1
    print("nothing oversold, no seat sold twice", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
