"""The run settings' one declaration (`cockpit.contract.settings`) against the forms made from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cockpit.cli import build_parser
from cockpit.contract.runrecord import ConfigRecord, parse, read, render
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings, declared, decode, encode, fixed_given, spec_values
from cockpit.contract.toml import tomllib

GOLDEN = Path(__file__).parent / "data" / "run-v1"


def test_run_toml_records_each_recorded_setting_under_its_own_name_and_reads_it_back(tmp_path: Path) -> None:
    # Every recorded setting off its default: each is written under its field's name and reads back.
    off_default = {"agents": 3, "episodes": 7, "seed": 4, "pin": True, "gpus": (0, 1), "devices": ("cuda", "cpu"),
                   "mps": True, "eval_episodes": 2, "max_restarts": 1, "healthy_uptime_s": 9.0,
                   "stall_timeout_s": 70.0, "disk_wait_s": 600.0, "on_done": "true", "video_every": 4096,
                   "script": ("python", "t.py")}  # fmt: skip
    recorded = {name for name, each in declared() if each.recorded}
    assert recorded - {"jobs", "preset", "env", "timesteps"} == set(off_default)  # a new one: give it a value here
    config = ConfigRecord(jobs=2, preset="cartpole", env="CartPole-v1", timesteps=0, **off_default)
    text = render(dataclasses.replace(read(GOLDEN), config=config))
    table = tomllib.loads(text)["config"]
    # run_dir, name and tensorboard are not recorded: a resume names its run dir, the name is the
    # record's own key, and each session says whether it logs to TensorBoard.
    assert set(table) == recorded
    assert parse(text, "x").config == config


def test_each_flag_parses_into_its_setting_and_the_spec_data_round_trips(tmp_path: Path) -> None:
    words = ["run", "--jobs", "2", "--agents", "3", "--preset", "cartpole", "--timesteps", "1_000", "--seed", "4",
             "--eval-episodes", "2", "--run-dir", str(tmp_path / "r"), "--name", "n", "--pin", "--mps",
             "--no-tensorboard", "--max-restarts", "1", "--healthy-uptime", "9", "--stall-timeout", "70",
             "--disk-wait", "600", "--on-done", "true", "--video-every", "4096"]  # fmt: skip
    settings = RunSettings.from_args(build_parser().parse_args(words))
    # Every setting that is a flag of `run` moved off its default: one left out of the list shows here.
    off_default = {name for name, _ in declared() if getattr(settings, name) != getattr(RunSettings(), name)}
    flags = {name for name, each in declared() if each.flag is not None} - {"env", "episodes", "gpus", "devices"}
    assert off_default == flags
    spec = build_spec(settings, command_line=("cockpit",))
    assert spec_values(build_spec(decode(encode(spec)), command_line=("cockpit",))) == spec_values(spec)


def test_a_flag_given_at_its_default_value_is_told_from_one_left_out() -> None:
    # `--seed 0` with --resume is refused like any other seed, and `--max-restarts 3` replaces a
    # recorded 5: each flag's argparse default is None, whatever its setting's default.
    args = build_parser().parse_args(["run", "--resume", "runs/x", "--seed", "0", "--max-restarts", "3"])
    assert fixed_given(args) == ["--seed"]
    assert [(name, value) for name, _, value in RunSettings.given_again(args, "kept")] == [("max_restarts", 3)]
    assert RunSettings.from_args(build_parser().parse_args(["run"])) == RunSettings()  # none given: the defaults
    assert fixed_given(build_parser().parse_args(["fleet", "--resume", "runs/x", "--max-restarts", "3"])) == []
