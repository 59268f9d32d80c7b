"""
The durable job queue.

Accepting jobs, claims under leases with fencing tokens, job kinds and their retry
policy, dead letters, the wake-up on PostgreSQL.
"""
