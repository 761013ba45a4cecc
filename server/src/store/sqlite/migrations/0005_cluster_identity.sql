-- The cluster's identity, made once with the schema and kept by backups. The server also
-- writes it beside the database (`cluster.id`), so that a data dir whose database went
-- missing or empty is recognised as a lost cluster instead of becoming a new, empty one.
CREATE TABLE cluster (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
INSERT INTO cluster (id, created_at)
    VALUES (lower(hex(randomblob(16))), CAST(strftime('%s', 'now') AS INTEGER) * 1000);
