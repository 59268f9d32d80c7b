-- 0015 belongs to the mixed fleets' work (jobs.runs_on, workers), on its own
-- branch.  This placeholder only keeps the numbering contiguous on the
-- definition-versions branch (0016 follows it): the fleet's 0015 replaces it
-- when the branches meet (two 0015 files refuse to load: nobody misses it).
SELECT 1;
