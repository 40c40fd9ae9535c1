"""``distrl league RUN``: a round robin between a league run's snapshots, its final learner and the baselines.

Every pair plays ``games`` games, half with each in the first seat, every trained player
sampling its moves (a greedy policy in a deterministic game would replay one game). The Elo
table is fitted to all the games at once (``elo.fit``, the random player held at
``league.elo.initial``), written as JSON and Markdown, with a PNG of Elo over training (each
snapshot's tournament Elo at its iteration, beside the learner's Elo as rated during the run).
``--replays DIR`` keeps the games between the two best-rated players: their moves (board
games), positions and an MP4 where the game renders (``distrl/Duel-v0``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from distrl.common.checkpoint import CheckpointError, load_checkpoint_file, resolve_checkpoint
from distrl.common.files import replace_whole
from distrl.config import checkpoint_config
from distrl.envs.games import make_game, probe_game
from distrl.league import elo
from distrl.league.league import ANCHOR, League
from distrl.league.matches import Match, baseline_player, model_player, play


def load_league(path: str | Path, which: str = "latest") -> tuple:
    """``(config, league, learner model state, iteration, file)`` of a league run's newest intact checkpoint (or its
    best, ``which``; or a file)."""
    payload, file = load_checkpoint_file(path, which)
    config = checkpoint_config(payload, path)
    if config.league is None or "league" not in payload:
        raise CheckpointError(f"checkpoint={str(path)!r}: not a league run (its config has no league section)")
    league = League.from_state(config.league, payload["league"])
    return config, league, payload["learner"]["model"], int(payload["counters"]["iteration"]), file


def build_players(
    config, league: League, learner_state: dict, iteration: int, greedy: Collection[str] = ()
) -> dict[str, tuple]:
    """``name -> (player, kind, iteration)`` for the baselines, every snapshot and the final learner (``main``); the
    trained players named in ``greedy`` take their most likely legal move, the others sample."""
    game = make_game(config.env.id, 1, game_kwargs(config))
    players = {"random": (baseline_player(game, "random"), "baseline", 0)}
    if game.has_heuristic:
        players["heuristic"] = (baseline_player(game, "heuristic"), "baseline", 0)
    for member in league.snapshots:
        players[member.name] = (
            trained_player(config, member.weights, member.name in greedy),
            "snapshot",
            member.iteration,
        )
    players["main"] = (trained_player(config, learner_state, "main" in greedy), "learner", iteration)
    return players


def trained_player(config, model_state: dict, deterministic: bool):
    """A player acting with a model state of the run's model (tensors or numpy arrays)."""
    import torch

    from distrl.models import build_model

    model = build_model(*probe_game(config), config.model)
    model.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in model_state.items()})
    return model_player(model, deterministic)


def against_fixed(
    config, model_state: dict, opponents: Collection[str], games: int, deterministic: bool, seed: int
) -> dict[str, list[Match]]:
    """The learner's ``games`` games against each of the fixed ``opponents`` (``random``, ``heuristic``: the game's
    scripted player at its own settings, not a curriculum stage's), half in each seat, on the game the league last
    played: evaluation during training, comparable across a run whatever the league's pool holds by then."""
    game = make_game(config.env.id, 1, game_kwargs(config))
    learner = trained_player(config, model_state, deterministic)
    rng = np.random.default_rng(seed)
    return {
        name: play(config.env.id, game_kwargs(config), learner, baseline_player(game, name), games, rng)
        for name in opponents
        if name != "heuristic" or game.has_heuristic
    }


def game_kwargs(config) -> dict:
    """The game as the league last played it: the last curriculum stage's kwargs over env.kwargs."""
    return {**config.env.kwargs, **config.league.stages()[-1].env_kwargs}


def run_tournament(
    run: str | Path, games: int = 20, out: str | Path | None = None, replays: str | Path | None = None, seed: int = 0
) -> dict:
    """Play the round robin, write ``tournament.json``, ``tournament.md`` and ``elo.png`` in ``out`` (default
    ``RUN/league``); returns the table."""
    run = Path(run)
    checkpoint = resolve_checkpoint(run)
    config, league, learner_state, iteration, _ = load_league(run)
    players = build_players(config, league, learner_state, iteration)
    rng = np.random.default_rng(seed)
    names = list(players)
    results: list[tuple[str, str, float]] = []
    matches: dict[tuple[str, str], list[Match]] = {}
    for a, b in itertools.combinations(names, 2):
        played = play(config.env.id, game_kwargs(config), players[a][0], players[b][0], games, rng)
        matches[(a, b)] = played
        results.extend((a, b, m.score) for m in played)
    ratings = elo.fit(names, results, ANCHOR, config.league.elo.initial)
    rows = []
    for name in sorted(names, key=lambda n: -ratings[n]):
        wins = sum(s == 1.0 for a, b, s in results if a == name) + sum(s == 0.0 for a, b, s in results if b == name)
        draws = sum(s == 0.5 for a, b, s in results if name in (a, b))
        total = sum(1 for a, b, _ in results if name in (a, b))
        rows.append(
            {
                "player": name,
                "kind": players[name][1],
                "iteration": players[name][2],
                "elo": round(ratings[name], 1),
                "wins": wins,
                "draws": draws,
                "losses": total - wins - draws,
                "score": round((wins + 0.5 * draws) / max(1, total), 3),
            }
        )
    table = {
        "run": str(run),
        "checkpoint": str(checkpoint),
        "game": config.env.id,
        "games_per_pair": games,
        "anchor": f"{ANCHOR} = {config.league.elo.initial:g}",
        "players": rows,
        "learner_elo_in_training": round(league.rating, 1),
    }
    out = Path(out) if out is not None else run / "league"
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "tournament.json", json.dumps(table, indent=2) + "\n")
    _write(out / "tournament.md", markdown(table))
    table["png"] = _plot(rows, run / "metrics.jsonl", out / "elo.png", config.env.id)
    if replays is not None:
        top = [row["player"] for row in rows[:2]]
        pair = tuple(top) if tuple(top) in matches else tuple(reversed(top))
        table["replays"] = save_replays(config, pair, matches[pair], Path(replays))
    return table


