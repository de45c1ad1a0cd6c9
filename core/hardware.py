"""NVL72 hardware constants, defined once: every layer (engine, parsers, models, renderers) reads them here.

A GB200/GB300 NVL72 rack is one NVLink domain of 18 compute trays with 4 GPUs each; GPUs in the rack's
default (uncarved) NVLink partition report clique ID 32766, NMX-M's default partition id.
"""

TRAYS_PER_RACK = 18
GPUS_PER_TRAY = 4
GPUS_PER_RACK = TRAYS_PER_RACK * GPUS_PER_TRAY
DEFAULT_CLIQUE_ID = 32766
MAX_CLIQUE_ID = 32766
# The highest clique ID a node may report (NVML's is 15 bits); partitions use at most MAX_CLIQUE_ID.
MAX_REPORTED_CLIQUE_ID = 32767
