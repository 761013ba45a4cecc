-- Whether a node takes new claims (eligible, ineligible, draining): an operator's choice
-- that a registration keeps.
ALTER TABLE nodes ADD COLUMN eligibility TEXT NOT NULL DEFAULT 'eligible';