def markdown(table: dict) -> str:
    lines = [
        f"Round robin on {table['game']}: {table['games_per_pair']} games per pair, both seats; Elo fitted to every "
        f"game, {table['anchor']}. Checkpoint `{table['checkpoint']}`.",
        "",
        "| player | kind | iteration | Elo | W | D | L | score |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in table["players"]:
        lines.append(
            f"| {r['player']} | {r['kind']} | {r['iteration']} | {r['elo']:.0f} | {r['wins']} | {r['draws']} | "
            f"{r['losses']} | {r['score']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    replace_whole(path, lambda tmp: tmp.write_text(text))


def _plot(rows: list[dict], metrics: Path, path: Path, game: str) -> str | None:
    """Elo over training: snapshots' tournament Elo at their iterations, the learner's rating during the run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    trained = sorted((r for r in rows if r["kind"] != "baseline"), key=lambda r: r["iteration"])
    ax.plot(
        [r["iteration"] for r in trained], [r["elo"] for r in trained], "o-", label="tournament Elo (snapshots, final)"
    )
    if metrics.exists():
        points = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        points = [(p["iteration"], p["league_elo"]) for p in points if "league_elo" in p]
        if points:
            ax.plot(*zip(*points), "-", alpha=0.6, label="learner's Elo during training")
    for r in rows:
        if r["kind"] == "baseline":
            ax.axhline(r["elo"], linestyle="--", color="grey", linewidth=0.8)
            ax.text(0, r["elo"], f" {r['player']}", va="bottom", fontsize=8, color="grey")
    ax.set_xlabel("iteration")
    ax.set_ylabel("Elo")
    ax.set_title(f"Elo over training: {game}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    try:
        replace_whole(path, lambda tmp: fig.savefig(tmp, dpi=110), suffix=".png")
    finally:
        plt.close(fig)
    return str(path)


def save_replays(config, pair: tuple[str, str], matches: list[Match], directory: Path, count: int = 4) -> list[str]:
    """The first ``count`` games of ``pair`` (both seats): ``replay_N.json`` with the moves, and an MP4 where the
    game renders and moviepy is installed."""
    directory.mkdir(parents=True, exist_ok=True)
    game = make_game(config.env.id, 1, game_kwargs(config))
    written = []
    for i, match in enumerate(matches[:count]):
        first, second = (pair[0], pair[1]) if match.seat == 0 else (pair[1], pair[0])
        body = {
            "game": config.env.id,
            "seat_0": first,
            "seat_1": second,
            "result_for_seat_0": match.score if match.seat == 0 else 1.0 - match.score,
            **match.record,
        }
        path = directory / f"replay_{i}.json"
        _write(path, json.dumps(body) + "\n")
        written.append(str(path))
        if hasattr(game, "render") and "positions" in match.record:
            video = _video(game.render(match.record["positions"]), directory / f"replay_{i}.mp4")
            if video:
                written.append(video)
    return written


def _video(frames: list[np.ndarray], path: Path) -> str | None:
    try:
        from moviepy import ImageSequenceClip
    except ImportError:
        try:
            from moviepy.editor import ImageSequenceClip  # moviepy 1.x
        except ImportError:
            return None
    ImageSequenceClip(frames, fps=30).write_videofile(str(path), logger=None)
    return str(path)


def evaluate_against(
    path: str | Path,
    opponent: str,
    episodes: int,
    deterministic: bool,
    seed: int,
    say: Callable[[str], object] = lambda line: None,
    which: str = "best",
    how: str | None = None,
) -> list[Match]:
    """``distrl eval`` of a league run: its learner against ``opponent`` (random, heuristic or a snapshot's
    name), ``episodes`` games, half in each seat; a run directory's best checkpoint plays, or its newest
    (``which``); ``say`` is told which checkpoint plays (``how`` it was chosen, where the caller knows)."""
    config, league, learner_state, iteration, file = load_league(path, which)
    say(f"checkpoint {file} ({how})" if how else f"checkpoint {file} (iteration {iteration})")
    # A snapshot opponent samples its moves: two greedy players would replay one game.
    players = build_players(config, league, learner_state, iteration, greedy=("main",) if deterministic else ())
    if opponent not in players or opponent == "main":
        known = ", ".join(n for n in players if n != "main")
        raise CheckpointError(f"--opponent={opponent!r}: not in this run's league (known: {known})")
    return play(
        config.env.id,
        game_kwargs(config),
        players["main"][0],
        players[opponent][0],
        episodes,
        np.random.default_rng(seed),
    )
