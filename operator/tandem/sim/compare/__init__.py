"""One trace, several autoscalers, the same fleet: the runs ``tandem simulate`` makes,
what each achieved, and their table, JSON and plot.
"""
