-- The schema of examples/fenced_postgres.rs and python/examples/fenced_postgres.py
-- (docs/fencing.md §2).
CREATE TABLE IF NOT EXISTS seats (
    id      integer PRIMARY KEY,
    sold_to text,
    fence   bigint NOT NULL DEFAULT 0   -- highest fencing token that has written this row
);
CREATE TABLE IF NOT EXISTS sales (
    id      bigserial PRIMARY KEY,
    seat_id integer NOT NULL,
    buyer   text NOT NULL,
    token   bigint NOT NULL
);
