"""``kdrill run``'s pytest (-qq with a run id) prints no progress letter for a passed case: the
run's summary gives each verdict. Any other pytest session keeps pytest's own letters. Runs real
pytest sessions (pytester) with kdrill's plugin; no cluster."""

pytest_plugins = ["pytester"]

TESTS = """
def test_passes():
    print("a drill's own line")

def test_fails():
    assert 1 == 2
"""


def session_lines(pytester, tmp_path, monkeypatch, *args) -> list[str]:
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    pytester.makepyfile(test_cases=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "-r", "fEs", *args)
    assert result.ret == 1
    return result.stdout.lines


def test_kdrill_run_prints_no_letter_for_a_passed_case(pytester, tmp_path, monkeypatch):
    lines = session_lines(pytester, tmp_path, monkeypatch, "-qq", "--kdrill-run-id=r1",
                          f"--kdrill-reports={tmp_path / 'reports'}")
    # The passed case's output line is followed by the failed case's F alone, not ".F".
    assert lines[lines.index("a drill's own line") + 1] == "F"
    assert "FAILED test_cases.py::test_fails - assert 1 == 2" in lines
    assert not any(" passed" in line for line in lines), lines


def test_other_sessions_keep_pytests_letters(pytester, tmp_path, monkeypatch):
    lines = session_lines(pytester, tmp_path, monkeypatch, "-qq")
    assert lines[lines.index("a drill's own line") + 1] == ".F"
