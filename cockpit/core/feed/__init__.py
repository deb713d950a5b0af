"""What a run shows its viewers, in this process or over a socket.

- `snapshot`: `RunState` and `JobView`, the immutable state every view renders;
- `source`: `RunSource` (a live run, an attached one or a replay), `Frame` and the frame window;
- `control`: the run's control socket and `AttachSource`, the viewer's end of it;
- `wire`: the JSON codec of states and samples on that socket;
- `detail`: one job's detail screen: its notable events, checkpoints and stderr.

Imports `cockpit.core.launch`, `cockpit.core.telemetry` and `cockpit.core.machine` below it.
"""
