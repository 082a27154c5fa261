"""``tandem profile``: measure a vLLM-compatible engine, fit the engine model to it, and
say what one replica can do.

- :mod:`~tandem.profile.plan` — the sweep and the prompts (pure);
- :mod:`~tandem.profile.measure` — sending it and timing every request (HTTP);
- :mod:`~tandem.profile.points` — what a point measured, percentiles (pure);
- :mod:`~tandem.profile.fit` — the cost model fitted to the points, predictions (pure);
- :mod:`~tandem.profile.block` — the InferenceService's pool ``profile`` block (pure);
- :mod:`~tandem.profile.architecture` — the served model's shape (pure);
- :mod:`~tandem.profile.document` — the JSON document and the summary (pure);
- :mod:`~tandem.profile.figure` — measured against modelled, as a PNG;
- :mod:`~tandem.profile.run` — one run, start to end (HTTP, files, progress bar).
"""
