"""`from cockpit.callback import CockpitCallback`: report a stable-baselines3 script to the cockpit.

    model.learn(total_timesteps, callback=CockpitCallback())

Under `cockpit run -- python train.py ...` the callback reports the job's phases, progress, SPS
and ETA as cockpit's own worker does; outside the cockpit it does nothing. This module is loaded in
the user's training process, never in the cockpit's: it is the one part of the `cockpit` package
that imports stable-baselines3 (through `cockpit_training.callback`, where the callback lives).
"""

from cockpit_training.callback import CockpitCallback

__all__ = ["CockpitCallback"]
