"""The GPU verification kit: `prepare.sh` here gathers wheels, `check.sh` on a GPU machine runs the checks.

`check.py` holds the checks and the report, `nvsmi.py` the `nvidia-smi` references they are
compared with, and `measure.py` the arithmetic (per-second utilization, whole-cycle throughput),
which the tests exercise without a GPU. docs/gpu.md says how to run it and keeps its reports.
"""
