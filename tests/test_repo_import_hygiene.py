"""The core and the training side never pull in Textual (docs/architecture.md's boundaries), and no
module of cockpit imports itself back through others."""

from __future__ import annotations

import graphlib
import pkgutil
import subprocess
import sys

import grimp

import cockpit.core


def _modules_loaded_by(modules: list[str]) -> set[str]:
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + "print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_core_never_imports_textual() -> None:
    core = ["cockpit.core"] + [m.name for m in pkgutil.walk_packages(cockpit.core.__path__, "cockpit.core.")]
    assert "cockpit.core.session.run_session" in core  # the walk reaches into the packages
    loaded = _modules_loaded_by(core)
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)


def test_training_never_imports_textual_or_the_tui() -> None:
    loaded = _modules_loaded_by(
        [
            "cockpit_training.worker",
            "cockpit_training.callback",
            "cockpit_training.envpool_vec",
            "cockpit_training.checkpoints",
            "cockpit_training.envs",
        ]
    )
    assert not any(m.startswith(("textual", "cockpit.views.tui")) for m in loaded)


def test_worker_module_defers_torch_until_thread_limits_are_set() -> None:
    loaded = _modules_loaded_by(["cockpit_training.worker"])
    assert "torch" not in loaded and "numpy" not in loaded


def test_the_headless_path_loads_neither_textual_nor_torch() -> None:
    # A headless run over ssh must not pay for the TUI, and the supervising process must not
    # carry torch's memory: only the workers train.
    headless = ["cockpit.cli", "cockpit.commands.run", "cockpit.views.headless", "cockpit.views.terminal",
                "cockpit.core.session.background", "cockpit.core.session.run_session"]  # fmt: skip
    loaded = _modules_loaded_by(headless)
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)
    assert "torch" not in loaded


def test_no_import_cycle_among_cockpits_modules() -> None:
    # The layers contracts (pyproject.toml) order the packages; this catches a circle inside one,
    # such as the advisor and the fleet projection importing each other, which they once did.
    graph = grimp.build_graph("cockpit", "cockpit_training")
    imports = {m: {d for d in graph.find_modules_directly_imported_by(m) if d in graph.modules} for m in graph.modules}
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


def test_run_fleet_and_attach_reach_core_through_the_front_door() -> None:
    # The commands that start or show a run parse, call core.session.start (attach: its light half,
    # front_ends.watch_run) with a front end and present: wiring the session by hand would pass it by.
    graph = grimp.build_graph("cockpit")
    doors = {
        "cockpit.commands.run": "start",
        "cockpit.commands.fleet": "start",
        "cockpit.commands.attach": "front_ends",
    }
    for command, door in doors.items():
        core = {d for d in graph.find_modules_directly_imported_by(command) if d.startswith("cockpit.core.")}
        assert f"cockpit.core.session.{door}" in core, command


def test_every_command_imports_at_most_five_modules_of_core() -> None:
    # A command parses, calls core and presents: one that imports more of core than that is doing
    # core's work itself (wiring a session, running a search, assembling a report).
    graph = grimp.build_graph("cockpit")
    commands = sorted(m for m in graph.find_children("cockpit.commands"))
    assert "cockpit.commands.tune" in commands and "cockpit.commands.report" in commands  # the walk finds them
    for command in commands:
        core = {d for d in graph.find_modules_directly_imported_by(command) if d.startswith("cockpit.core.")}
        assert len(core) <= 5, f"{command} imports {len(core)} modules of cockpit.core: {sorted(core)}"
