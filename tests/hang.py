"""The hang guard of the tests that wait for a subprocess or a server.

A guard only: it ends a test that hangs, never one that is slow.  Each guarded piece of work takes
at most a few minutes on a loaded 2-core machine (the longest, a wrong adapter's suite with
shrinking, about 3 minutes), and the guard is ten times that.  To show that something is fast, a
test counts (calls, schedules, jobs); speed is measured in bench/.
"""

HANG_GUARD_S = 1800
