"""One trace, several autoscalers, the same fleet: the runs ``tandem simulate`` makes,
what each achieved, the best fixed fleet in hindsight, whether Tandem met its goal, and
their table, JSON and plot.
"""
