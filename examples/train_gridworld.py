"""A user's own SB3 training script, as cockpit supervises it: PPO on the example GridWorld env.

Alone:          python examples/train_gridworld.py --seed 0 --out /tmp/grid
Under cockpit:  cockpit run --jobs 2 --agents 3 -- python examples/train_gridworld.py --seed {seed} --out {job_dir}

The only cockpit lines are the callback's: under cockpit it reports this job's phases, progress,
SPS and ETA, and checkpoints the model every --checkpoint-every steps into the job's directory; after a crash
the cockpit starts the script again, and it goes on from the newest checkpoint (resuming is the
script's business: cockpit only restarts it). Alone, the callback does nothing. The final model
is --out/model.zip.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the example env package beside this file
import gridworld  # noqa: F401  registers GridWorld-v0

from cockpit.callback import CockpitCallback


def main() -> int:
    parser = argparse.ArgumentParser(description="Train PPO on GridWorld-v0 (a cockpit example script).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timesteps", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=Path("gridworld-run"))
    parser.add_argument("--checkpoint-every", type=int, default=4096, help="steps between checkpoints under cockpit")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    env = make_vec_env("GridWorld-v0", n_envs=4, seed=args.seed)
    resume = CockpitCallback.newest_checkpoint()  # under cockpit, after a crash: where it got to
    if resume is not None:
        model = PPO.load(resume, env=env, device="cpu")
    else:
        model = PPO("MlpPolicy", env, n_steps=128, batch_size=128, n_epochs=4, learning_rate=1e-3,
                    policy_kwargs={"net_arch": [32, 32]}, seed=args.seed, device="cpu")  # fmt: skip
    before, started = model.num_timesteps, time.perf_counter()
    model.learn(args.timesteps - model.num_timesteps, callback=CockpitCallback(checkpoint_every=args.checkpoint_every),
                reset_num_timesteps=resume is None)  # fmt: skip
    seconds = time.perf_counter() - started
    trained = model.num_timesteps - before
    print(f"trained {trained:,} steps in {seconds:.2f} s: {trained / seconds:,.0f} steps/s", flush=True)
    model.save(args.out / "model.zip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
