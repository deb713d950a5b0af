"""The GPU panel: utilization ("busy": the share of time any kernel ran, see
`cockpit.core.machine.util_reading.BUSY_LEGEND`) and memory over the last minute, and one phase lane per job below
them on the same time axis, so a training burst lines up with the job that caused it.

On a machine of several GPUs it has a section per GPU: its name, utilization and memory now, one
row of each over the minute, and the lanes of the jobs placed on it, so a GPU's bursts line up with
its own jobs. One GPU looks as it always did.

A GPU whose compute mode bounds its jobs says so after its memory ("exclusive-process": one job
on it unless the jobs are MPS clients; "prohibited": none), or, where the head line has no room,
one GPU on a line of its own below its bars; the default mode is not shown."""

from __future__ import annotations

import math

from rich.style import Style
from rich.text import Text

from cockpit.core.feed.snapshot import JobView
from cockpit.core.feed.source import WINDOW_S, Frame
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.machine.util_reading import BUSY, util_read
from cockpit.formatting import GIB, compute_mode, num, used_of
from cockpit.views.tui.lines_widget import FramePanel
from cockpit.views.tui.timeaxis import LaneCells, bar_rows, bucket_max

LABEL_W = 5
UTIL_ROWS = 3
GPU_ROWS = 3  # a section of a machine of several GPUs: its head line, one util row and one mem row
SETTLE_S = 2.0  # phase events reach a viewer within a poll or two; older buckets no longer change
# `score`: a fleet's agent evaluated at its tier's end; in the legend only while a lane shows one.
PHASE_CHARS = {"rollout": "░", "train": "█", "score": "▒"}


def lane_jobs(frame: Frame, gpu: int | None = None) -> list[JobView]:
    """The jobs that get a lane: those running now, and those that ran within the window (with
    `gpu`, of those on that GPU)."""
    jobs = frame.state.jobs if gpu is None else frame.state.jobs_on(gpu)
    return [job for job in jobs if job.state.live or any(phase for _, phase in frame.phases.get(job.id, ()))]


def label_width(frame: Frame) -> int:
    """The label column: `LABEL_W`, or wider for longer job ids (a fleet's agent ids: a0007)."""
    return max([LABEL_W, *(len(job.id) + 1 for job in frame.state.jobs)])


def rows_needed(frame: Frame) -> int:
    """Content rows to show every lane."""
    gpus = frame.state.gpus
    if len(gpus) > 1:  # each GPU's section, then the time axis
        return 1 + sum(GPU_ROWS + max(1, len(lane_jobs(frame, gpu.index))) for gpu in gpus)
    gpu = frame.state.gpu
    # A compute mode that bounds the jobs may need a line of its own (`GpuPanel.lines`).
    fixed = 2 + (UTIL_ROWS + 1 + bool(compute_mode(gpu.compute_mode)) if gpu is not None else 1)
    return fixed + max(1, len(lane_jobs(frame)))


