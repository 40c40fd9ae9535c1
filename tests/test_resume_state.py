"""Everything a run's continuation needs is in its checkpoint: each part's state, field by field, against an
uninterrupted run's; and the learning rate's schedule across a resume (never a jump)."""

import dataclasses

import numpy as np
import pytest
import torch

from distrl.algo.schedule import LinearSchedule, continued, new_schedule
from distrl.common.checkpoint import BestCheckpoint, load_checkpoint, save_checkpoint
from distrl.config import load_config
from distrl.config.schema import LeagueConfig
from distrl.driver.best import better, resumed_best
from distrl.driver.run_state import RunState
from distrl.envs import probe_spaces
from distrl.league.league import League
from distrl.learner import Learner
from distrl.learner.state import LearnerCounters
from distrl.rollout import RolloutWorker


def differences(a, b, path="state") -> list[str]:
    """Where two states differ, by path (tensors, arrays, dicts, lists, numbers, plain objects by their fields)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [path]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return [] if np.array_equal(np.asarray(a), np.asarray(b)) else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(map(str, a.keys() ^ b.keys()))} in one only"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} and {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if hasattr(a, "__dict__") and type(a) is type(b) and not isinstance(a, type):
        return differences(vars(a), vars(b), path)
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


# --- the learner -------------------------------------------------------------------------------------
def _config(*extra):
    return load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            "env.normalize_obs=true",
            "env.normalize_reward=true",
            "stop.env_steps=4096",
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def samples():
    config = _config()
    worker = RolloutWorker(config)
    return config, [worker.sample() for _ in range(4)]


def test_a_resumed_learner_ends_where_an_uninterrupted_one_does_field_by_field(samples, tmp_path):
    """Two updates, a checkpoint through a file, two more: a learner resumed from it holds, field by field, what the
    learner that ran on holds (weights, Adam's moments and step counts, the normalisers, the generators, the counters,
    the schedule). A field of the learner's that a checkpoint leaves out comes back at its initial value and fails."""
    config, batches = samples
    spaces = probe_spaces(config.env)
    ran_on = Learner(config, *spaces)
    for sample in batches[:2]:
        ran_on.update(sample)
    save_checkpoint(tmp_path, 2, {"learner": ran_on.state()}, keep=1)
    for sample in batches[2:]:
        ran_on.update(sample)
    uninterrupted = ran_on.state()

    resumed = Learner(config, *spaces)
    saved = load_checkpoint(tmp_path)["learner"]
    resumed.load_state(saved)
    assert differences(resumed.state(), {**saved, "torch_rng": torch.get_rng_state()}) == []  # as it was saved
    for sample in batches[2:]:
        resumed.update(sample)
    assert differences(resumed.state(), uninterrupted) == []
    assert differences(resumed.normalisers, ran_on.normalisers) == []
    assert differences(resumed.counters, ran_on.counters) == []
    assert differences(resumed.algorithm.schedule, ran_on.algorithm.schedule) == []


def test_every_counter_of_the_learner_is_in_its_state(samples):
    config, _ = samples
    state = Learner(config, *probe_spaces(config.env)).state()
    missing = [f.name for f in dataclasses.fields(LearnerCounters) if f.name not in state]
    assert missing == [], f"LearnerCounters fields no checkpoint holds: {missing}"


def test_a_resume_that_moves_the_step_budget_goes_on_from_the_rate_reached(samples):
    """stop.env_steps 4,096 -> 8,192 after two updates (512 steps): the rate carries on from where it was, to 0 at the
    new budget; a rate read from ``ppo.lr``'s own schedule at the new budget would have jumped up."""
    config, batches = samples
    spaces = probe_spaces(config.env)
    first = Learner(config, *spaces)
    rates = [first.update(sample).metrics["lr"] for sample in batches[:2]]
    reached = first.algorithm.learning_rate(first.trained_env_steps)
    assert rates[0] > rates[1] > reached > 0
    longer = _config("stop.env_steps=8192")
    resumed = Learner(longer, *spaces)
    resumed.load_state(first.state())
    rate = resumed.update(batches[2]).metrics["lr"]
    assert rate == pytest.approx(reached)
    assert resumed.algorithm.learning_rate(8192) == 0.0
    assert resumed.algorithm.learning_rate(6144) == pytest.approx(reached * (8192 - 6144) / (8192 - 512))


