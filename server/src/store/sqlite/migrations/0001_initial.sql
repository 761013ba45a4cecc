CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta (key, value) VALUES ('index', 1);

CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    node TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE nodes (
    name TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    registered_at INTEGER NOT NULL,
    lost_at INTEGER,
    fence_after_ms INTEGER,
    fenced_at INTEGER
);

CREATE TABLE node_plugins (
    node TEXT NOT NULL,
    plugin TEXT NOT NULL,
    registration TEXT NOT NULL,
    csi_node_id TEXT,
    max_volumes INTEGER NOT NULL,
    node_service INTEGER NOT NULL,
    controller INTEGER NOT NULL,
    controller_service INTEGER NOT NULL,
    controller_publish INTEGER NOT NULL,
    stage_unstage INTEGER NOT NULL,
    PRIMARY KEY (node, plugin)
);
CREATE INDEX node_plugins_plugin ON node_plugins (plugin);

CREATE TABLE volumes (
    name TEXT PRIMARY KEY,
    plugin TEXT NOT NULL,
    external_id TEXT NOT NULL,
    access_mode TEXT NOT NULL,
    attachment TEXT NOT NULL,
    fs_type TEXT NOT NULL,
    mount_flags TEXT NOT NULL,
    context TEXT NOT NULL,
    parameters TEXT NOT NULL,
    secrets TEXT NOT NULL,
    capacity_bytes INTEGER,
    lifecycle TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
);
CREATE INDEX volumes_plugin ON volumes (plugin);

CREATE TABLE claims (
    volume TEXT NOT NULL,
    alloc TEXT NOT NULL,
    node TEXT NOT NULL,
    mode TEXT NOT NULL,
    state TEXT NOT NULL,
    target_path TEXT,
    error TEXT,
    next_retry_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL,
    PRIMARY KEY (volume, alloc)
);
CREATE INDEX claims_node ON claims (node, state);

CREATE TABLE attachments (
    volume TEXT NOT NULL,
    node TEXT NOT NULL,
    state TEXT NOT NULL,
    publish_context TEXT NOT NULL,
    forced INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    next_retry_at INTEGER,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (volume, node)
);
CREATE INDEX attachments_node ON attachments (node, state);

CREATE TABLE ops (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    plugin TEXT NOT NULL,
    volume TEXT NOT NULL,
    node TEXT,
    host TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    not_before INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    payload TEXT NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL,
    assigned_at INTEGER
);
CREATE INDEX ops_host ON ops (host);
CREATE INDEX ops_plugin ON ops (plugin, host);
CREATE INDEX ops_volume ON ops (volume);

CREATE TABLE events (
    idx INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    volume TEXT,
    node TEXT,
    alloc TEXT,
    actor TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX events_volume ON events (volume);
CREATE INDEX events_node ON events (node);