def gpu_series(frame: Frame, index: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """GPU `index`'s utilization (every NVML reading, else each tick's mean) and memory in use
    over the frame's samples, as (Unix time, value), sorted."""
    util_points: list[tuple[float, float]] = []
    mem_points: list[tuple[float, float]] = []
    for s in frame.samples:
        g = s.gpu_of(index)
        readings = s.gpu_util().get(index, ())
        if readings:
            util_points.extend(readings)
        elif g is not None and g.util_percent is not None:
            util_points.append((s.t, g.util_percent))
        if g is not None and g.mem_used_bytes is not None:
            mem_points.append((s.t, g.mem_used_bytes))
    util_points.sort()
    return util_points, mem_points


class GpuPanel(FramePanel):
    """Renders the newest `Frame` given to `show()`; owns no run state."""

    COMPONENT_CLASSES = {  # noqa: RUF012
        "gpu--util",
        "gpu--mem",
        "gpu--label",
        "gpu--title",
        "lane--rollout",
        "lane--train",
        "lane--score",
    }

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._lane_cells: dict[str, LaneCells] = {}

    def _style(self, name: str) -> Style:
        return self.component_style(name)

    def lines(self) -> list[Text]:
        frame = self._frame
        if frame is None:
            return [Text("waiting for the run's first sample…")]
        state = frame.state
        label_w = label_width(frame)
        width = max(8, self.size.width - label_w)
        # Buckets sit on fixed multiples of their width, not on "now": a column keeps its moment as
        # time passes, so the picture slides a whole column at a time instead of shimmering.
        step = WINDOW_S / width
        right = (math.floor(state.now / step) + 1) * step
        left = right - WINDOW_S
        label = self._style("gpu--label")
        lines: list[Text] = []
        sample = state.sample
        gpu = sample.gpu if sample is not None else None
        if len(state.gpus) > 1:
            lines = self._sections(frame, left, right, width, label_w)
        elif state.gpu is None:
            lines.append(Text("No GPU: CPU training", style=self._style("gpu--title")))
            lines.append(Text(state.gpu_status or "no GPU telemetry", style=label))
        else:
            head = self._head(state.gpu, gpu)
            lines.append(head)
            lines.extend(self._bars(frame, state.gpu, left, right, width, label_w, UTIL_ROWS))
            mode = compute_mode(state.gpu.compute_mode)
            if mode and compute_mode(state.gpu.compute_mode, short=True) not in head.plain and mode not in head.plain:
                lines.append(Text(f"compute mode: {mode}", style=label))  # no room for it in the head line
        if state.gpu is not None and state.gpu_status:  # the sampler's conditions: stale, hidden pids, lost
            lines.append(Text(state.gpu_status, style=label))
        if len(state.gpus) <= 1:
            rows = self.size.height - len(lines) - 1
            lines.extend(self._lanes(frame, lane_jobs(frame), left, right, width, rows, label_w))
        scoring = any(phase == "score" for transitions in frame.phases.values() for _, phase in transitions)
        # The third entry (a fleet scoring) fits a narrow panel without the word "lanes:".
        lead = "  " if scoring and label_w + width < 50 else "  lanes: "
        axis = Text(f"{'':{label_w}}-{WINDOW_S:.0f}s", style=label)
        axis.append(lead, style=label).append("░ rollout", style=self._style("lane--rollout"))
        axis.append(" ").append("█ train", style=self._style("lane--train"))
        if scoring:
            axis.append(" ").append("▒ score", style=self._style("lane--score"))
        if axis.cell_len + 4 <= label_w + width:  # a narrow panel keeps the legend and drops "now"
            axis.pad_right(label_w + width - axis.cell_len - 3)
            axis.append("now", style=label)
        lines.append(axis)
        width = self.size.width
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return lines

    def _head(self, info: GpuInfo, gpu: GpuSample | None, index: str = "") -> Text:
        """A GPU's name and its figures now; a narrow panel (beside the trend panel at 100
        columns) keeps the name whole and drops temperature, then power, then how utilization is
        read (`util_read`), then writes a compute mode that bounds the jobs
        (`formatting.compute_mode`) as nvidia-smi abbreviates it, then drops it, then shows memory
        in whole GiB: "busy" (`BUSY_LEGEND`) and memory always stay. `index` ("0 ") leads it on a
        machine of several GPUs."""
        parts: list[str] = []
        mode = compute_mode(info.compute_mode)
        if gpu is not None:
            mem = used_of(gpu.mem_used_bytes, gpu.mem_total_bytes, GIB)
            read = util_read(gpu.util_mode, gpu.sample_period_s)
            parts = [
                f"{BUSY} {num(gpu.util_percent)}%",
                mem,
                *([mode] if mode else []),
                *([read] if read else []),
                f"{num(gpu.power_w)} W",
                f"{num(gpu.temperature_c)} °C",
            ]
        elif mode:
            parts = [mode]
        name = index + info.name.removeprefix("NVIDIA ").removeprefix("GeForce ")

        def too_wide() -> bool:
            return len(name) + sum(2 + len(part) for part in parts) > self.size.width

        while len(parts) > 2 and too_wide():
            if mode and parts[-1] == mode and mode != compute_mode(info.compute_mode, short=True):
                parts[-1] = mode = compute_mode(info.compute_mode, short=True)
                continue
            parts.pop()
        if gpu is not None and too_wide():
            parts[1] = used_of(gpu.mem_used_bytes, gpu.mem_total_bytes, GIB, digits=0)
        figures = "".join(f"  {part}" for part in parts)
        room = self.size.width - len(figures)
        head = Text(name[: max(0, room)], style=self._style("gpu--title")).append(figures)
        head.truncate(self.size.width, overflow="ellipsis")
        return head

    def _bars(
        self, frame: Frame, info: GpuInfo, left: float, right: float, width: int, label_w: int, util_rows: int
    ) -> list[Text]:
        """A GPU's utilization (`util_rows` rows) and memory (one row) over the window."""
        label = self._style("gpu--label")
        util_points, mem_points = gpu_series(frame, info.index)
        lines = []
        for i, row in enumerate(bar_rows(bucket_max(util_points, left, right, width), util_rows, 100.0)):
            line = Text(f"{BUSY if i == 0 else '':<{label_w}}", style=label)
            lines.append(line.append(row, style=self._style("gpu--util")))
        mem_label = Text(f"{'mem':<{label_w}}", style=label)
        if info.memory_total_bytes is None:  # unified memory: NVML has no figure to draw
            lines.append(mem_label.append("- (NVML gives no memory figures for this GPU)"))
            return lines
        mem_row = bar_rows(bucket_max(mem_points, left, right, width), 1, float(info.memory_total_bytes))[0]
        lines.append(mem_label.append(mem_row, style=self._style("gpu--mem")))
        return lines

    def _sections(self, frame: Frame, left: float, right: float, width: int, label_w: int) -> list[Text]:
        """A section per GPU: its head, a util and a mem row, and the lanes of its jobs; the rows
        left for lanes go a row at a time to the GPUs whose jobs still lack one."""
        state = frame.state
        sample = state.sample
        lanes = [lane_jobs(frame, gpu.index) for gpu in state.gpus]
        self._keep_cells([job for jobs in lanes for job in jobs])
        rows = [1] * len(lanes)
        spare = self.size.height - 1 - (GPU_ROWS + 1) * len(lanes)
        while spare > 0 and any(len(jobs) > n for jobs, n in zip(lanes, rows, strict=True)):
            for i, jobs in enumerate(lanes):
                if spare > 0 and len(jobs) > rows[i]:
                    rows[i] += 1
                    spare -= 1
        lines: list[Text] = []
        for info, jobs, n in zip(state.gpus, lanes, rows, strict=True):
            lines.append(self._head(info, sample.gpu_of(info.index) if sample is not None else None, f"{info.index} "))
            lines.extend(self._bars(frame, info, left, right, width, label_w, 1))
            lines.extend(self._lanes(frame, jobs, left, right, width, n, label_w, keep=False))
        return lines

    def _keep_cells(self, jobs: list[JobView]) -> None:
        # Only the jobs with a lane keep their cells: a fleet's agents come and go by the hundred.
        self._lane_cells = {job.id: self._lane_cells[job.id] for job in jobs if job.id in self._lane_cells}

    def _lanes(
        self,
        frame: Frame,
        live: list[JobView],
        left: float,
        right: float,
        width: int,
        rows: int,
        label_w: int,
        *,
        keep: bool = True,
    ) -> list[Text]:
        """One lane for each job of `live`, as many as fit; the rest are counted. `keep`: these
        are every lane, and the cells of jobs without one are dropped."""
        if keep:
            self._keep_cells(live)
        if rows <= 0:
            return []
        shown = live if len(live) <= rows else live[: rows - 1]
        styles = {phase: self._style(f"lane--{phase}") for phase in PHASE_CHARS}
        out = []
        for job in shown:
            lane_cells = self._lane_cells.setdefault(job.id, LaneCells())
            now = frame.state.now
            cells = lane_cells.cells(frame.phases.get(job.id, ()), left, right, width, end=now, settled=now - SETTLE_S)
            lane = Text(f"{job.id:<{label_w}}", style=self._style("gpu--label"))
            run_start = 0
            for i in range(1, width + 1):
                if i == width or cells[i] != cells[run_start]:
                    phase = cells[run_start]
                    char = PHASE_CHARS.get(phase or "", " ")
                    lane.append(char * (i - run_start), style=styles.get(phase or "", Style()))
                    run_start = i
            out.append(lane)
        if len(shown) < len(live):
            out.append(Text(f"+{len(live) - len(shown)} more jobs", style=self._style("gpu--label")))
        if not live:
            out.append(Text("no job running", style=self._style("gpu--label")))
        return out
