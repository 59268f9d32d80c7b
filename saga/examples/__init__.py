"""
Example applications, shipped so that they run after ``pip install``.

- ``saga.examples.approvals``: the README's approval saga (``--app saga.examples.approvals:app``).
- ``saga.examples.enrollment``: course enrollment with an e-signature provider, its own tables,
  reconciliation and invariants, the worked example of docs/applications.md
  (``--app saga.examples.enrollment:app``); the provider's port and its sandbox are
  ``saga.examples.enrollment_esign``.

Both are written with the public API only (``saga`` and its namespaces, docs/api.md), as a
user's would be.
"""
