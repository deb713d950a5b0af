"""The GPU panel: utilization and memory over the last minute, and one phase lane per job below
them on the same time axis, so a training burst lines up with the job that caused it."""

from __future__ import annotations

import math

from rich.style import Style
from rich.text import Text

from cockpit.core.feed import WINDOW_S, Frame
from cockpit.core.state import JobView
from cockpit.views.tui.lines import FramePanel
from cockpit.views.tui.timeaxis import LaneCells, bar_rows, bucket_max
from cockpit.views.units import GIB, num

LABEL_W = 5
UTIL_ROWS = 3
SETTLE_S = 2.0  # phase events reach a viewer within a poll or two; older buckets no longer change
PHASE_CHARS = {"rollout": "░", "train": "█"}


def lane_jobs(frame: Frame) -> list[JobView]:
    """The jobs that get a lane: those running now, and those that ran within the window."""
    return [job for job in frame.state.jobs
            if job.state.live or any(phase for _, phase in frame.phases.get(job.id, ()))]  # fmt: skip


def label_width(frame: Frame) -> int:
    """The label column: `LABEL_W`, or wider for longer job ids (a fleet's agent ids: a0007)."""
    return max([LABEL_W, *(len(job.id) + 1 for job in frame.state.jobs)])


def rows_needed(frame: Frame) -> int:
    """Content rows to show every lane."""
    fixed = 2 + (UTIL_ROWS + 1 if frame.state.gpu is not None else 1)
    return fixed + max(1, len(lane_jobs(frame)))


class GpuPanel(FramePanel):
    """Renders the newest `Frame` given to `show()`; owns no run state."""

    COMPONENT_CLASSES = {"gpu--util", "gpu--mem", "gpu--label", "gpu--title", "lane--rollout", "lane--train"}  # noqa: RUF012

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
        if state.gpu is None:
            lines.append(Text("No GPU: CPU training", style=self._style("gpu--title")))
            lines.append(Text(state.gpu_status or "no GPU telemetry", style=label))
        else:
            parts: list[str] = []
            if gpu is not None:
                mem = f"{gpu.mem_used_bytes / GIB:.1f}/{gpu.mem_total_bytes / GIB:.1f} GiB"
                parts = [f"{num(gpu.util_percent)}%", mem, f"{num(gpu.power_w)} W", f"{num(gpu.temperature_c)} °C"]
            name = state.gpu.name.removeprefix("NVIDIA ").removeprefix("GeForce ")
            # A narrow panel (beside the trend panel at 100 columns) keeps the GPU's name whole and
            # drops temperature, then power; utilization and memory always stay.
            while len(parts) > 2 and len(name) + sum(2 + len(part) for part in parts) > self.size.width:
                parts.pop()
            figures = "".join(f"  {part}" for part in parts)
            room = self.size.width - len(figures)
            head = Text(name[: max(0, room)], style=self._style("gpu--title")).append(figures)
            head.truncate(self.size.width, overflow="ellipsis")
            lines.append(head)
            util_points: list[tuple[float, float]] = []
            mem_points: list[tuple[float, float]] = []
            for s in frame.samples:
                if s.util_samples:
                    util_points.extend(s.util_samples)
                elif s.gpu is not None and s.gpu.util_percent is not None:
                    util_points.append((s.t, s.gpu.util_percent))
                if s.gpu is not None:
                    mem_points.append((s.t, s.gpu.mem_used_bytes))
            util_points.sort()
            for i, row in enumerate(bar_rows(bucket_max(util_points, left, right, width), UTIL_ROWS, 100.0)):
                line = Text(f"{'util' if i == 0 else '':<{label_w}}", style=label)
                lines.append(line.append(row, style=self._style("gpu--util")))
            mem_total = float(state.gpu.memory_total_bytes)
            mem_row = bar_rows(bucket_max(mem_points, left, right, width), 1, mem_total)[0]
            lines.append(Text(f"{'mem':<{label_w}}", style=label).append(mem_row, style=self._style("gpu--mem")))
        lines.extend(self._lanes(frame, left, right, width, self.size.height - len(lines) - 1, label_w))
        axis = Text(f"{'':{label_w}}-{WINDOW_S:.0f}s", style=label)
        axis.append("  lanes: ", style=label).append("░ rollout", style=self._style("lane--rollout"))
        axis.append(" ").append("█ train", style=self._style("lane--train"))
        if axis.cell_len + 4 <= label_w + width:  # a narrow panel keeps the legend and drops "now"
            axis.pad_right(label_w + width - axis.cell_len - 3)
            axis.append("now", style=label)
        lines.append(axis)
        width = self.size.width
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return lines

    def _lanes(self, frame: Frame, left: float, right: float, width: int, rows: int, label_w: int) -> list[Text]:
        """One lane per live job, as many as fit; the rest are counted."""
        live = lane_jobs(frame)
        # Only the jobs with a lane keep their cells: a fleet's agents come and go by the hundred.
        self._lane_cells = {job.id: self._lane_cells[job.id] for job in live if job.id in self._lane_cells}
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
