-- The schema of examples/ticket_sale.rs (docs/fencing.md §2.1), beside the seats and
-- sales tables of examples/fenced_postgres.sql.
CREATE TABLE IF NOT EXISTS stock (
    sale_id    integer PRIMARY KEY,
    left_count integer NOT NULL CHECK (left_count >= 0)
);
CREATE TABLE IF NOT EXISTS orders (
    id      bigserial PRIMARY KEY,
    sale_id integer NOT NULL,
    buyer   text NOT NULL,
    count   integer NOT NULL,
    token   bigint NOT NULL   -- the hold's fencing token, for the audit trail
);
