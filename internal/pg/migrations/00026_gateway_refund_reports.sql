-- A refund.succeeded webhook may come before berth has stored the
-- gateway's id of the refund it asked for (gateway_refund, 00004); until
-- then berth cannot tell whether the money it reports is the refund's.
-- The row kept only the latest report, so a wrong report followed by the
-- right one, both early, lost the right one, or the right one followed by
-- a wrong one lost it too. reports keeps every distinct report (amount and
-- currency) that came before the link; the link completes the refund when
-- one of them is the refund's money. Adding a column with a constant
-- default rewrites nothing: safe while berth serves.

-- +goose Up
ALTER TABLE gateway_refund ADD COLUMN reports jsonb NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE gateway_refund DROP COLUMN reports;
