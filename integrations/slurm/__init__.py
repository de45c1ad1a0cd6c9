"""Slurm backend: `render` (pure text renderers and parsers) and `target` (SlurmTarget, the adapter)."""
