"""`cockpit report --html` with clips: each job's `videos/` and a fleet's model clips embedded in the
page as `data:` URIs, in the leaderboard and in each job's section, and every one of them playable
in headless Chromium (Debian's package): a `<video>`'s `readyState` at least 2 (HAVE_CURRENT_DATA)
and a duration above 0, a GIF's `<img>` decoded with a width.

The fleet is `benchmarks.report_render`'s (written through the contract's writers); its clips are
made as the recorder makes them (`tests.clipfiles`: H.264 through imageio-ffmpeg, GIF through
Pillow), and its models.toml through the contract's `write_manifest` and `with_video`.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest

from benchmarks.report_render import synthesize_fleet
from cockpit.cli import main
from cockpit.commands.htmlreport import page
from cockpit.contract.files import sha256_of
from cockpit.contract.model_manifest import (
    MODELS_DIR,
    ModelEntry,
    read_manifest,
    verify,
    with_video,
    write_manifest,
)
from cockpit.contract.rundir import RunDir
from cockpit.core.record.clips import job_clips, run_clips
from cockpit.core.record.run_report import json_report
from cockpit.core.record.series import read_series
from tests.clipfiles import write_gif, write_mp4
from tests.cockpitproc import required_tool
from tests.test_commands_report_html import network_references


@dataclass(frozen=True)
class ClipFleet:
    """A finished fleet whose two leaders have model clips (the first an MP4, the second a GIF) and
    whose leader also has two checkpoint clips in its job's `videos/`."""

    run_dir: Path
    first: str
    second: str


@pytest.fixture(scope="module")
def clip_fleet(tmp_path_factory: pytest.TempPathFactory) -> ClipFleet:
    run_dir = synthesize_fleet(tmp_path_factory.mktemp("clips") / "run", agents=8, slots=2, tier0=2_560, tier1=5_120)
    fleet = read_series(run_dir).fleet
    assert fleet is not None
    first, second = (leader.agent for leader in fleet.summary.leaderboard[:2])
    models = run_dir / MODELS_DIR
    models.mkdir()
    entries = []
    for agent in (first, second):
        (models / f"{agent}.zip").write_bytes(f"model of {agent}".encode())
        entries.append(ModelEntry(agent=agent, file=f"{agent}.zip", sha256=sha256_of(models / f"{agent}.zip"),
                                  env="CartPole-v1", preset="cartpole", seed=0, score=1.0, steps=5_120))  # fmt: skip
    write_manifest(run_dir, "bench", entries)
    with_video(run_dir, "bench", first, write_mp4(models / f"{first}.mp4"))
    with_video(run_dir, "bench", second, write_gif(models / f"{second}.gif"))
    videos = RunDir(run_dir).job(first).videos
    write_mp4(videos / "step-2560-100.mp4", count=12)
    write_mp4(videos / "step-5120-200.mp4", count=36)
    return ClipFleet(run_dir, first, second)


def _sections(html: str) -> dict[str, str]:
    """Each job's clip section's markup, by job id."""
    return dict(re.findall(r'<section id="clip-([^"]+)">(.*?)</section>', html))


