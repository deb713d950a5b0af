"""The jobs table: a row per job under a stable key, cells rewritten only when they change."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from cockpit.core.state import JobView, RunState
from cockpit.units import mib, num, si

WIDE = 110
# (key, label, shown in the narrow layout, width: fixed so rows do not jump as values grow; None fits the content)
COLUMNS = (
    ("id", "job", True, 3), ("seed", "seed", False, 5), ("env", "env", False, None), ("preset", "preset", False, None),
    ("status", "status", True, 8), ("phase", "phase", True, 7), ("steps", "steps", True, None), ("sps", "SPS", True, 6),
    ("rew", "ep_rew", True, 7), ("restarts", "rst", True, 3), ("gpu", "GPU mem", False, 10), ("cpu", "CPU%", True, 4),
)  # fmt: skip
NUMERIC = ("steps", "sps", "rew", "restarts", "gpu", "cpu")
STATUS_CLASS = {"failed": "error", "backoff": "warning", "done": "success", "stopping": "warning"}


def cells(job: JobView, state: RunState, *, wide: bool) -> dict[str, str | Text]:
    """A job's row, keyed by column."""
    live = job.state in ("running", "stopping")
    steps = f"{job.steps:,}/{job.target:,}" if wide else f"{si(job.steps)}/{si(job.target)}"
    row: dict[str, str | Text] = {
        "id": job.id,
        "seed": str(job.seed),
        "env": state.env,
        "preset": state.preset,
        "status": job.state,
        "phase": job.phase or "",
        "steps": f"{steps} {job.fraction:4.0%}",
        "sps": (num(job.sps) if wide else si(job.sps)) if job.sps is not None and live else "-",
        "rew": num(job.ep_rew_mean, "{:.1f}"),
        "restarts": str(job.restarts),
        "gpu": mib(job.gpu_mem_bytes),
        "cpu": num(job.cpu_percent),
    }
    for key in NUMERIC:
        row[key] = Text(str(row[key]), justify="right")
    return row


class JobsTable(DataTable[str | Text]):
    """Shows `RunState.jobs`; the cursor stays on the same job as rows update."""

    COMPONENT_CLASSES = DataTable.COMPONENT_CLASSES | {"jobs--error", "jobs--warning", "jobs--success"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._wide: bool | None = None
        self._shown: dict[str, dict[str, str | Text]] = {}
        self._state: RunState | None = None

    def on_resize(self) -> None:
        if self._state is not None:
            self.show(self._state)

    @property
    def selected_job(self) -> str | None:
        """The id of the job under the cursor, if any."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def _columns(self, wide: bool) -> None:
        selected = self.selected_job
        self.clear(columns=True)
        self._shown.clear()
        for key, label, narrow, width in COLUMNS:
            if wide or narrow:
                self.add_column(label, key=key, width=width)
        self._wide = wide
        self._reselect = selected

    def show(self, state: RunState) -> None:
        """Add new jobs' rows and rewrite the cells that changed."""
        self._state = state
        wide = self.size.width >= WIDE
        if wide != self._wide:
            self._columns(wide)
        keys = [key for key, _, narrow, _ in COLUMNS if wide or narrow]
        auto = {key for key, _, _, width in COLUMNS if width is None}
        for job in state.jobs:
            row = cells(job, state, wide=wide)
            status_class = STATUS_CLASS.get(job.state)
            if status_class:
                row["status"] = Text(job.state, style=self.get_component_rich_style(f"jobs--{status_class}"))
            before = self._shown.get(job.id)
            if before is None:
                self.add_row(*(row[k] for k in keys), key=job.id)
            else:
                for k in keys:
                    if before[k] != row[k]:
                        self.update_cell(job.id, k, row[k], update_width=k in auto)
            self._shown[job.id] = row
        reselect = getattr(self, "_reselect", None)
        if reselect is not None and reselect in self._shown:
            self.move_cursor(row=self.get_row_index(reselect))
            self._reselect = None
