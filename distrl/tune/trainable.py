"""One Ray Tune trial: a distrl run inside the trial's placement group, reporting every iteration.

The trial's resources come from its config (``trial_resources``): an empty head bundle for the
trial itself (it only drives, like ``distrl train``'s driver), then one bundle per learner and
one per rollout worker, which the run's actors take by index. Checkpoints go to Tune every
``checkpoint_every`` iterations and at the end, so PBT can copy a strong trial into a weak one;
a trial started from a checkpoint continues from it with its own (perturbed) settings.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from distrl.config import Config, load_config


def trial_resources(config: Config):
    """The trial's placement group: nothing for the trial itself, a bundle per learner, a bundle per worker."""
    from ray.tune import PlacementGroupFactory

    from distrl.driver.placement import learner_bundle, worker_bundle  # (imports ray: only once a trial is set up)

    bundles = (
        [{}]
        + [learner_bundle(config)] * config.learner.num_learners
        + [worker_bundle(config)] * config.rollout.max_workers
    )
    return PlacementGroupFactory(bundles, strategy="PACK")


def trial_config(base: dict, params: dict) -> Config:
    """The base config tree (the search file's overrides applied) with this trial's sampled values."""
    return load_config(base, params)


def resources_for(base: dict, params: dict):
    return trial_resources(trial_config(base, params))


def _reportable(row: dict) -> dict:
    """Numbers Tune can compare; a metric with no value yet (no episode finished) is left out, not faked."""
    return {
        k: v for k, v in row.items() if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
    }


def run_trial(params: dict, base: dict, checkpoint_every: int) -> None:
    """The trainable (``tune.with_parameters`` passes ``base`` and ``checkpoint_every`` through the object store)."""
    import ray
    from ray import tune

    from distrl.common.checkpoint import load_checkpoint, save_checkpoint
    from distrl.driver import Driver

    config = trial_config(base, params)
    every = checkpoint_every
    run_dir = Path(tune.get_context().get_trial_dir()) / "run"
    resume_payload = None
    start = tune.get_checkpoint()
    if start is not None:
        with start.as_directory() as directory:
            resume_payload = load_checkpoint(directory)
        # PBT: the donor's counters and weights, this trial's settings (its perturbed config).
        resume_payload["config"] = config.model_dump(mode="json")

    newest_eval: dict = {}  # an evaluation's keys, carried in every report until the next one lands

    def report(row: dict, driver: Driver) -> None:
        newest_eval.update({k: v for k, v in _reportable(row).items() if k.startswith("eval_")})
        metrics = {**newest_eval, **_reportable(row)}
        if driver.counters.iteration % every:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="distrl-tune-") as tmp:
            save_checkpoint(Path(tmp), driver.counters.iteration, driver.checkpoint_payload(), keep=1)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(tmp))

    driver = Driver(
        config,
        run_dir,
        resume_payload=resume_payload,
        on_iteration=report,
        placement_group=ray.util.get_current_placement_group(),
    )
    summary = driver.run()
    final = {
        k: v for k, v in (summary.get("final_eval") or {}).items() if k.startswith("eval_") and k != "eval_best_again"
    }
    if final and driver.best is not None:  # the final round came after the last row: Tune hears of it too
        final["eval_return_mean"] = driver.best.score  # what the run's best checkpoint scored there
        tune.report({**newest_eval, **_reportable(final), "iteration": driver.counters.iteration})
