-- CI claims: leases (released when not renewed), labels, and the volume's queue (claims in
-- state 'queued', granted in arrival order: created_at, then rowid).
ALTER TABLE claims ADD COLUMN ttl_ms INTEGER;
ALTER TABLE claims ADD COLUMN expires_at INTEGER;
ALTER TABLE claims ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
-- A claim that was being released (or cleaned up after a failure) when its node was lost:
-- when the node returns, it is released through it, not resumed.
ALTER TABLE claims ADD COLUMN release_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX claims_expires ON claims (expires_at) WHERE expires_at IS NOT NULL;
