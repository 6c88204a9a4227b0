-- gpulens schema 260 (issue 23): what the whole-log diagnosis read from a failed attempt's log,
-- so an operator can check it: the first rank and node to show the root error (the node the
-- bad-node evidence charges, instead of every node of the job), the failure-indicating line
-- numbers (1-based, as grep -n), the phase and the last step, and the one-sentence story.
ALTER TABLE failures ADD COLUMN IF NOT EXISTS first_node VARCHAR;
ALTER TABLE failures ADD COLUMN IF NOT EXISTS first_rank INTEGER;
ALTER TABLE failures ADD COLUMN IF NOT EXISTS indicator_lines INTEGER[];
ALTER TABLE failures ADD COLUMN IF NOT EXISTS phase VARCHAR;
ALTER TABLE failures ADD COLUMN IF NOT EXISTS step VARCHAR;
ALTER TABLE failures ADD COLUMN IF NOT EXISTS story VARCHAR;
