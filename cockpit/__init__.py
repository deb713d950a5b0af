"""cockpit: keep one GPU workstation busy with parallel PPO training jobs.

Layered, each importing only those below it: `cli` (the command line), `views` (the front ends),
`commands` (one module per verb), `core` (the UI-free work), `contract` (what crosses a process).
Beside them: `callback`, the `CockpitCallback` a user's script imports, and `__main__`.
"""

__version__ = "0.1.0"
