"""A real pbt fleet end to end: `cockpit fleet` with real workers on CartPole (4 agents, tiers of
512, 1,024 and 1,536 steps, 2 slots, learning_rate searched), then `cockpit report --json`: nobody
is culled, and at each boundary the worst agent's lineage names the agent it copied, whose step
count its next worker resumed from, under the changed learning rate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.contract.events import StartedEvent, of_kind, read_events
from cockpit.contract.presets import load
from tests.test_commands_report_json import validate

pytestmark = pytest.mark.slow

PRESET = """
env = "CartPole-v1"
n_envs = 8
n_steps = 32
batch_size = 128
n_epochs = 2
checkpoint_every = 256
"""

PLAN = """
name = "pbt-e2e"
jobs = 2
promotion = "pbt"
[agents]
env = "CartPole-v1"
preset = "{preset}"
seeds = 1
[agents.search]
samples = 4
learning_rate = {{ loguniform = [1e-4, 1e-2] }}
[[tiers]]
timesteps = 512
[[tiers]]
timesteps = 1024
[[tiers]]
timesteps = 1536
[score]
episodes = 5
[pbt]
quantile = 0.25
resample_probability = 0.0
seed = 1
"""


def test_a_pbt_fleet_reports_each_exploits_lineage(tmp_path: Path) -> None:
    preset = tmp_path / "tiny.toml"
    preset.write_text(PRESET)
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(preset=preset))
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "cockpit", "fleet", str(plan), "--run-dir", str(run_dir), "--headless"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " exploits " in done.stdout  # the headless notices say so

    report = subprocess.run([sys.executable, "-m", "cockpit", "report", str(run_dir), "--json"], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    validate(data)
    fleet = data["fleet"]
    assert fleet["promotion"] == "pbt" and fleet["counts"] == {"done": 4}
    assert [(t["finished"], t["culled"]) for t in fleet["tiers"]] == [(4, 0), (4, 0), (4, 0)]
    exploits = [(agent["id"], e) for agent in fleet["agents"] for e in agent["lineage"]]
    drawn = {d["draw"]: d["values"]["learning_rate"] for d in fleet["search"]["draws"]}
    assert sorted(drawn) == [0, 1, 2, 3]
    assert sorted(e["tier"] for _, e in exploits) == [0, 1]  # floor(4 x 0.25) = 1 at each boundary
    for agent, exploit in exploits:
        assert exploit["source"] != agent and exploit["source_score"] > exploit["score"]  # a tie is no exploit
        assert exploit["source_steps"] == (512, 1024)[exploit["tier"]]
        assert exploit["checkpoint"].startswith(f"step-{exploit['source_steps']:012d}-")
        # x0.8 or x1.2 of the source's rate then, clipped: its draw's (one agent a draw, in order), or
        # what an earlier exploit gave it.
        before = [e for a, e in exploits if a == exploit["source"] and e["tier"] < exploit["tier"]]
        theirs = before[-1]["changes"]["learning_rate"][1] if before else drawn[int(exploit["source"][1:])]
        new = exploit["changes"]["learning_rate"][1]
        assert any(new == pytest.approx(min(max(theirs * f, 1e-4), 1e-2)) for f in (0.8, 1.2))
        # The exploiter's next worker resumed the source's step, not its own start.
        started = of_kind(read_events(run_dir / "jobs" / agent / "events.jsonl"), StartedEvent)
        assert exploit["source_steps"] in [e.resumed_from_step for e in started]
    leaders = {leader["id"]: leader for leader in fleet["leaderboard"]}
    agent, exploit = exploits[-1]
    assert leaders[agent]["lineage"][-1] == exploit
    # Its last preset file (fleet.db's row, as the report's overrides show) holds the perturbed rate.
    overrides = next(a["overrides"] for a in fleet["agents"] if a["id"] == agent)
    assert overrides["learning_rate"] == pytest.approx(exploit["changes"]["learning_rate"][1])
    presets = [load(str(p)).learning_rate for p in (run_dir / "presets").glob("*.toml")]
    assert any(rate == pytest.approx(overrides["learning_rate"]) for rate in presets)
    # The HTML report's leaderboard names every checkpoint an agent copied, oldest first.
    page = tmp_path / "report.html"
    html = subprocess.run([sys.executable, "-m", "cockpit", "report", str(run_dir), "--html", str(page)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert html.returncode == 0, html.stderr
    chain = ", ".join(f"{e['source']}@t{e['tier']}" for e in leaders[agent]["lineage"])
    assert f'<td class="l">{chain}</td>' in page.read_text()


def test_a_pbt_fleet_searching_the_network_pairs_within_each_network_and_runs_to_done(tmp_path: Path) -> None:
    # docs/fleets.md's search example searches net_arch: under pbt an exploiter must resume a
    # checkpoint of its own network, or its worker refuses it and the agent fails.
    preset = tmp_path / "tiny.toml"
    preset.write_text(PRESET)
    plan = tmp_path / "plan.toml"
    text = PLAN.format(preset=preset).replace(
        "samples = 4", "samples = 4\nnet_arch = { choice = [[32, 32], [64, 64]] }"
    )
    plan.write_text(text.replace("quantile = 0.25", "quantile = 0.5"))
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "cockpit", "fleet", str(plan), "--run-dir", str(run_dir), "--headless"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "pbt: net_arch shapes the saved network" in done.stdout
    report = subprocess.run([sys.executable, "-m", "cockpit", "report", str(run_dir), "--json"], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0, report.stderr
    fleet = json.loads(report.stdout)["fleet"]
    assert fleet["counts"] == {"done": 4}
    nets = {f"a{d['draw']:04d}": d["values"]["net_arch"] for d in fleet["search"]["draws"]}
    for agent in fleet["agents"]:
        assert agent["overrides"]["net_arch"] == nets[agent["id"]]  # never perturbed
        for exploit in agent["lineage"]:
            assert nets[exploit["source"]] == nets[agent["id"]]
            assert exploit["changes"]["net_arch"] == [nets[agent["id"]]] * 2
