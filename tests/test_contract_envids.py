"""The env-id cache (`cockpit.contract.envids`): a known id is answered without importing envpool or
gymnasium, only ever positively; a corrupt, stale or unwritable cache changes no answer."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from cockpit.contract import envids
from cockpit.contract.envids import UnknownEnvError, backend_for

# Run in a fresh interpreter: prints each id's backend, then whether either library got imported.
LOOKUP = """
import sys
from cockpit.contract.envids import backend_for
print(*[backend_for(env_id) for env_id in sys.argv[1:]])
print("envpool" in sys.modules, "gymnasium" in sys.modules)
"""


def lookup(cache_home: Path, *env_ids: str) -> tuple[list[str], bool]:
    """Each id's backend in a fresh interpreter whose cache is under `cache_home`, and whether that
    interpreter imported envpool or gymnasium."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run([sys.executable, "-c", LOOKUP, *env_ids], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    backends, imported = done.stdout.splitlines()
    return backends.split(), imported != "False False"


def entries(cache_home: Path) -> dict[str, dict[str, list[str]]]:
    data = json.loads((cache_home / "cockpit" / "envids.json").read_text())
    assert data["format"] == envids.CACHE_FORMAT
    return data["entries"]


# One pytest-xdist worker runs the module: its tests share the module's filled cache.
pytestmark = pytest.mark.xdist_group("envids_cache")


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache home whose cache a first, fresh lookup filled (it imports both libraries, once)."""
    home = tmp_path_factory.mktemp("envids-cache")
    assert lookup(home, "CartPole-v1") == (["envpool"], True)
    return home


@pytest.fixture
def cache_home(filled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the filled cache that this test may change, and this process's XDG_CACHE_HOME."""
    (tmp_path / "cockpit").mkdir()
    (tmp_path / "cockpit" / "envids.json").write_bytes((filled / "cockpit" / "envids.json").read_bytes())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def with_ghost(cache_home: Path, key: str) -> None:
    """Add an id neither library has to envpool's ids in the entry for `key`: only the cache can
    make it known, so answering it shows the cache was read."""
    data = json.loads((cache_home / "cockpit" / "envids.json").read_text())
    entry = next(iter(data["entries"].values()))
    data["entries"] = {key: {**entry, "envpool": [*entry["envpool"], "Ghost-v0"]}}
    (cache_home / "cockpit" / "envids.json").write_text(json.dumps(data))


def test_a_second_fresh_process_answers_known_ids_without_importing_either_library(filled: Path) -> None:
    assert list(entries(filled)) == [envids.cache_key()]
    # Taxi-v4 is gymnasium's alone; CartPole-v1 both have, and envpool wins as without a cache.
    assert lookup(filled, "CartPole-v1", "Taxi-v4") == (["envpool", "gymnasium"], False)


def test_the_cache_is_read_in_process_and_a_version_change_ignores_it(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_ghost(cache_home, envids.cache_key())
    assert backend_for("Ghost-v0") == "envpool"

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "9.9.9" if d == "envpool" else real(d))
    envids.cache_key.cache_clear()
    try:
        assert "envpool 9.9.9" in envids.cache_key()
        with pytest.raises(UnknownEnvError):
            backend_for("Ghost-v0")
    finally:
        envids.cache_key.cache_clear()


def test_an_entry_for_other_versions_is_ignored_and_the_fresh_import_adds_its_own(cache_home: Path) -> None:
    other = envids.cache_key().replace("| envpool ", "| envpool 0.0.1-was-")
    with_ghost(cache_home, other)
    # The ghost is in the other versions' entry only, so this Python asks the libraries, which lack it.
    done = subprocess.run([sys.executable, "-c", LOOKUP, "Ghost-v0"], capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode != 0 and "Ghost-v0" in done.stderr and "neither envpool nor gymnasium" in done.stderr
    assert list(entries(cache_home)) == [other, envids.cache_key()]  # the other entry kept, ours added
    assert lookup(cache_home, "CartPole-v1") == (["envpool"], False)


def test_a_corrupt_cache_is_ignored_and_rewritten(cache_home: Path) -> None:
    path = cache_home / "cockpit" / "envids.json"
    path.write_text('{"format": 1, "entries": {"half a')
    assert lookup(cache_home, "CartPole-v1") == (["envpool"], True)
    assert list(entries(cache_home)) == [envids.cache_key()]
    assert lookup(cache_home, "CartPole-v1") == (["envpool"], False)


def test_an_unwritable_cache_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert lookup(blocker, "CartPole-v1", "Taxi-v4") == (["envpool", "gymnasium"], True)  # no error either


def test_an_unknown_id_still_gets_the_suggestions(cache_home: Path) -> None:
    with pytest.raises(UnknownEnvError) as raised:
        backend_for("CartPol-v1", source="'agents.env'")
    message = str(raised.value)
    assert message.startswith("'agents.env' 'CartPol-v1': neither envpool nor gymnasium has this environment")
    assert "did you mean CartPole-v1" in message


def test_an_id_registered_at_run_time_is_found_though_the_cache_lacks_it(cache_home: Path) -> None:
    env_id = "CockpitTestOnly-v0"
    assert all(env_id not in entry[b] for entry in entries(cache_home).values() for b in envids.BACKENDS)
    gym.register(id=env_id, entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        assert backend_for(env_id) == "gymnasium"
    finally:
        del gym.registry[env_id]
    with pytest.raises(UnknownEnvError):
        backend_for(env_id)


def test_ids_registered_before_the_lookup_never_reach_the_cache(tmp_path: Path) -> None:
    registers = """
import gymnasium as gym
gym.register(id="CockpitTestOnly-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
from cockpit.contract.envids import backend_for
print(backend_for("CockpitTestOnly-v0"))
"""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", registers], env=env, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "gymnasium\n"), done.stderr
    assert lookup(tmp_path, "CartPole-v1") == (["envpool"], True)  # this fresh process fills the cache
    assert all("CockpitTestOnly-v0" not in entry[b] for entry in entries(tmp_path).values() for b in envids.BACKENDS)


def test_an_unknown_id_without_close_ones_points_at_the_module_form(cache_home: Path) -> None:
    with pytest.raises(UnknownEnvError) as raised:
        backend_for("Qqzzxx-v0")
    assert str(raised.value).endswith("or module:EnvId-v0 for an env a module of yours registers")
