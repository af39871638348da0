-- How many times the `usage` read model's rows changed: one row, bumped by the `usage` projector in the transaction
-- of every batch that writes usage rows and of every reset (a rebuild), never else, never back. The dispatcher keys
-- the budgets ledger it keeps across ticks on it (`budgets::LedgerKey`): the projector's own checkpoint moves with
-- every event of the log, this only when what budgets read moves. Starts at 0: the rows already stored stay right,
-- so the projector is not rebuilt for it.
CREATE TABLE usage_changes (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    changes bigint  NOT NULL CHECK (changes >= 0)
);
INSERT INTO usage_changes (one, changes) VALUES (true, 0);
