"""The container check's probe decides between running, skipping and failing the container test
(`test_e2e_container.probe_verdict`): it skips, even under CI=1, only where podman cannot start any
container on the machine's kernel, naming podman's own error; a broken option of the check script
fails it. Driven here with a scripted podman on PATH, through the real check.sh."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_e2e_container import SCRIPT, probe_verdict

# What podman 4's `run` answers (podman-run(1), EXIT STATUS: 125 "the error is with Podman itself",
# 126 "the contained command cannot be invoked"), as podman 4.3.1 worded each on the development
# machine: a kernel refusing the container's limits through the OCI runtime, a flag cobra does not
# know, an option value podman cannot parse, a network that does not exist.
FAKE_PODMAN = r'''#!PYTHON
"""A scripted podman (see the test module's docstring for whose behaviour it follows). FAKE_PODMAN:
`runs` (any valid container starts), `refuses` (the OCI runtime refuses every container), or
`no-ulimits` (a container starts unless it asks for a --ulimit, which the runtime refuses)."""
import os, re, sys

OCI = ("Error: runc: runc create failed: unable to start container process: error during container "
       "init: error setting rlimits for ready process: error setting rlimit type 7: operation not "
       "permitted: OCI permission denied")
args = sys.argv[1:]
with open(os.environ["FAKE_PODMAN_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
while args and args[0] in ("--runtime", "--cgroup-manager", "--events-backend"):
    args = args[2:]
if not args or args[0] != "run":
    sys.exit(0)  # rm, image inspect, rmi: the check's cleanup, nothing to clean here
args, ulimits = args[1:], []
while args and args[0].startswith("--"):
    flag = args.pop(0)
    if flag == "--rm":
        continue
    if flag not in ("--name", "--rootfs", "--network", "--ulimit"):
        sys.exit(print(f"Error: unknown flag: {flag}\nSee 'podman run --help'", file=sys.stderr) or 125)
    value = args.pop(0)
    if flag == "--network" and value != "host":
        sys.exit(print(f"Error: unable to find network with name or ID {value}: network not found",
                       file=sys.stderr) or 125)
    if flag == "--ulimit":
        if not re.fullmatch(r"\w+=-?\d+:-?\d+", value):
            sys.exit(print(f'Error: ulimit option "{value}" requires name=SOFT:HARD, failed to be parsed',
                           file=sys.stderr) or 125)
        ulimits.append(value)
mode = os.environ["FAKE_PODMAN"]
if mode == "refuses" or (mode == "no-ulimits" and ulimits):
    sys.exit(print(OCI, file=sys.stderr) or 126)
sys.exit(0)
'''


def fake_podman(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH with the scripted podman (and a runc, so the check picks it and tries it plain) first;
    returns the file each call's arguments are logged to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text(FAKE_PODMAN.replace("PYTHON", sys.executable, 1))
    podman.chmod(0o755)
    runc = bin_dir / "runc"
    runc.write_text("#!/bin/sh\nexit 0\n")
    runc.chmod(0o755)
    log = tmp_path / "podman.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PODMAN", mode)
    monkeypatch.setenv("FAKE_PODMAN_LOG", str(log))
    monkeypatch.setenv("WORK", str(tmp_path / "work"))
    monkeypatch.setenv("CI", "1")  # as .ci/run sets it: a skip must still be a skip here
    return log


def broken_script(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of check.sh, in a repository layout of its own, with one option broken."""
    text = SCRIPT.read_text()
    assert old in text
    script = tmp_path / "repo" / "benchmarks" / "container" / "check.sh"
    script.parent.mkdir(parents=True)
    script.write_text(text.replace(old, new, 1))
    return script


def test_where_podman_runs_the_checks_container_the_check_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_podman(tmp_path, "runs", monkeypatch)
    assert probe_verdict() == ("run", "")
    (first, *_) = log.read_text().splitlines()
    assert "run --rm --network host --ulimit nofile=" in first and "/bin/true" in first


def test_where_the_kernel_refuses_every_container_it_skips_under_ci_naming_podmans_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = fake_podman(tmp_path, "refuses", monkeypatch)
    verdict, said = probe_verdict()
    assert verdict == "skip"
    assert said.startswith("podman cannot run a container here (runtime runc): Error: runc: runc create failed")
    assert said.endswith("operation not permitted: OCI permission denied")
    # It tried a plain container too (podman's defaults) before saying so.
    assert any(line.startswith("--runtime runc run --rm --name") for line in log.read_text().splitlines())


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ('--ulimit "nofile=', '--ulimt "nofile=', "Error: unknown flag: --ulimt"),
        ("--network host", "--network hots", "Error: unable to find network with name or ID hots"),
        ('"nofile=$nofile:$nofile"', '"nofile=$nofile:lots"', 'Error: ulimit option "nofile='),
    ],
)
def test_a_broken_option_of_the_check_fails_it_even_where_the_kernel_refuses_plain_containers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, says: str
) -> None:
    fake_podman(tmp_path, "refuses", monkeypatch)
    verdict, said = probe_verdict(broken_script(tmp_path, old, new))
    assert verdict == "fail" and "the probe exited 3" in said and says in said, said


def test_options_that_fail_where_a_plain_container_starts_fail_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_podman(tmp_path, "no-ulimits", monkeypatch)
    verdict, said = probe_verdict()
    assert verdict == "fail" and "podman starts a plain container here (runtime runc)" in said, said


def test_the_check_itself_stops_on_its_own_fault_and_exits_2_only_where_podman_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --probe the check runs its probe first: exit 2 (podman cannot run here) only for the
    kernel's refusal; its own broken option is a failure, exit 1."""
    fake_podman(tmp_path, "refuses", monkeypatch)
    assert shutil.which("podman") == str(tmp_path / "bin" / "podman")  # never this machine's own
    refused = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    broken = broken_script(tmp_path, "--network host", "--network hots")
    failed = subprocess.run(["bash", str(broken)], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and "[container] FAIL: the probe found the check itself at fault" in failed.stderr