def test_the_schedules_one_rule():
    ppo = _config().ppo
    fresh = new_schedule(ppo, 1000)
    assert fresh.rate(0) == ppo.lr and fresh.rate(500) == pytest.approx(ppo.lr / 2) and fresh.rate(1000) == 0.0
    same, change = continued(ppo, 1000, fresh.state(), 500)
    assert same == fresh and change is None  # a resume that changes nothing goes on as it was
    # A longer budget: from the rate reached, to 0 at the new budget.
    longer, change = continued(ppo, 2000, fresh.state(), 500)
    assert longer.rate(500) == pytest.approx(fresh.rate(500)) and longer.rate(2000) == 0.0
    assert change == "stop.env_steps 1,000 -> 2,000: on from the rate reached"
    # Past the old budget, annealed to 0: it stays at 0 (never a rise).
    after, _ = continued(ppo, 2000, fresh.state(), 1000)
    assert after.rate(1000) == 0.0 and after.rate(1500) == 0.0
    # No budget now: held at the rate reached.
    held, change = continued(ppo, None, fresh.state(), 250)
    assert held.rate(250) == held.rate(10**9) == pytest.approx(fresh.rate(250)) and "held" in change
    # A changed ppo.lr scales the rates (Ray Tune's PBT perturbs it), the budget's end unchanged.
    doubled = ppo.model_copy(update={"lr": ppo.lr * 2})
    scaled, change = continued(doubled, 1000, fresh.state(), 500)
    assert scaled.rate(500) == pytest.approx(2 * fresh.rate(500)) and "scales" in change
    # Annealing off: held at ppo.lr.
    off = ppo.model_copy(update={"anneal_lr": False})
    constant, _ = continued(off, 1000, fresh.state(), 500)
    assert constant.rate(500) == constant.rate(999) == ppo.lr
    # A checkpoint written before schedules were saved: from the optimiser's last rate.
    legacy, change = continued(ppo, 1000, None, 500, last_lr=1e-4)
    assert legacy.rate(500) == pytest.approx(1e-4) and legacy.rate(1000) == 0.0 and "no schedule" in change
    assert LinearSchedule.from_state(longer.state()) == longer


# --- the run's counters, the best checkpoint, the league -----------------------------------------------
def test_every_field_of_the_run_state_round_trips():
    run = RunState()
    for k in range(3):
        run.add_iteration(100, [float(k), 2.0], [10, 20], 1.5 * k, None, {"a": [1.0], "b": [2.0]})
    for f in dataclasses.fields(RunState):  # every counter off its default: one left out of state() shows
        if f.type == "int":
            setattr(run, f.name, getattr(run, f.name) + 7)
    run.time_s, run.solved_at_s = 12.5, 3.0
    state = run.state()
    assert sorted(state) == sorted(f.name for f in dataclasses.fields(RunState))
    assert differences(RunState.from_state(state), run) == []


