"""bench_phases.py: the phased sidecar notes every exchange's phases in path order (a stream's
first write before its calls are judged, no first write for a whole reply), the table's rows
come from those notes, and the instrument leaves the answers as they were. No timing is
asserted beyond order (the machine is shared and noisy)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_phases import ORDER, Row, measure, rows, table
from proxybench.phased import END
from proxybench.report import SCENARIOS, Scenario


def test_rows_take_medians_in_path_order_and_steps_from_the_phase_reached_before() -> None:
    noted = [
        {"checked": 0.000100, "sent": 0.000150, "answer": 0.000400, END: 0.000700},
        {"checked": 0.000200, "sent": 0.000230, "answer": 0.000500, "first_write": 0.000600, END: 0.000900},
        {"checked": 0.000300, "sent": 0.000330, "answer": 0.000600, END: 0.001000},
    ]
    found = {row.phase: row for row in rows(noted)}
    assert list(found) == [name for name in ORDER if name in found]
    assert found["checked"] == Row("checked", 3, pytest.approx(200.0), pytest.approx(200.0))
    assert found["sent"].step_us == pytest.approx(30.0)  # 50, 30, 30
    assert found["first_write"].exchanges == 1 and found["first_write"].step_us == pytest.approx(100.0)
    # The end's step counts from the last phase each exchange reached (first_write for one).
    assert found[END].step_us == pytest.approx(300.0)  # 300, 300, 400


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.api.name == "ANTHROPIC"], ids=lambda s: s.key)
async def test_every_exchange_reaches_its_phases_in_order(scenario: Scenario) -> None:
    found = await measure(scenario, 20)  # each request answered as it should, or measure raises
    names = [row.phase for row in found]
    expected = ["checked", "sent", "answer", "calls_checked", "answered", END]
    if scenario.stream:
        expected.insert(3, "first_write")
    assert names == expected
    assert all(row.exchanges == 20 for row in found)
    times = [row.since_start_us for row in found]
    assert times == sorted(times) and times[0] > 0
    assert ("first_write" in table(scenario, found)) is scenario.stream
