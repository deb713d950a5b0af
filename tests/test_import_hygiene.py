"""The core and the training side never pull in Textual (ARCHITECTURE.md's boundaries)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import cockpit.core


def _modules_loaded_by(modules: list[str]) -> set[str]:
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + "print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_core_never_imports_textual() -> None:
    core = ["cockpit.core"] + [f"cockpit.core.{m.name}" for m in pkgutil.iter_modules(cockpit.core.__path__)]
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
    headless = ["cockpit.cli", "cockpit.commands.run", "cockpit.views.headless", "cockpit.views.frontends",
                "cockpit.core.background", "cockpit.core.session"]  # fmt: skip
    loaded = _modules_loaded_by(headless)
    assert not any(m == "textual" or m.startswith("textual.") for m in loaded)
    assert "torch" not in loaded
