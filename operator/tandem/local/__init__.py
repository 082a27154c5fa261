"""``tandem up``: an InferenceService on this machine, no cluster.

The router runs in-process; each pool's pods are engine processes (``tandem engine sim``,
or real ``vllm serve`` with ``--engine vllm``) started, drained and stopped by a local
actuator; the same observation → policy → actuation loop as the operator sizes the pools,
and the run ends with a summary and, on request, a plot.
"""
