"""Generic controller machinery, on Kopf and :mod:`tandem.kube`: the object cache, the work
queue, periodic tickers, Lease leadership, Event posting, conditional status writes,
condition merging, the HTTP endpoints, log records, Kopf's settings and the controller's
metrics. Tandem's own reconcile and autoscale (:mod:`tandem.control`) are built on it;
nothing here knows what an InferenceService becomes.
"""
