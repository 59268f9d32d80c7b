"""
The engine core: store, queue and workers, sagas, timers, reconciliation, operations.

It knows no domain: no seats, no payments.  Applications (the purchase in
:mod:`saga.purchase`, or yours) bring their saga kinds, steps, jobs and
invariants through :class:`saga.core.app.Application`.
"""
