-- A planned stop (an agent's `node-stopping`): when, and whether it took its volumes down;
-- the node is `stopped` until it registers again or its grace runs out. And what each
-- node's agent last observed a plugin make for a claim (`plugin show`), kept across the
-- node's registrations.
ALTER TABLE nodes ADD COLUMN stopped_at INTEGER;
ALTER TABLE nodes ADD COLUMN stop_took_down INTEGER;
ALTER TABLE node_plugins ADD COLUMN observed TEXT;
