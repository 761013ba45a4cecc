-- Group snapshots (`csivol snapshot create --group`): several volumes of one plugin cut
-- together by its GroupController. The group's members are rows of `snapshots` naming it
-- in `group_name`; they are deleted with the group, never alone.
CREATE TABLE group_snapshots (
    name TEXT PRIMARY KEY,
    plugin TEXT NOT NULL,
    volumes TEXT NOT NULL,
    group_snapshot_id TEXT NOT NULL,
    state TEXT NOT NULL,
    ready_to_use INTEGER NOT NULL,
    creation_time INTEGER,
    parameters TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
);
ALTER TABLE snapshots ADD COLUMN group_name TEXT;
CREATE INDEX snapshots_group ON snapshots (group_name);
