-- Topology: the segments each node plugin reports (NodeGetInfo's `accessible_topology`, read
-- by every claim, so a column rather than the registration's JSON; the registrations
-- recorded before fill it), the segments a volume is accessible from, and what
-- `volume create` asked for.
ALTER TABLE node_plugins ADD COLUMN topology TEXT NOT NULL DEFAULT '{}';
UPDATE node_plugins
    SET topology = COALESCE(json_extract(registration, '$.node.info.accessible_topology'), '{}')
    WHERE json_valid(registration);
ALTER TABLE volumes ADD COLUMN accessible_topology TEXT NOT NULL DEFAULT '[]';
ALTER TABLE volumes ADD COLUMN topology_request TEXT;
