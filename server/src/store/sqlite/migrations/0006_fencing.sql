-- Fencing: a node's labels (as its agent reported them), the policy's failed attempts,
-- and every run of a fence method with its evidence.
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN fence_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN fence_error TEXT;
ALTER TABLE nodes ADD COLUMN fence_failed_at INTEGER;

CREATE TABLE fences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    at INTEGER NOT NULL,
    method TEXT NOT NULL,
    command TEXT NOT NULL,
    exit_status INTEGER,
    timed_out INTEGER NOT NULL,
    output TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL,
    ok INTEGER NOT NULL
);
CREATE INDEX fences_node ON fences (node, id);