def _leaderboard_rows(html: str) -> list[str]:
    board = html.split(">Leaderboard (top", 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", board.split("<tbody>", 1)[1])


def test_each_clip_is_embedded_in_the_leaderboard_and_in_its_jobs_section(clip_fleet: ClipFleet) -> None:
    html = page(read_series(clip_fleet.run_dir), [])
    assert network_references(html) == []
    rows = _leaderboard_rows(html)
    assert "<th>clip</th>" in html
    # The leader's row plays its model's MP4, the second's shows its GIF, the rest have none.
    assert clip_fleet.first in rows[0] and rows[0].count('<video class="clip"') == 1
    assert 'src="data:video/mp4;base64,' in rows[0]
    assert clip_fleet.second in rows[1] and 'src="data:image/gif;base64,' in rows[1]
    assert all("data:" not in row and row.endswith("<td>-</td>") for row in rows[2:])
    sections = _sections(html)
    assert set(sections) == {clip_fleet.first, clip_fleet.second}
    leader = sections[clip_fleet.first]
    # Its model's clip and its newest checkpoint's, each named for where it came from.
    assert leader.count('<video class="clip"') == 2
    assert f"recorded from final model {clip_fleet.first}.zip" in leader
    assert "recorded from step-5120-200;" in leader and "step-2560-100" not in leader
    assert "2 clip(s) in" in leader
    newest = (RunDir(clip_fleet.run_dir).job(clip_fleet.first).videos / "step-5120-200.mp4").read_bytes()
    assert base64.b64encode(newest).decode() in leader


def test_a_run_without_clips_has_no_clip_column_or_section(tmp_path: Path) -> None:
    run_dir = synthesize_fleet(tmp_path / "run", agents=4, slots=2, tier0=2_560, tier1=5_120)
    html = page(read_series(run_dir), [])
    assert "<th>clip</th>" not in html and "<h2>Clips</h2>" not in html and "<video" not in html


def test_a_model_clip_that_fails_its_checksum_is_a_models_problem(clip_fleet: ClipFleet, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(clip_fleet.run_dir, run_dir)
    assert verify(run_dir, read_manifest(run_dir)) == []
    clip = run_dir / MODELS_DIR / f"{clip_fleet.second}.gif"
    clip.write_bytes(clip.read_bytes()[:-10])
    assert verify(run_dir, read_manifest(run_dir)) == [f"{clip}: does not match its SHA-256 in models.toml"]


# ----- in a real browser -----

# Appended to a copy of the page (the report itself has no script): once the page has loaded and
# the media had a moment, each <video>'s readyState and duration and each clip <img>'s decoded
# width go into an attribute that --dump-dom prints.
CHECK = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const videos = [...document.querySelectorAll("video")].map(v => ({ready: v.readyState, duration: v.duration,
    error: v.error ? v.error.code : null}));
  const images = [...document.querySelectorAll("img.clip")].map(i => ({complete: i.complete, width: i.naturalWidth}));
  document.body.setAttribute("data-clips", JSON.stringify({videos, images}));
}, 3000));
</script></body>"""


def media_states(chromium: str, html: Path, profile: Path) -> dict[str, list[dict[str, object]]]:
    """Every video's and clip image's state in Chromium once `html` (with `CHECK` appended) loaded."""
    checked = html.with_name(f"checked-{html.name}")
    checked.write_text(html.read_text().replace("</body>", CHECK))
    out = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--autoplay-policy=no-user-gesture-required", "--virtual-time-budget=15000",
         "--dump-dom", checked.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    found = re.search(r'data-clips="([^"]*)"', out)
    assert found, f"chromium ran no check: {out[-500:]}"
    states: dict[str, list[dict[str, object]]] = json.loads(unescape(found.group(1)))
    print(json.dumps(states))
    return states


def test_every_clip_in_the_report_plays_in_headless_chromium(clip_fleet: ClipFleet, tmp_path: Path) -> None:
    chromium = required_tool("chromium", "the browser test of report --html's clips")
    out = tmp_path / "report.html"
    assert main(["report", str(clip_fleet.run_dir), "--html", str(out)]) == 0
    states = media_states(chromium, out, tmp_path / "profile")
    # Leaderboard: the leader's MP4; its section: that MP4 and its newest checkpoint's. The GIF twice.
    assert len(states["videos"]) == 3 and len(states["images"]) == 2, states
    for video in states["videos"]:
        assert video["error"] is None and int(str(video["ready"])) >= 2 and float(str(video["duration"])) > 0, video
    for image in states["images"]:
        assert image["complete"] is True and int(str(image["width"])) == 96, image
    # The control: the same page with each clip's data cut short, as a torn clip file would be.
    torn = tmp_path / "torn.html"
    torn.write_text(re.sub(r"(data:(?:video/mp4|image/gif);base64,)[^\"]{64}[^\"]*", r"\1AAAA", out.read_text()))
    control = media_states(chromium, torn, tmp_path / "profile")
    assert all(int(str(video["ready"])) < 2 for video in control["videos"]), control
    assert all(image["width"] == 0 for image in control["images"]), control


def test_report_json_lists_each_models_clip_with_its_sha256(clip_fleet: ClipFleet) -> None:
    collected = {m["agent"]: m for m in json_report(clip_fleet.run_dir)["fleet"]["models"]["collected"]}
    models = clip_fleet.run_dir / MODELS_DIR
    assert collected[clip_fleet.first]["video"] == f"{clip_fleet.first}.mp4"
    assert collected[clip_fleet.first]["video_sha256"] == sha256_of(models / f"{clip_fleet.first}.mp4")
    assert collected[clip_fleet.second]["video"] == f"{clip_fleet.second}.gif"


def test_a_players_half_written_temp_file_is_no_clip(tmp_path: Path) -> None:
    videos = RunDir(tmp_path).job("000").videos
    videos.mkdir(parents=True)
    name = "step-000000004096-1800000000000004096"
    clip = write_gif(videos / f"{name}.gif")
    write_gif(videos / f".{name}.mp4.4242.tmp.gif")  # left by a player that was killed mid-clip
    (videos / f".{name}.mp4.4243.tmp.mp4").write_bytes(b"\0" * 1024)
    assert [c.path for c in job_clips(videos)] == [clip]
    assert [c.path for c in run_clips(tmp_path, ("000",)).jobs["000"]] == [clip]
