"""Damaged fleet.db content (a garbled plan, or an agent's, a draw's or a PBT copy's JSON) is one
line naming its table and row, exit 2, before a resume starts anything: never a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.core.fleet.store import Exploit, FleetStore, FleetStoreError

PLAN = """
name = "screen"
jobs = 2
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 4
[[tiers]]
timesteps = 4_000
"""


def fleet_db(run: Path) -> Path:
    """A run dir whose fleet.db records PLAN and its four agents, as `FleetRun.new` does."""
    run.mkdir()
    store = FleetStore.in_run_dir(run)
    store.create(PLAN, str(run / "plan.toml"), [(f"a{i:04d}", i, "CartPole-v1", "cartpole", {}, i) for i in range(4)])
    store.record_draw(0, 0, {"learning_rate": 1e-3}, [])
    store.pbt_boundary(0, [], [Exploit("a0001", 0, "a0000", 4000, "ckpt", {"learning_rate": (1e-3, 8e-4)})])
    store.close()
    return run / "fleet.db"


def damage(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(sql)


@pytest.mark.parametrize(
    ("sql", "names"),
    [
        ("UPDATE agents SET overrides = '{\"learning_rate\": ' WHERE id = 'a0002'",
         "table agents, row id 'a0002': overrides is not JSON"),
        ("UPDATE agents SET overrides = '[1, 2]' WHERE id = 'a0003'",
         "table agents, row id 'a0003': overrides is not a JSON object"),
        ("UPDATE draws SET params = 'nan]' WHERE draw = 0", "table draws, row draw 0: params is not JSON"),
        ("UPDATE lineage SET changes = '{\"learning_rate\": 3}' WHERE agent = 'a0001'",
         "table lineage, row agent 'a0001' tier 0: changes is not {key: [old, new]}"),
        ("UPDATE meta SET value = '[agents' WHERE key = 'plan'", "table meta, row 'plan': not TOML"),
    ],
)  # fmt: skip
def test_a_damaged_row_stops_a_resume_in_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: str, names: str
) -> None:
    run = tmp_path / "run"
    db = fleet_db(run)
    damage(db, sql)
    before = sorted(p.name for p in run.iterdir())
    assert main(["fleet", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cockpit fleet: error: --resume {run}: ") and err.count("\n") == 1, err
    assert names in err and str(db) in err, err
    assert sorted(p.name for p in run.iterdir()) == before  # nothing started, nothing written


def test_every_reader_of_a_damaged_row_gets_one_line_naming_it(tmp_path: Path) -> None:
    db = fleet_db(tmp_path / "run")
    store = FleetStore(db, read_only=True)
    assert len(store.agents()) == 4 and store.draws() == {0: (0, {"learning_rate": 1e-3})}
    assert store.lineage()[0].changes == {"learning_rate": (1e-3, 8e-4)}
    damage(db, "UPDATE agents SET overrides = 'garbled' WHERE id = 'a0001'")
    with pytest.raises(FleetStoreError, match=r"fleet\.db: table agents, row id 'a0001': overrides is not JSON"):
        store.agents()
    store.close()
