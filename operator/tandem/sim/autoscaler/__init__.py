"""Driving an autoscaler from the simulated fleet: observations in, decisions out, and
the observation stream recorded for replay (the parity test). Pure.
"""
