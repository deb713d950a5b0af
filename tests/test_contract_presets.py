"""Preset data and validation: the seed table, defaults, "auto" batch size and every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.contract.presets import PresetError, builtin_names, largest_divisor_at_most, load

# The preset table of shared/seeds/004 (n_envs, n_steps, batch_size, n_epochs, network).
SEED_TABLE = {
    "fast": (16, 256, 2048, 15, (512, 512)),
    "heavy": (32, 256, 4096, 20, (1024, 512, 256)),
    "beast": (64, 512, 8192, 30, (1024, 512, 512, 256)),
}


@pytest.mark.parametrize("name", sorted(SEED_TABLE))
def test_gpu_presets_carry_the_seed_table(name: str) -> None:
    p = load(name)
    assert (p.n_envs, p.n_steps, p.batch_size, p.n_epochs, p.net_arch) == SEED_TABLE[name]
    assert (p.learning_rate, p.ent_coef, p.vf_coef, p.max_grad_norm) == (3e-4, 0.01, 0.5, 0.5)
    assert p.checkpoint_every == 100_000
    assert p.env


def test_seed_totals_and_gradient_steps() -> None:
    assert [load(n).total_batch for n in ("fast", "heavy", "beast")] == [4096, 8192, 32768]
    assert load("beast").gradient_steps_per_update == 30 * 4


def test_builtin_names_lead_with_the_cpu_default() -> None:
    assert builtin_names()[:4] == ["cartpole", "fast", "heavy", "beast"]
    assert load("cartpole").env == "CartPole-v1"


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


MINIMAL = 'env = "CartPole-v1"\nn_envs = 4\nn_steps = 64\nbatch_size = 64\nn_epochs = 2\n'


def test_a_file_path_is_a_preset_and_defaults_fill_in(tmp_path: Path) -> None:
    p = load(str(write(tmp_path, MINIMAL, "mine.toml")))
    assert p.name == "mine" and p.source.endswith("mine.toml")
    assert p.net_arch == (64, 64) and p.gamma == 0.99 and p.schedule == "constant"


def test_auto_batch_size_picks_the_largest_divisor_under_the_cap(tmp_path: Path) -> None:
    text = MINIMAL.replace("batch_size = 64", 'batch_size = "auto"\nbatch_size_cap = 100')
    p = load(str(write(tmp_path, text.replace("n_envs = 4", "n_envs = 3"))))
    assert p.total_batch == 192 and p.batch_size == 96 and p.batch_size_auto


@pytest.mark.parametrize(
    ("total", "cap", "expected"), [(192, 100, 96), (4096, 4096, 4096), (97, 50, 1), (8192, 3000, 2048), (12, 12, 12)]
)
def test_largest_divisor_at_most(total: int, cap: int, expected: int) -> None:
    assert largest_divisor_at_most(total, cap) == expected


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("n_env = 4\n", "unknown key 'n_env'"),
        ('n_envs = "4"', "'n_envs' must be a positive integer, got '4'"),
        ("n_envs = 4.0", "'n_envs' must be a positive integer, got 4.0"),
        ("n_envs = true", "'n_envs' must be a positive integer, got True"),
        ("n_envs = 0", "'n_envs' must be a positive integer, got 0"),
        ("n_steps = -64", "'n_steps' must be a positive integer, got -64"),
        ("n_epochs = 0", "'n_epochs' must be a positive integer, got 0"),
        ("batch_size = 0", "'batch_size' must be a positive integer or \"auto\", got 0"),
        ('batch_size = "big"', "'batch_size' must be a positive integer or \"auto\", got 'big'"),
        ("batch_size = 100", "'batch_size' 100 must divide n_envs x n_steps = 256; try 64 or 128"),
        ("learning_rate = 0", "'learning_rate' must be a positive number, got 0"),
        ("learning_rate = nan", "'learning_rate' must be a positive number, got nan"),
        ("vf_coef = inf", "'vf_coef' must be a positive number, got inf"),
        ("gamma = nan", "'gamma' must be in (0, 1], got nan"),
        ("learning_rate = -1e-3", "'learning_rate' must be a positive number, got -0.001"),
        ('learning_rate = "fast"', "'learning_rate' must be a positive number, got 'fast'"),
        ("gamma = 1.5", "'gamma' must be in (0, 1], got 1.5"),
        ("ent_coef = -0.1", "'ent_coef' must be a number >= 0, got -0.1"),
        ("max_grad_norm = 0", "'max_grad_norm' must be a positive number, got 0"),
        ("checkpoint_every = -5", "'checkpoint_every' must be a positive integer, got -5"),
        ("net_arch = []", "'net_arch' must be a non-empty list of positive integers, got []"),
        ("net_arch = [64, 0]", "'net_arch' must be a non-empty list of positive integers, got [64, 0]"),
        ('schedule = "cosine"', "'schedule' must be one of 'constant', 'linear', got 'cosine'"),
        ('normalize = "yes"', "'normalize' must be true or false, got 'yes'"),
        ('env = ""', "'env' must be a non-empty string, got ''"),
        ("env_kwargs = 5", "'env_kwargs' must be a table of keyword arguments for the env (an [env_kwargs] section)"),
        ('env_kwargs = ["size", 5]', "'env_kwargs' must be a table of keyword arguments for the env"),
        ("env_kwargs = { start = 2026-11-23 }", "'env_kwargs' must hold strings, numbers, booleans, arrays and tables"),
        ('vec_env = "threads"', "'vec_env' must be one of 'auto', 'dummy', 'subproc', got 'threads'"),
    ],
)
def test_each_bad_value_is_named_with_file_and_key(tmp_path: Path, change: str, expected: str) -> None:
    key = change.split("=")[0].strip()
    lines = [line for line in MINIMAL.splitlines() if not line.startswith(f"{key} ")]
    path = write(tmp_path, "\n".join([*lines, change]) + "\n")
    with pytest.raises(PresetError) as info:
        load(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_all_problems_are_reported_in_one_error(tmp_path: Path) -> None:
    path = write(tmp_path, 'env = "CartPole-v1"\nn_envs = 0\nbogus = 1\nn_epochs = "x"\n')
    with pytest.raises(PresetError) as info:
        load(str(path))
    message = str(info.value)
    for part in ("unknown key 'bogus'", "'n_envs' must be", "'n_epochs' must be", "missing key 'n_steps'"):
        assert part in message
    assert "\n" not in message


def test_malformed_toml_and_missing_files_and_names(tmp_path: Path) -> None:
    with pytest.raises(PresetError, match=r"p\.toml: invalid TOML"):
        load(str(write(tmp_path, "n_envs = = 4")))
    with pytest.raises(PresetError, match=r"nope\.toml: no such preset file"):
        load(str(tmp_path / "nope.toml"))
    with pytest.raises(PresetError, match="preset 'huge': no such preset; choose one of cartpole, fast, heavy, beast"):
        load("huge")


def test_auto_batch_size_of_one_is_refused(tmp_path: Path) -> None:
    text = MINIMAL.replace("n_envs = 4", "n_envs = 1").replace("n_steps = 64", "n_steps = 97")
    path = write(tmp_path, text.replace("batch_size = 64", 'batch_size = "auto"\nbatch_size_cap = 50'))
    with pytest.raises(PresetError, match="'batch_size' resolves to 1 for n_envs x n_steps = 97"):
        load(str(path))


def test_a_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PresetError, match=r"p\.toml: not a UTF-8 text file"):
        load(str(path))


def test_env_kwargs_and_vec_env_default_to_empty_and_auto(tmp_path: Path) -> None:
    p = load(str(write(tmp_path, MINIMAL)))
    assert p.env_kwargs == {} and p.vec_env == "auto"
    text = MINIMAL.replace('env = "CartPole-v1"', 'env = "my_envs:Grid-v0"') + "\n[env_kwargs]\nsize = 7\n"
    p = load(str(write(tmp_path, text, "custom.toml")))
    # The shape is all a preset checks: whether the module imports and the env builds is asked
    # before a run starts (cockpit.contract.envids.check_env).
    assert p.env == "my_envs:Grid-v0" and p.env_kwargs == {"size": 7}
