"""
Sagas: kinds and their compare-and-set transitions.

Also timers, who may fire what, instances for operators, and money as applications
show it.
"""
