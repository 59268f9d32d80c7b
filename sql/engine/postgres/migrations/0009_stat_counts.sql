-- 0009: figures `saga stats` would otherwise count over the whole history
-- (sagas per kind and state with the sum of their entry times, for the mean
-- time in state; archived jobs per queue; published outbox events and broker
-- errors), kept by triggers in the writing transaction, so they are never out
-- of step with the rows.  Writers only append deltas, so no worker queues on
-- a counter row; workers fold the deltas into the totals now and then
-- (roll_up_stat_deltas) and readers add the two.  The oldest entry per kind
-- and state comes from an index.
CREATE TABLE stat_counts (
    metric  text NOT NULL,
    key1    text NOT NULL,
    key2    text NOT NULL,
    n       bigint NOT NULL,
    total   numeric NOT NULL,
    PRIMARY KEY (metric, key1, key2)
);
CREATE TABLE stat_deltas (
    metric  text NOT NULL,
    key1    text NOT NULL,
    key2    text NOT NULL,
    n       bigint NOT NULL,
    total   numeric NOT NULL
);
CREATE INDEX sagas_kind_state_entered ON sagas (kind, state, entered_at);

-- Each statement's change, netted per key (an update that leaves the counted
-- columns alone adds nothing).  A trigger with transition tables has one
-- event, hence three per table and a branch per event.
CREATE FUNCTION stat_count_sagas() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'sagas', kind, state, count(*), sum(EXTRACT(EPOCH FROM entered_at))
        FROM new_rows GROUP BY kind, state;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'sagas', kind, state, -count(*), -sum(EXTRACT(EPOCH FROM entered_at))
        FROM old_rows GROUP BY kind, state;
    ELSE
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'sagas', kind, state, sum(n), sum(total)
        FROM (SELECT kind, state, 1 AS n, EXTRACT(EPOCH FROM entered_at) AS total FROM new_rows
              UNION ALL
              SELECT kind, state, -1, -EXTRACT(EPOCH FROM entered_at) FROM old_rows) AS change
        GROUP BY kind, state
        HAVING sum(n) <> 0 OR sum(total) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER sagas_counted_insert AFTER INSERT ON sagas
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_sagas();
CREATE TRIGGER sagas_counted_update AFTER UPDATE ON sagas
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_sagas();
CREATE TRIGGER sagas_counted_delete AFTER DELETE ON sagas
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_sagas();

CREATE FUNCTION stat_count_archive() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'archived', queue, '', count(*), 0 FROM new_rows GROUP BY queue;
    ELSE
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'archived', queue, '', -count(*), 0 FROM old_rows GROUP BY queue;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_archive_counted_insert AFTER INSERT ON job_archive
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_archive();
CREATE TRIGGER job_archive_counted_delete AFTER DELETE ON job_archive
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_archive();

-- The outbox: n counts published events, total sums broker errors.
CREATE FUNCTION stat_count_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'outbox', '', '', count(published_at), sum(errors)
        FROM new_rows
        HAVING count(published_at) <> 0 OR sum(errors) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'outbox', '', '', -count(published_at), -sum(errors)
        FROM old_rows
        HAVING count(published_at) <> 0 OR sum(errors) <> 0;
    ELSE
        INSERT INTO stat_deltas (metric, key1, key2, n, total)
        SELECT 'outbox', '', '', sum(n), sum(total)
        FROM (SELECT count(published_at) AS n, sum(errors) AS total FROM new_rows
              UNION ALL
              SELECT -count(published_at), -sum(errors) FROM old_rows) AS change
        HAVING sum(n) <> 0 OR sum(total) <> 0;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_counted_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_outbox();
CREATE TRIGGER outbox_counted_update AFTER UPDATE ON outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_outbox();
CREATE TRIGGER outbox_counted_delete AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION stat_count_outbox();

-- What is already there.
INSERT INTO stat_counts (metric, key1, key2, n, total)
SELECT 'sagas', kind, state, count(*), sum(EXTRACT(EPOCH FROM entered_at))
FROM sagas GROUP BY kind, state;
INSERT INTO stat_counts (metric, key1, key2, n, total)
SELECT 'archived', queue, '', count(*), 0 FROM job_archive GROUP BY queue;
INSERT INTO stat_counts (metric, key1, key2, n, total)
SELECT 'outbox', '', '', count(published_at), coalesce(sum(errors), 0) FROM outbox HAVING count(*) > 0;
