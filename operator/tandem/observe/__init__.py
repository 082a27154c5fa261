"""Observation: what the autoscaler sees of a service at one tick.

``types`` holds the frozen observations the policy consumes (pure); the parsers turn
Prometheus text from engines and routers into them (pure); the scrapers fetch that text
from pods or query a Prometheus server (I/O).
"""
