"""
The store: connections, transactions, named SQL, migrations.

SQLite or PostgreSQL; rows are read back as frozen values.
"""
