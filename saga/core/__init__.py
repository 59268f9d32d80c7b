"""
The engine core: store, queue and workers, sagas, timers, reconciliation, operations.

It knows no domain.  Applications (the reference one named by
:data:`saga.settings.DEFAULT_APP`, or yours) bring their saga kinds, steps, jobs and
invariants through :class:`saga.core.app.Application`.
"""
