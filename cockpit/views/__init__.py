"""The front ends: `headless` (rich) and `tui` (Textual). They render `RunState` snapshots and send
controls; `terminal` hands them to the commands, and `formatting` is how both write numbers."""
