-- The labels an operator set on a node (`csivol node label`), kept apart from those its
-- agent reports (`labels`, replaced at every registration): only an operator's choose and
-- fill its fence method.
ALTER TABLE nodes ADD COLUMN operator_labels TEXT NOT NULL DEFAULT '{}';
