-- Tokens expire and are revoked (kept, so that the refusal can say which); when each was
-- last used; which plugins' controllers a node token's node may host.
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER;
ALTER TABLE tokens ADD COLUMN controllers TEXT NOT NULL DEFAULT '[]';
-- Controller hosts an operator allowed (`csivol plugin controllers P --allow N`). The nodes
-- that hosted a controller before hosting was authorised keep hosting it: they were
-- accepted then, and refusing them at upgrade would stall every volume of their plugin.
CREATE TABLE controller_hosts (
    plugin TEXT NOT NULL,
    node TEXT NOT NULL,
    allowed_by TEXT NOT NULL,
    allowed_at INTEGER NOT NULL,
    PRIMARY KEY (plugin, node)
);
INSERT INTO controller_hosts (plugin, node, allowed_by, allowed_at)
    SELECT plugin, node, 'upgrade', CAST(strftime('%s', 'now') AS INTEGER) * 1000
    FROM node_plugins WHERE controller = 1;
