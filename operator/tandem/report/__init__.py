"""What a run of a fleet achieved, and its picture: latency percentiles, the SLO test of
one request, and the timeline figure. Pure. Shared by the fleet simulator (virtual time)
and ``tandem up`` (real time), so both report and draw a run the same way.
"""
