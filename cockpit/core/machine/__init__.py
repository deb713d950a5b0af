"""The machine the cockpit runs on, and nothing above it.

- `host`: cores, memory, the CPU's model, and each job's thread budget and pinned cores;
- `nvml`: every GPU through NVML (the one module that imports `pynvml`), and what to do without one;
- `gpu_types`: what NVML's readings become, as data: `GpuInfo`, `GpuSample` and the names of a
  utilization read and a compute mode, for modules that never touch the driver;
- `visibility`: pure: which of NVML's GPUs the cockpit may use, by its own `CUDA_VISIBLE_DEVICES`;
- `util_reading`: what the utilization figure is ("busy") and how it was read, in words;
- `placement`: pure: which GPU a job's worker runs on, and how many jobs of a size fit;
- `mps_daemon`: NVIDIA's Multi-Process Service: whether `--mps` may run here, and its control
  daemon's life;
- `tempdirs`: temporary directories named by their owner, so a killed owner's can be removed;
- `clock`: the injectable clock that tests move by hand.

Imports nothing else of `cockpit.core`.
"""
