"""Helpers of the end-to-end suite that are about Tandem (the harness in ``cluster`` knows
nothing of it): the chart's release, an InferenceService's children, load through the
router with the ``openai`` client. API, HTTP and process I/O.
"""
