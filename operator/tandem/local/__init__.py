"""``tandem up``: an InferenceService on this machine, no cluster.

The router runs in-process; each pool's pods are ``tandem engine sim`` processes started
and stopped by a local actuator (cold start modelled by the engine's start-up delay);
the same observation → policy → actuation loop as the operator sizes the pools.
"""
