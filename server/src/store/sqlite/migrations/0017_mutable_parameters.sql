-- Mutable parameters (ControllerModifyVolume): what a volume has, as JSON, and a change
-- asked for and not applied yet, or refused (`csivol volume modify`).
ALTER TABLE volumes ADD COLUMN mutable_parameters TEXT NOT NULL DEFAULT '{}';
ALTER TABLE volumes ADD COLUMN modification TEXT;
