-- Token names (`token create --name alice`), shown as the actor in events; unique.
ALTER TABLE tokens ADD COLUMN name TEXT;
CREATE UNIQUE INDEX tokens_name ON tokens (name) WHERE name IS NOT NULL;
