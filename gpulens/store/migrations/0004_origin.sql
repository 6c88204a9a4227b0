-- gpulens schema 4: what the origin network saw, for each diagnosed failure.
-- failures.origin_posterior stays a plain {origin: probability} object.
ALTER TABLE failures ADD COLUMN inputs VARCHAR[];          -- input paths named in the failure log
ALTER TABLE failures ADD COLUMN origin_confidence DOUBLE;  -- posterior probability of failures.origin
ALTER TABLE failures ADD COLUMN origin_evidence JSON;      -- {variable: state} fed to the network
ALTER TABLE failures ADD COLUMN origin_influence JSON;     -- [{variable, state, delta_log_odds, favours, text}]
