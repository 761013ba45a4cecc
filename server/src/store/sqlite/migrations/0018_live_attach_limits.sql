-- Live attach limits (NodeGetInfo read again while a node runs): when the server last asked
-- a node to read them (a ControllerPublishVolume to it answered RESOURCE_EXHAUSTED), and per
-- node plugin the last change of its limit (JSON: from, to, at_ms, reason) and when it was
-- last read.
ALTER TABLE nodes ADD COLUMN limits_refresh_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE node_plugins ADD COLUMN limit_change TEXT;
ALTER TABLE node_plugins ADD COLUMN limit_read_at INTEGER;
