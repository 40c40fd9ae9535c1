"""The live progress's time left: to whichever stop comes first, a return target included."""

import pytest

from distrl.config import load_config
from distrl.driver.progress import ProgressReporter, eta_seconds, return_eta


def test_return_eta_follows_the_returns_trend():
    # +1 return per 1,000 steps; at 100 steps/s the 50 return left take 50,000 steps, 500 s.
    trend = [(1000 * i, 100.0 + i) for i in range(5)]
    assert return_eta(154.0, trend, 100.0) == pytest.approx(500.0)
    assert return_eta(100.0, trend, 100.0) == 0.0  # met already
    assert return_eta(200.0, trend[:2], 100.0) is None  # too few points for a trend
    assert return_eta(200.0, [(1000 * i, 100.0 - i) for i in range(5)], 100.0) is None  # falling: no ETA


def test_eta_counts_toward_the_nearest_stop():
    config = load_config(None, ["stop.env_steps=1000000", "stop.time_s=3600", "stop.episode_return_mean=154"])
    trend = [(1000 * i, 100.0 + i) for i in range(5)]
    assert eta_seconds(config, 4000, 10.0, 100.0, trend) == (pytest.approx(500.0), "return")
    assert eta_seconds(config, 4000, 3500.0, 100.0, trend) == (100.0, "time")
    assert eta_seconds(config, 990_000, 10.0, 100.0, trend) == (100.0, "steps")
    assert eta_seconds(config, 4000, 10.0, 100.0) == (3590.0, "time")  # no trend yet: the return has no ETA
    only_return = load_config(None, ["stop.env_steps=null", "stop.episode_return_mean=154"])
    assert eta_seconds(only_return, 4000, 10.0, 100.0) == (None, "")


def test_progress_lines_name_the_stop_they_count_toward(caplog):
    config = load_config(None, ["stop.env_steps=1000000", "stop.episode_return_mean=154", "logging.log_every_s=0.001"])
    reporter = ProgressReporter(config)
    assert reporter.mode == "lines"
    with caplog.at_level("INFO", logger="distrl.progress"):
        for i in range(5):
            reporter.last_line = 0.0  # a line every row
            reporter.update(
                {
                    "iteration": i + 1,
                    "env_steps": 1000 * i,
                    "sps": 100.0,
                    "sps_avg": 100.0,
                    "episode_return_mean": 100.0 + i,
                    "time_s": 10.0 * i,
                }
            )
    assert caplog.messages[-1].endswith("ETA 8:20 (return)"), caplog.messages[-1]
    reporter.phase("starting Ray")  # no bar: nothing to name it on
    reporter.close()


def test_a_resumed_runs_progress_gives_this_commands_time_and_the_runs_apart(caplog):
    config = load_config(None, ["stop.env_steps=1000000", "logging.log_every_s=0.001"])
    row = {
        "iteration": 30,
        "env_steps": 200_000,
        "sps": 100.0,
        "sps_avg": 100.0,
        "episode_return_mean": 1.0,
        "time_s": 59.0,
    }
    with caplog.at_level("INFO", logger="distrl.progress"):
        ProgressReporter(config).update(row)
        ProgressReporter(config, resumed_s=35.0).update(row)  # the run's first 35 s came before this command
    fresh, resumed = caplog.messages[-2:]
    assert "| 0:59 elapsed | ETA" in fresh
    assert "| 0:24 elapsed (run 0:59) | ETA" in resumed, resumed


def test_the_line_drops_its_least_useful_fields_before_it_cuts_a_word():
    from distrl.driver.progress import fitted

    fields = [(9, "180,224 steps"), (7, "return 476.3"), (4, "43,204 steps/s"), (5, "0:17 elapsed"), (6, "ETA 0:00")]
    assert fitted(fields, 200) == "180,224 steps | return 476.3 | 43,204 steps/s | 0:17 elapsed | ETA 0:00"
    assert fitted(fields, 60) == "180,224 steps | return 476.3 | 0:17 elapsed | ETA 0:00"  # steps/s went first
    assert fitted(fields, 40) == "180,224 steps | return 476.3 | ETA 0:00"
    assert fitted(fields, 13) == "180,224 steps"
    assert fitted(fields, 8) == "180,224…"  # the first field alone too wide: the one cut, marked


def test_the_bar_fills_toward_the_stop_its_eta_counts_down_to():
    from distrl.driver.progress import stop_fractions

    config = load_config(None, ["stop.env_steps=1000000", "stop.time_s=100", "stop.episode_return_mean=475"])
    assert stop_fractions(config, 250_000, 10.0, 250.0, 25.0) == {"steps": 0.25, "time": 0.1, "return": 0.5}
    assert stop_fractions(config, 250_000, 200.0, 500.0, 25.0) == {"steps": 0.25, "time": 1.0, "return": 1.0}
    reporter = ProgressReporter(config)
    trend = [(100_000 * i, 25.0 + 50.0 * i) for i in range(5)]  # +50 a row: the return target comes first
    for steps, ret in trend:
        reporter.update(
            {"iteration": 1, "env_steps": steps, "sps": 1e5, "sps_avg": 1e5, "episode_return_mean": ret, "time_s": 1.0}
        )
    assert reporter.fraction == pytest.approx((225.0 - 25.0) / (475.0 - 25.0))  # toward the return, not the steps
    reporter.close()
