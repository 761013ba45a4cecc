-- Snapshots taken through a plugin's controller (`csivol snapshot create`): the volume they
-- were taken of (kept when that volume is deleted), the plugin's id and `ready_to_use`,
-- tracked until true.
CREATE TABLE snapshots (
    name TEXT PRIMARY KEY,
    volume TEXT NOT NULL,
    plugin TEXT NOT NULL,
    snapshot_id TEXT NOT NULL,
    state TEXT NOT NULL,
    ready_to_use INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    creation_time INTEGER,
    parameters TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
);
CREATE INDEX snapshots_volume ON snapshots (volume);
