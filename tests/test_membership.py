"""Worker membership (``rollout/membership.py``), the one record of who samples for the sampler, and the driver's
roster that says each change once (``driver/roster.py``). The samplers' paths through them on real actors are in
tests/test_eviction.py, test_async.py and test_faults.py; a whole run's on a multi-node cluster in test_nodes.py."""

import logging

from distrl.config import load_config
from distrl.data.messages import SampleReport
from distrl.driver.roster import Roster
from distrl.driver.run_state import RunState
from distrl.rollout.membership import Membership


def samples(members: Membership, index: int) -> bool:
    """Whether worker ``index`` is sent samples now: neither down nor lost."""
    return index not in members.down and index not in members.lost


def test_a_worker_that_died_then_was_evicted_is_reported_both_ways():
    """Its node died (down), Ray restarted it elsewhere (back), then distrl evicted it for a learner's room: two downs,
    one of them an eviction, and no unreported back (its successor is reported once it answers)."""
    members = Membership([None] * 4, 0)
    members.went_down(2)
    members.back(2)
    members.evict(3)
    members.evict(2)
    events = members.events()
    assert events == {"workers_down": [2, 3, 2], "workers_evicted": [3, 2], "workers_back": [], "workers_lost": []}
    assert members.events() == {"workers_down": [], "workers_evicted": [], "workers_back": [], "workers_lost": []}
    assert not samples(members, 2) and not samples(members, 3) and samples(members, 0)


def test_a_worker_lost_with_its_node_unseen_then_evicted_is_reported_both_ways(ray_local):
    """Its node died while the loop rebuilt the learner (no sampler saw it go down), Ray restarted it on another node,
    into the room the learner was to take, and distrl evicted it: it stopped answering, then it was evicted."""
    members = Membership([None] * 4, 0)
    members.sampled_on(2, "ff" * 28)  # a node this Ray does not have: gone
    members.sampled_on(3, ray_local.get_runtime_context().get_node_id())  # alive
    members.evict(3)
    members.evict(2)
    assert members.events() == {
        "workers_down": [3, 2, 2],
        "workers_evicted": [3, 2],
        "workers_back": [],
        "workers_lost": [],
    }


def test_a_worker_restarted_elsewhere_between_two_calls_is_reported_down_and_back(ray_local):
    """Its node died while the loop rebuilt a lost learner and Ray restarted it on another node before its next call,
    which the new process answered: no call failed, yet it went down with its node (and spent no restart). One on a
    live node is a crash (a restart spent, no loss); one distrl killed (a timeout's) is neither."""
    members = Membership([None] * 3, 1)
    alive = ray_local.get_runtime_context().get_node_id()
    members.sampled_on(0, "ff" * 28)  # a node this Ray does not have: gone
    members.sampled_on(1, alive)
    members.sampled_on(2, alive)
    for index in range(3):
        assert members.seen(index, "first")
    members.budget.killed.add(2)
    assert members.seen(0, "second") and members.seen(1, "second") and members.seen(2, "second")
    assert members.events() == {"workers_down": [0], "workers_evicted": [], "workers_back": [0], "workers_lost": []}
    assert samples(members, 0) and members.budget.crashes == [0, 1, 0]
    members.back(0)  # the stream's next line after seen: no second report
    assert members.events()["workers_back"] == []
    assert members.seen(0, "second") and members.events()["workers_down"] == []  # the same process again: nothing


def test_an_eviction_of_a_worker_already_down_is_not_a_second_loss():
    members = Membership([None] * 2, 0)
    members.went_down(1)
    members.evict(1)  # e.g. its node went while a learner's room was being made
    assert members.events()["workers_down"] == [1] and 1 in members.evicted
    members.replace(1, "successor")
    assert members.workers[1] == "successor" and not samples(members, 1)
    members.back(1)
    assert members.events()["workers_back"] == [1] and samples(members, 1) and not members.evicted


def test_lost_workers_are_reported_once_and_a_replacement_takes_the_place_of_one():
    members = Membership([None] * 2, 0)
    members.went_down(0)
    members.lose(0)
    members.lose(0)
    assert members.events()["workers_lost"] == [0] and not samples(members, 0) and not members.all_lost()
    members.lose(1)
    assert members.all_lost()
    members.replace(0, "successor")
    assert 0 not in members.lost and not samples(members, 0)


def test_a_range_worker_not_started_is_reported_joined_on_its_first_answer():
    members = Membership([None] * 3, 0)
    members.not_started([2])
    members.back(0)  # answering all along: nothing to say
    members.back(2)
    assert members.events()["workers_back"] == [2]


def _roster():
    config = load_config(None, ["rollout.num_workers=4"])
    counters, placed = RunState(), []

    def place(index: int) -> bool:
        placed.append(index)
        return False

    return Roster(config.rollout, counters, [0, 1, 2, 3], lambda index: "node x", place), counters, placed


def test_the_roster_tells_a_worker_that_stopped_answering_from_one_that_was_evicted(caplog):
    roster, counters, placed = _roster()
    with caplog.at_level(logging.INFO, logger="distrl.driver"):
        stop = roster.follow(SampleReport([], workers_down=[2, 3, 2], workers_evicted=[3, 2]))
    said = [r.getMessage() for r in caplog.records]
    assert stop is None and roster.answering == {0, 1} and counters.workers_lost == 3
    assert sum("worker-2 on node x stopped answering" in line for line in said) == 1
    assert sum("worker-2 is out (evicted" in line for line in said) == 1
    assert sum("worker-3 is out (evicted" in line for line in said) == 1
    assert not any("worker-3 on node x stopped answering" in line for line in said)
    roster.follow(SampleReport([], workers_back=[2]))
    assert roster.answering == {0, 1, 2} and placed == [2]


def test_the_roster_counts_a_worker_lost_for_good_once():
    roster, counters, _ = _roster()
    roster.follow(SampleReport([], workers_lost=[1]))
    roster.follow(SampleReport([], workers_lost=[1]))
    assert counters.workers_lost == 1 and roster.lost_for_good == {1} and roster.answering == {0, 2, 3}
    roster.follow(SampleReport([], workers_down=[0]))
    roster.follow(SampleReport([], workers_lost=[0]))  # counted when it stopped answering
    assert counters.workers_lost == 2
