-- 0014: observe before apply.  A route may ask the source of truth about a
-- message before applying it; what was observed, and where the message said
-- otherwise, is kept beside the message (evidence).  `via` names the door a
-- message came through (a command, an HTTP endpoint, a worker) when its
-- deliverer says so; the dedupe key stays (source, event id).
ALTER TABLE inbox_messages ADD COLUMN via text;
ALTER TABLE inbox_messages ADD COLUMN evidence jsonb;
