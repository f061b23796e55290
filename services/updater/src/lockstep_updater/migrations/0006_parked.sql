-- A node waiting for a place in its pool's out-of-service budget is parked: it is woken (made
-- claimable now) in the transaction that takes another node of its pool out of service's end,
-- instead of every waiting node polling the budget (docs/updater.md "Budget waits").
ALTER TABLE node_work ADD COLUMN parked boolean NOT NULL DEFAULT false;
CREATE INDEX node_work_parked ON node_work (pool) WHERE parked;
