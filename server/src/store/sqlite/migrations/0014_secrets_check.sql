-- One value sealed with the secrets key the cluster first started with: a server given
-- another key (a second server over etcd, a data dir with the wrong key file) is refused at
-- start, before it needs a secret it could not open.
CREATE TABLE secrets_check (id INTEGER PRIMARY KEY CHECK (id = 1), sealed TEXT NOT NULL);
