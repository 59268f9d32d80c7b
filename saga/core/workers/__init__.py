"""
Workers: the loop that claims and runs jobs, and its supervisor.

Also a fleet of real worker processes that a fault harness can kill and pause.
"""
