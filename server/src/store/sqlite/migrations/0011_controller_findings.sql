-- Controller-side reconciliation: per plugin, what its last listings showed that differs
-- from csivol's attachments (JSON, `reconcile::Kept`), replaced at each listing.
CREATE TABLE controller_findings (
    plugin TEXT PRIMARY KEY,
    findings TEXT NOT NULL,
    listed_at INTEGER NOT NULL
);
