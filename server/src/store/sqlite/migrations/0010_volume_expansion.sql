-- An expansion in progress or failed (`csivol volume expand`), as JSON: the capacity asked
-- for, its phase, and each node's NodeExpandVolume.
ALTER TABLE volumes ADD COLUMN expansion TEXT;
