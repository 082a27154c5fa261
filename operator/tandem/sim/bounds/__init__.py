"""What no autoscaler can beat, and the inputs references need: the oracle's lower
bound on GPU-hours, its schedule replayed with foresight, the search for the cheapest
fixed fleet in hindsight, one replica's capacity, and the offline profile Dynamo's
planner reads. Pure.
"""
