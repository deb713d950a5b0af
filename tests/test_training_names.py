"""cockpit's worker and presets never collide with a user's `training` or `presets` package.

cockpit is installed here the regular way (a wheel built from this checkout, `pip install
--target`), not editable: that is what puts files in site-packages, and what a user has. Then:
- a user's own `training` and `presets` packages in the working directory do not replace cockpit's
  worker or its built-in presets under `cockpit run`;
- with cockpit installed, `import training` and `import presets` still find the user's, in their
  own code and in their script under `cockpit run -- python script.py`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.contract.runrecord import read

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("cockpit", "training", "presets", "pyproject.toml", "README.md")
# What the installed tree may hold at its top level: cockpit's own names, and pip's metadata.
OWN_NAMES = {"cockpit", "cockpit_training", "cockpit_presets", "bin"}

USER_PACKAGE = """
from pathlib import Path
Path(__file__).with_name("imported").write_text("the user's {name} package was imported")
MARK = "user's {name}"
"""


# One pytest-xdist worker runs the module: its tests share the module's `installed`, made once.
pytestmark = pytest.mark.xdist_group("test_training_names")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """cockpit installed without -e into a fresh directory (its dependencies are the venv's)."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name)  # type: ignore[operator]
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)  # fmt: skip
    yield target


def user_project(directory: Path) -> Path:
    """A user's project with its own `training` and `presets` packages (each leaves a mark when
    imported), `training.worker` among them."""
    for name in ("training", "presets"):
        package = directory / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(USER_PACKAGE.format(name=name))
    (directory / "training" / "worker.py").write_text("raise SystemExit('the user\\'s training.worker ran')\n")
    return directory


def run_python(cwd: Path, site: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python *args` in `cwd` with the installed cockpit on the path, as a user's shell would have it."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def test_the_install_adds_no_top_level_training_or_presets(installed: Path) -> None:
    names = {p.name for p in installed.iterdir() if not p.name.endswith((".dist-info", ".egg-info"))}
    assert names <= OWN_NAMES, names
    assert {"cockpit", "cockpit_training", "cockpit_presets"} <= names
    assert (installed / "cockpit_presets" / "cartpole.toml").is_file()


def test_a_users_packages_are_the_ones_their_code_imports(installed: Path, tmp_path: Path) -> None:
    elsewhere = user_project(tmp_path / "their_site")  # installed in their own site directory
    code = "import training, presets, cockpit_training; print(training.MARK, presets.MARK, cockpit_training.__file__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(elsewhere)])}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("user's training user's presets ")
    assert result.stdout.split()[-1].startswith(str(installed))


@pytest.mark.slow
def test_a_users_packages_in_the_working_directory_do_not_shadow_the_worker(installed: Path, tmp_path: Path) -> None:
    project = user_project(tmp_path / "project")
    result = run_python(project, installed, "-m", "cockpit", "run", "--headless", "--jobs", "1", "--preset",
                        "cartpole", "--timesteps", "2048", "--run-dir", "run", timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    log = read(project / "run")
    assert log.status == "done" and [job.steps for job in log.jobs] == [2048]
    assert log.preset is not None and log.preset.name == "cartpole"
    assert not (project / "training" / "imported").exists() and not (project / "presets" / "imported").exists()
    # The worker that trained is the installed one.
    stderr = (project / "run" / "jobs" / "000" / "stderr.log").read_text()
    assert "the user's training.worker ran" not in stderr


def test_the_installed_worker_answers_from_a_users_project(installed: Path, tmp_path: Path) -> None:
    project = user_project(tmp_path / "project")
    result = run_python(project, installed, "-m", "cockpit_training.worker", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m cockpit_training.worker" in result.stdout
    assert not (project / "training" / "imported").exists()


@pytest.mark.slow
def test_a_users_script_under_cockpit_imports_its_own_training_package(installed: Path, tmp_path: Path) -> None:
    project = user_project(tmp_path / "project")
    (project / "train.py").write_text("import training, presets\nprint(training.MARK, presets.MARK)\n")
    result = run_python(project, installed, "-m", "cockpit", "run", "--headless", "--run-dir", "run", "--",
                        sys.executable, "train.py", timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "run" / "jobs" / "000" / "stdout.log").read_text() == "user's training user's presets\n"
