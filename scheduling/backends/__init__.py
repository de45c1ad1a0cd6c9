"""Adapters that push Rackplane's state to the schedulers (Slurm, Kubernetes): render, diff, apply, read back.

Only these adapters run subprocesses or talk to a scheduler; their renderers are pure functions.
"""
