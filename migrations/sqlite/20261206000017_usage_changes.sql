-- How many times the `usage` read model's rows changed (see the Postgres twin): one row, bumped by the `usage`
-- projector with every batch that writes usage rows and every reset, never else.
CREATE TABLE usage_changes (
    one     INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
    changes INTEGER NOT NULL CHECK (changes >= 0)
);
INSERT INTO usage_changes (one, changes) VALUES (1, 0);
