"""The `cockpit` command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.cli import build_parser, main


def test_presets_lists_resolved_values_and_derived_batches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("cartpole", "fast", "heavy", "beast"):
        assert name in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert rows["n_envs"] == ["8", "16", "32", "64"]
    assert rows["net_arch"] == ["64,64", "512,512", "1024,512,256", "1024,512,512,256"]
    assert "32,768" in out and "4,096" in out  # total batch
    assert "120" in out  # beast: 30 epochs x 4 minibatches


def test_presets_shows_auto_batch_size_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('env = "CartPole-v1"\nn_envs = 3\nn_steps = 64\nbatch_size = "auto"\nn_epochs = 2\n')
    assert main(["presets", str(path)]) == 0
    assert "192 (auto, cap 4,096)" in capsys.readouterr().out


def test_presets_with_a_bad_name_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cockpit", "presets", "nope"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "preset 'nope': no such preset" in result.stderr


def test_unknown_subcommand_is_one_line_and_exit_2() -> None:
    result = subprocess.run([sys.executable, "-m", "cockpit", "fly"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "invalid choice: 'fly'" in result.stderr


@pytest.mark.parametrize("value", ["0", "-5", "abc", "nan", "inf"])
def test_a_bad_healthy_uptime_is_one_line_naming_the_flag_and_exit_2(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--headless", "--run-dir", str(tmp_path / "run"), "--healthy-uptime", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--healthy-uptime" in err and repr(value) in err
    assert not (tmp_path / "run").exists()  # nothing was started


def test_healthy_uptime_reaches_the_spec_and_the_background_run(tmp_path: Path) -> None:
    from cockpit.commands.run import _spec
    from cockpit.contract.runspec import RestartPolicy
    from cockpit.core.session.background import headless_argv

    def spec_of(argv: list[str]) -> RestartPolicy:
        return _spec(build_parser().parse_args(["run", *argv]), None, ("cockpit", "run")).restart

    run_dir = ["--run-dir", str(tmp_path / "run")]
    assert spec_of(run_dir) == RestartPolicy()  # the flag's default is the policy's
    restart = spec_of([*run_dir, "--healthy-uptime", "90.5", "--max-restarts", "5"])
    assert restart == RestartPolicy(max_restarts=5, healthy_uptime_s=90.5)
    spec = _spec(build_parser().parse_args(["run", *run_dir, "--healthy-uptime", "1_800"]), None, ("cockpit",))
    # A run the TUI starts in the background gets the same policy.
    assert spec_of(headless_argv(spec)) == spec.restart == RestartPolicy(healthy_uptime_s=1800.0)
