"""The run settings' one declaration (`cockpit.contract.settings`) against the forms made from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cockpit.cli import build_parser
from cockpit.contract.runrecord import ConfigRecord
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings, declared, decode, encode, spec_values


def test_run_toml_records_each_recorded_setting_under_its_own_name_and_reads_it_back() -> None:
    recorded = {name for name, each in declared() if each.recorded}
    # mps_external is what the run found on the machine, not a setting the user gives.
    assert recorded == {f.name for f in dataclasses.fields(ConfigRecord)} - {"mps_external"}


def test_each_flag_parses_into_its_setting_and_the_spec_data_round_trips(tmp_path: Path) -> None:
    words = ["run", "--jobs", "2", "--agents", "3", "--preset", "cartpole", "--timesteps", "1_000", "--seed", "4",
             "--eval-episodes", "2", "--run-dir", str(tmp_path / "r"), "--name", "n", "--pin", "--mps",
             "--no-tensorboard", "--max-restarts", "1", "--healthy-uptime", "9", "--stall-timeout", "70",
             "--on-done", "true"]  # fmt: skip
    settings = RunSettings.from_args(build_parser().parse_args(words))
    # Every setting that is a flag of `run` moved off its default: one left out of the list shows here.
    off_default = {name for name, _ in declared() if getattr(settings, name) != getattr(RunSettings(), name)}
    flags = {name for name, each in declared() if each.flag is not None} - {"env", "episodes", "gpus", "devices"}
    assert off_default == flags
    spec = build_spec(settings, command_line=("cockpit",))
    assert spec_values(build_spec(decode(encode(spec)), command_line=("cockpit",))) == spec_values(spec)
