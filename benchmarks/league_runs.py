"""A league run with every checkpoint kept (``train_league``), and connect four's 1-ply judge (``one_ply_judge``), a
stronger scripted player than the league's own, against which the league studies measure a learner
(``judge_row``): what ``league.py`` and ``league_best.py`` share."""

from __future__ import annotations

from pathlib import Path

from benchmarks import training


def train_league(config: str, run_dir: Path, seconds: float, every: int, overrides: list[str] | tuple = ()) -> dict:
    """The league trained for ``seconds`` from launch into ``run_dir``, a checkpoint every ``every`` iterations, all
    kept: its summary."""
    items = [f"stop.time_s={seconds}", f"checkpoint.every_iterations={every}", "checkpoint.keep=1000", *overrides]
    return training.train(config, items, what="training", keep=run_dir, checkpoints=True).summary


def one_ply_judge(obs, mask, rng):
    """Connect four's 1-ply judge, a stronger scripted player than the league's own: win now if it can, else block
    the opponent's immediate win, else avoid a column that lets the opponent win on top of it, choosing among the
    rest at random, weighted toward the centre. Observations ``[B, 6, 7, 2]`` from the mover's side."""
    import numpy as np

    from distrl.envs.games.connect_four import CENTRE_WEIGHTS, completes_four, landing_rows

    own, other = obs[..., 0] > 0.5, obs[..., 1] > 0.5
    landing = landing_rows(own | other)
    legal = landing >= 0 if mask is None else mask.astype(bool)
    win = completes_four(own, landing) & legal
    block = completes_four(other, landing) & legal
    gift = completes_four(other, np.where(landing >= 1, landing - 1, -1)) & legal  # the cell above ours wins for them
    safe = legal & ~gift
    weights = np.where(safe.any(1, keepdims=True), safe, legal) * CENTRE_WEIGHTS
    weights = np.where(block.any(1, keepdims=True), block * 1.0, weights)
    weights = np.where(win.any(1, keepdims=True), win * 1.0, weights)
    cdf = weights.cumsum(axis=1)
    u = (1.0 - rng.random(len(obs))) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(axis=1), 6)


def judge_row(run: Path, games: int, quiet: bool = False) -> dict:
    """Connect four: the learner of a run's newest checkpoint (or of a checkpoint file), greedily, against
    ``one_ply_judge``, ``games`` a seat."""
    import numpy as np

    from distrl.league.matches import play
    from distrl.league.tournament import build_players, game_kwargs, load_league

    config, league, learner_state, iteration, _ = load_league(run)
    players = build_players(config, league, learner_state, iteration, greedy=("main",))
    matches = play(
        config.env.id, game_kwargs(config), players["main"][0], one_ply_judge, 2 * games, np.random.default_rng(2)
    )
    row = {"iteration": iteration}
    for seat in (0, 1):
        scores = [m.score for m in matches if m.seat == seat]
        row[f"judge_seat{seat}"] = sum(s == 1.0 for s in scores) / len(scores)
        row[f"judge_draws_seat{seat}"] = sum(s == 0.5 for s in scores) / len(scores)
    if not quiet:
        print(
            f"learner at iteration {iteration} against the 1-ply judge: {row['judge_seat0']:.2f}/"
            f"{row['judge_seat1']:.2f} (draws {row['judge_draws_seat0']:.2f}/{row['judge_draws_seat1']:.2f})",
            flush=True,
        )
    return row
