"""The simulated fleet: a discrete-event model of pods, router and Deployments. Pure.

Only events move time (:mod:`~tandem.sim.fleet.events`); handlers return the events they
cause. :class:`~tandem.sim.fleet.simulation.Simulation` runs one trace through the fleet a
:class:`~tandem.sim.fleet.spec.FleetPlan` describes: pods stepping the engine model,
the router's own selection, KV hand-off, cold starts, drains, and the metrics the
operator would scrape, under one autoscaler.
"""
