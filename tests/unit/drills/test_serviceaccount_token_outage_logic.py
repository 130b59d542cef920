"""The pure logic of drills/test_serviceaccount_token_outage.py: what counts as a change of the
pod's token, which change is the replacement, and which outages hold the kubelet's refresh window."""

import importlib

import pytest

drill = importlib.import_module("drills.test_serviceaccount_token_outage")


def token(t, digest):
    return {"seen_at": t, "sha256": digest, "iat": 0, "exp": 600}


def test_a_new_digest_and_an_unreadable_file_are_changes_the_same_token_read_again_is_not():
    seen = [{"seen_at": 0.5, "error": "not there yet"}, token(1, "a"), {"seen_at": 5, "error": "gone"},
            token(6, "a"), token(9, "b"), token(12, "b")]
    assert drill._changes(seen) == [{"seen_at": 5, "error": "gone"}, token(9, "b")]


def test_the_replacement_is_the_first_new_token_seen_after_the_return():
    changes = drill._changes([token(1, "a"), token(300, "b"), {"seen_at": 400, "error": "x"}, token(700, "c")])
    assert drill._replacement(changes, 600) == token(700, "c")
    assert drill._replacement(changes, 200) == token(300, "b")
    assert drill._replacement(changes, 800) is None


@pytest.mark.parametrize("stop_age, restart_age, holds", [
    (15, 575, True),
    (466, 575, False),   # down from 471 s: the kubelet may refresh at 470 s with the API up
    (15, 555, False),    # up again before a whole resync after the refresh point (560 s)
])
def test_the_outage_as_it_happened_must_hold_the_refresh_window(stop_age, restart_age, holds):
    problem = drill._coverage_problem({"iat": 1000}, 1000 + stop_age, 1000 + restart_age)
    assert (problem is None) == holds


@pytest.mark.parametrize("hold, refused", [(560, False), (136, False), (135, True), (565, False), (566, True),
                                           (10, True)])
def test_a_hold_outside_the_refresh_window_is_refused_before_anything_is_made(hold, refused):
    problem = drill._hold_problem(hold)
    assert (problem is not None) == refused
    if refused:
        assert problem == f"expected more than 135 and at most 565 seconds, got {hold:g}"
