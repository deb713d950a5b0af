"""The CPU panel: every core, then each job's CPU % against its share of the thread budget. On a
Ray cluster (`Sample.nodes`), the same per node: its cores in one strip, then the jobs it runs."""

from __future__ import annotations

from rich.text import Text

from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.feed.source import Frame
from cockpit.formatting import GIB, num
from cockpit.views.tui.lines_widget import FramePanel
from cockpit.views.tui.timeaxis import bar_rows, hbar

LABEL_W = 6
CORE_ROWS_MAX = 4  # more cores than this are drawn as a strip of vertical bars


def rows_needed(frame: Frame) -> int:
    """Content rows to show every core and every live job (every node's, on a cluster)."""
    sample = frame.state.sample
    live = sum(1 for job in frame.state.jobs if job.cpu_percent is not None)
    if sample is not None and sample.nodes:
        return 2 + 2 * len(sample.nodes) + (1 + live if live else 0)
    cores = len(sample.cpu_percent) if sample is not None else 0
    core_rows = cores if 1 < cores <= CORE_ROWS_MAX else (2 if cores > 1 else 0)
    return 2 + core_rows + (1 + live if live else 0)


class CpuPanel(FramePanel):
    """Renders the newest `Frame` given to `show()`; owns no run state."""

    COMPONENT_CLASSES = {"cpu--bar", "cpu--over", "cpu--label", "cpu--title"}  # noqa: RUF012

    def lines(self) -> list[Text]:
        frame = self._frame
        if frame is None or frame.state.sample is None:
            return [Text("CPU: waiting for the first sample…")]
        state, sample = frame.state, frame.state.sample
        label = self.component_style("cpu--label")
        bar = self.component_style("cpu--bar")
        # Wider labels for longer job ids (a fleet's agent ids: a0007).
        label_w = max([LABEL_W, *(len(job.id) + 1 for job in state.jobs)])
        width = max(4, self.size.width - label_w - 5)
        ram = f"RAM {sample.ram_used_bytes / GIB:.1f}/{sample.ram_total_bytes / GIB:.1f} GiB"
        title = self.component_style("cpu--title")
        lines = [Text(f"CPU {sample.cpu_total_percent:.0f}%  {ram}", style=title)]
        if state.threads_per_job:
            budget = f"budget {state.threads_per_job} thread(s)/job, {state.physical_cores} cores"
            lines.append(Text(budget, style=label))
        cores = sample.cpu_percent
        live = [job for job in state.jobs if job.cpu_percent is not None]
        if sample.nodes:
            return self._fit(lines + self._by_node(state, live, label_w, width))
        if 1 < len(cores) <= CORE_ROWS_MAX:
            for i, pct in enumerate(cores):
                line = Text(f"{'c' + str(i):<{label_w}}", style=label).append(hbar(pct / 100, width), style=bar)
                lines.append(line.append(f"{pct:4.0f}%"))
        elif len(cores) > 1:
            # Too many cores for a row each: one column per core, two rows tall.
            for i, row in enumerate(bar_rows(list(cores), 2, 100.0)):
                head = Text(f"{'cores' if i == 1 else '':<{label_w}}", style=label)
                lines.append(head.append(row, style=bar))
        if live:
            lines.append(Text("jobs: % of a core, bar = budget", style=label))
        room = self.size.height - len(lines)
        shown = live if len(live) <= room else live[: max(0, room - 1)]
        lines += [self._job_line(state, job, label_w, width) for job in shown]
        if len(shown) < len(live):
            lines.append(Text(f"+{len(live) - len(shown)} more jobs", style=label))
        return self._fit(lines)

    def _fit(self, lines: list[Text]) -> list[Text]:
        width = self.size.width
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        return lines

    def _job_line(self, state: RunState, job: JobView, label_w: int, width: int) -> Text:
        """A job's CPU % against its thread budget."""
        pct = job.cpu_percent or 0.0
        budget = 100.0 * (state.threads_per_job or 1)
        line = Text(f"{job.id:<{label_w}}", style=self.component_style("cpu--label"))
        style = self.component_style("cpu--over" if pct > budget * 1.05 else "cpu--bar")
        return line.append(hbar(pct / budget, width), style=style).append(f"{num(pct):>4}%")

    def _by_node(self, state: RunState, live: list[JobView], label_w: int, width: int) -> list[Text]:
        """Each node of the cluster: its CPU, memory and GPU, its cores in a strip, and its jobs."""
        assert state.sample is not None
        label, title = self.component_style("cpu--label"), self.component_style("cpu--title")
        bar = self.component_style("cpu--bar")
        lines = []
        for node in state.sample.nodes:
            gpu = f"  GPU {num(node.gpu_util_percent)}%" if node.gpu_util_percent is not None else ""
            ram = f"RAM {node.ram_used_bytes / GIB:.1f}/{node.ram_total_bytes / GIB:.1f} GiB"
            lines.append(Text(f"{node.node}  CPU {node.cpu_total_percent:.0f}%  {ram}{gpu}", style=title))
            (strip,) = bar_rows(list(node.cpu_percent), 1, 100.0)
            lines.append(Text(f"{'cores':<{label_w}}", style=label).append(strip, style=bar))
            lines += [self._job_line(state, job, label_w, width) for job in live if job.node == node.node]
        return lines