def test_the_best_checkpoint_comes_back_with_the_run(tmp_path):
    best = None
    for iteration, score in [(1, 10.0), (2, 30.0), (3, 20.0), (4, None)]:
        best = better(best, score, iteration, "episode_return_mean")
        save_checkpoint(
            tmp_path,
            iteration,
            {"counters": {"recent_returns": []}, "best": best and best.state()},
            keep=1,
            protect=[best.path(tmp_path)] if best else [],
        )
    assert best == BestCheckpoint(30.0, 2)
    assert resumed_best(load_checkpoint(tmp_path), tmp_path, "episode_return_mean") == best
    # A best chosen by another measure (the run resumed with evaluation turned on) is not this run's best.
    assert resumed_best(load_checkpoint(tmp_path), tmp_path, "eval_return_mean") is None
    # Checkpoints written before they named their best: the best on disk, from each one's counters.
    for iteration, returns in [(5, [1.0, 3.0]), (6, [50.0]), (7, [4.0])]:
        save_checkpoint(tmp_path, iteration, {"counters": {"recent_returns": returns}}, keep=10)
    assert resumed_best(load_checkpoint(tmp_path), tmp_path, "episode_return_mean") == BestCheckpoint(50.0, 6)
    # A best that is not in this run directory (a Tune trial started from another's checkpoint) is not claimed.
    assert resumed_best({"best": BestCheckpoint(99.0, 40).state()}, tmp_path, "episode_return_mean") is None
    # Checkpoints of earlier distrl named their best by its return, in the same state without the metric's name.
    assert BestCheckpoint.from_state({"episode_return_mean": 12.5, "iteration": 3}) == BestCheckpoint(12.5, 3)


def test_a_best_named_after_newer_checkpoints_is_the_one_read(tmp_path):
    """An evaluation's result makes a checkpoint the best after newer ones were written (naming the best as it was):
    ``best.json`` has the newer word, where its checkpoint is still on disk; a league run's best by training return
    is no best at all (its newest plays)."""
    from distrl.common.checkpoint import load_checkpoint_file, write_best

    for iteration in (1, 2, 3):
        best = BestCheckpoint(0.5, 1, "eval_return_mean")
        save_checkpoint(tmp_path, iteration, {"counters": {"iteration": iteration}, "best": best.state()}, keep=5)
    assert load_checkpoint_file(tmp_path, "best")[1].name == "ckpt_0000001.pt"
    write_best(tmp_path, BestCheckpoint(0.8, 2, "eval_return_mean"))
    assert load_checkpoint_file(tmp_path, "best")[1].name == "ckpt_0000002.pt"
    assert resumed_best(load_checkpoint(tmp_path), tmp_path, "eval_return_mean") == BestCheckpoint(
        0.8, 2, "eval_return_mean"
    )
    write_best(tmp_path, BestCheckpoint(0.9, 9, "eval_return_mean"))  # not on disk: the checkpoint's own word
    assert load_checkpoint_file(tmp_path, "best")[1].name == "ckpt_0000001.pt"
    league = {"config": {"league": {}}, "best": BestCheckpoint(0.7, 1).state()}
    assert BestCheckpoint.of(league) is None
    assert BestCheckpoint.of({**league, "best": BestCheckpoint(0.1, 1, "eval_return_mean").state()}) is not None


def test_the_leagues_whole_state_is_in_its_checkpoint():
    """Every attribute a league keeps is in its state, and comes back as it was after games, snapshots and a change
    of stage. An attribute added without reaching ``state()`` fails the first assertion."""
    cfg = LeagueConfig(
        curriculum=[{"name": "a", "promote": {"win_rate": 0.5, "min_games": 1}}, {"name": "b"}], snapshot_against="pool"
    )
    league = League(cfg)
    assert sorted(set(vars(league)) - {"cfg"}) == sorted(league.state())
    league.add_snapshot(0, {"w": np.arange(3, dtype=np.float32)})
    league.record([{"opponent": "main@0", "score": 1.0, "seat": 0}, {"opponent": "heuristic", "score": 0.5, "seat": 1}])
    league.maybe_promote(1)
    league.add_snapshot(1, {"w": np.ones(3, dtype=np.float32)})
    league.record([{"opponent": "main@1", "score": 0.0, "seat": 1, "stage": 1}])
    restored = League.from_state(cfg, league.state())
    assert differences(restored, league) == []
