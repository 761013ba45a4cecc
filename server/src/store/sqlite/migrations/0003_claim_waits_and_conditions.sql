-- What a claim waits for on its node (node truth: readiness is checked against the mount
-- table), and the plugin's abnormal volume condition.
ALTER TABLE claims ADD COLUMN waiting TEXT;
ALTER TABLE claims ADD COLUMN waiting_since INTEGER;
ALTER TABLE claims ADD COLUMN waiting_timeout_ms INTEGER;
ALTER TABLE claims ADD COLUMN condition TEXT;
