"""`cockpit play RUN_DIR`: watch a trained agent play, and record it.

`cockpit play RUN_DIR [--job ID | --best] [--checkpoint PATH] [--episodes N]
[--deterministic | --stochastic] [--video OUT.mp4|OUT.gif] [--seed S] [--max-seconds S] [--max-mb MB]
[--max-width PX]` finds the model (`cockpit.core.record.playable`: a job's final model or newest
checkpoint, a fleet's best agent, a collected model checked against its SHA-256), starts a player
for it (`cockpit.core.launch.player`: its own process, niced, the policy on the CPU), follows its
episodes (a progress bar on a terminal, a line per episode otherwise), and prints the mean ± std of
the return and the episode length, as rl-zoo3's enjoy does, and the clip it recorded: its file,
frames, seconds, frame rate, size and SHA-256.

Exit codes: 0 played (and recorded); 1 the player failed (its last stderr lines are shown); 2 bad
input, one line: no such run or job, a model failing its checksum, an option out of the player's
bounds (`PlayRequest`'s), an env that cannot render (the returns are printed first: only the clip is
refused).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cockpit.commands.console import output_console
from cockpit.contract.play import Clip, PlayRequest, PlayResult, parse_episode_line, video_format
from cockpit.core.launch.player import JobModel, read_result, start_player
from cockpit.core.record.playable import PlayableError, playable

PROG = "cockpit play"
STDERR_TAIL = 5


def main(args: argparse.Namespace) -> int:
    """Run `cockpit play` with the parsed arguments; returns the exit code."""
    return play(
        args.run_dir,
        job=args.job,
        best=args.best,
        checkpoint=args.checkpoint,
        options={
            "episodes": args.episodes,
            "deterministic": args.deterministic,
            "seed": args.seed,
            "video": None if args.video is None else args.video.resolve(),
            "max_seconds": args.max_seconds,
            "max_mb": args.max_mb,
            "max_width": args.max_width,
        },
    )


def play(
    run_dir: Path,
    *,
    job: str | None = None,
    best: bool = False,
    checkpoint: Path | None = None,
    options: dict[str, object] | None = None,
    console: Console | None = None,
) -> int:
    """Play the model `run_dir`, `job`, `best` and `checkpoint` name with the `PlayRequest` fields in
    `options`, printing as the module's docstring says; returns the exit code."""
    console = console or output_console()
    options = dict(options or {})
    video = options.get("video")
    if isinstance(video, Path) and video_format(video) is None:
        return _bad(f"--video {video}: must end in .mp4 or .gif (MP4 needs 'cockpit[video]'; GIF always works)")
    if isinstance(video, Path) and not video.parent.is_dir():
        return _bad(f"--video {video}: no such directory {video.parent}")
    try:
        model = playable(run_dir, job=job, best=best, checkpoint=checkpoint)
    except PlayableError as exc:
        return _bad(str(exc))
    with tempfile.TemporaryDirectory(prefix="cockpit-play-") as scratch:
        try:
            request = model.request(Path(scratch) / "result.json", **options)  # type: ignore[arg-type]
        except ValueError as exc:  # options `play` was called with that no request takes
            return _bad(str(exc))
        _say(console, _heading(model, options))
        stderr_path = Path(scratch) / "stderr.log"
        with stderr_path.open("wb") as stderr:
            code = _follow(request, stderr, console)
        try:
            result = read_result(request.result)
        except ValueError:
            tail = stderr_path.read_text(errors="replace").strip().splitlines()[-STDERR_TAIL:]
            print(f"{PROG}: the player failed (exit {code}) without a result", file=sys.stderr)
            for line in tail:
                print(f"  {line}", file=sys.stderr)
            return 1
    _summary(console, result)
    if result.error is not None:
        print(f"{PROG}: {result.error}", file=sys.stderr)
        return code if code else 1
    return code


def _bad(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def _say(console: Console, text: str) -> None:
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def _heading(model: JobModel, options: dict[str, object]) -> str:
    mode = "deterministic" if options.get("deterministic", True) else "stochastic"
    normalized = ", VecNormalize frozen" if model.vecnormalize is not None else ""
    return f"Playing {model.source} on {model.env} ({mode}{normalized}, seed {options.get('seed', 0)})"


def _follow(request: PlayRequest, stderr: IO[bytes], console: Console) -> int:
    """Start the player, show each finished episode, and wait for it; its exit code. Ctrl-C ends its
    whole process group."""
    proc = start_player(request, stderr=stderr)
    try:
        with _progress(console, request.episodes) as advance:
            assert proc.stdout is not None
            for raw in proc.stdout:
                done = parse_episode_line(raw.decode(errors="replace").rstrip("\n"))
                if done is not None:
                    advance(f"Episode {done.index}/{done.episodes}: return {done.ret:,.2f}, length {done.length:,}")
        return proc.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def _progress(console: Console, episodes: int) -> Iterator[Callable[[str], None]]:
    """`advance(line)`: print an episode's line, and on a terminal move the bar on by one."""
    if not console.is_terminal:
        yield lambda line: _say(console, line)
        return
    columns = (TextColumn("playing"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("play", total=episodes)

        def advance(line: str) -> None:
            progress.console.print(line, highlight=False, markup=False)
            progress.advance(task)

        yield advance


def _summary(console: Console, result: PlayResult) -> None:
    """rl-zoo3's enjoy's closing lines, and the clip."""
    if result.returns:
        n = len(result.returns)
        _say(console, f"Mean reward: {result.mean_return:,.2f} +/- {result.std_return:,.2f} over {n} episode(s)")
        _say(console, f"Mean episode length: {result.mean_length:,.1f} +/- {result.std_length:,.1f}")
    if result.clip is not None:
        _say(console, clip_line(result.clip))
        if result.clip.note:
            _say(console, f"  note: {result.clip.note}")


def clip_line(clip: Clip) -> str:
    """A clip in one line: its file, format, frames, seconds, frame rate, size and SHA-256."""
    fps = f"{clip.fps:g}" if not math.isnan(clip.fps) else "?"
    return (
        f"Video: {clip.path} ({clip.format}, {clip.frames} frames, {clip.seconds:g} s at {fps} fps, "
        f"{clip.width}x{clip.height}, {_size(clip.bytes)}, sha256 {clip.sha256[:12]}...) from {clip.checkpoint}"
    )


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"
