-- 0009: figures `saga stats` would otherwise count over the whole history
-- (sagas per kind and state with the sum of their entry times, for the mean
-- time in state; archived jobs per queue; published outbox events and broker
-- errors), kept by triggers in the writing transaction, so they are never out
-- of step with the rows.  SQLite has one writer at a time: the triggers add to
-- the totals directly.  The oldest entry per kind and state comes from an
-- index.
CREATE INDEX sagas_kind_state_entered ON sagas (kind, state, entered_at);
CREATE TABLE stat_counts (
    metric  TEXT NOT NULL,
    key1    TEXT NOT NULL,
    key2    TEXT NOT NULL,
    n       INTEGER NOT NULL,
    total   INTEGER NOT NULL,
    PRIMARY KEY (metric, key1, key2)
) STRICT;

-- Sagas: n counts them, total sums their entry times in milliseconds since
-- 1970 (an INTEGER: exact up to some four million sagas in one state, then
-- SQLite carries on in floating point).
CREATE TRIGGER sagas_counted_insert AFTER INSERT ON sagas
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', new.kind, new.state, 1,
            CAST(round((julianday(new.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER sagas_counted_update AFTER UPDATE OF kind, state, entered_at ON sagas
WHEN old.kind IS NOT new.kind OR old.state IS NOT new.state
     OR old.entered_at IS NOT new.entered_at
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', old.kind, old.state, -1,
            -CAST(round((julianday(old.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', new.kind, new.state, 1,
            CAST(round((julianday(new.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER sagas_counted_delete AFTER DELETE ON sagas
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('sagas', old.kind, old.state, -1,
            -CAST(round((julianday(old.entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

-- Archived jobs per queue.
CREATE TRIGGER job_archive_counted_insert AFTER INSERT ON job_archive
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('archived', new.queue, '', 1, 0)
    ON CONFLICT DO UPDATE SET n = n + excluded.n;
END;
CREATE TRIGGER job_archive_counted_delete AFTER DELETE ON job_archive
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('archived', old.queue, '', -1, 0)
    ON CONFLICT DO UPDATE SET n = n + excluded.n;
END;

-- The outbox: n counts published events, total sums broker errors.
CREATE TRIGGER outbox_counted_insert AFTER INSERT ON outbox
WHEN new.published_at IS NOT NULL OR new.errors <> 0
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('outbox', '', '', new.published_at IS NOT NULL, new.errors)
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER outbox_counted_update AFTER UPDATE OF published_at, errors ON outbox
WHEN (old.published_at IS NULL) IS NOT (new.published_at IS NULL) OR old.errors <> new.errors
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('outbox', '', '', (new.published_at IS NOT NULL) - (old.published_at IS NOT NULL),
            new.errors - old.errors)
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;
CREATE TRIGGER outbox_counted_delete AFTER DELETE ON outbox
WHEN old.published_at IS NOT NULL OR old.errors <> 0
BEGIN
    INSERT INTO stat_counts (metric, key1, key2, n, total)
    VALUES ('outbox', '', '', -(old.published_at IS NOT NULL), -old.errors)
    ON CONFLICT DO UPDATE SET n = n + excluded.n, total = total + excluded.total;
END;

-- What is already there.
INSERT INTO stat_counts (metric, key1, key2, n, total)
SELECT 'sagas', kind, state, count(*),
       sum(CAST(round((julianday(entered_at) - 2440587.5) * 86400000.0) AS INTEGER))
FROM sagas GROUP BY kind, state;
INSERT INTO stat_counts (metric, key1, key2, n, total)
SELECT 'archived', queue, '', count(*), 0 FROM job_archive GROUP BY queue;
INSERT INTO stat_counts (metric, key1, key2, n, total)
SELECT 'outbox', '', '', count(published_at), coalesce(sum(errors), 0) FROM outbox
HAVING count(*) > 0;
