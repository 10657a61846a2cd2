"""When a training job stops on its own: EndGuess, the rule every worker's stop vote uses."""

from testbed.workloads.training.workers.horovod_worker import EndGuess


def guess(starts: list[float], deadline: float | None, lag: int = 1) -> list[bool]:
    g = EndGuess(deadline)
    return [g.late(s, lag) for s in starts]


def test_lengths_that_vary_do_not_let_an_iteration_start_after_the_end():
    # the starts of a failing run (2026-11-28): lengths 0.261 0.254 0.284 s; end at 1.0 s.
    starts = [0.0, 0.261, 0.515]
    # from the last length alone, 0.515 + 0.254 = 0.769 < 1.0: the next (0.799) may start, and
    # the one after it would be judged at 0.799 + 0.284 = 1.083: late. Hand-computed with the
    # longest length, the same: the iteration at 0.799 is the last, and it starts before 1.0.
    assert guess([*starts, 0.799], 1.0) == [False, False, False, True]
    # end at 0.77: the next iteration starts at 0.799, after it. The last length alone judged
    # 0.515 + 0.254 = 0.769 < 0.77 and let it start; the longest, 0.515 + 0.261 = 0.776, stops.
    assert guess(starts, 0.77) == [False, False, True]


def test_without_a_barrier_it_judges_two_iterations_ahead():
    starts = [0.0, 0.25, 0.5]
    assert guess(starts, 1.0, lag=2) == [False, False, True]  # 0.5 + 2 × 0.25 ≥ 1.0
    assert guess(starts, 1.01, lag=2) == [False, False, False]


def test_only_the_last_lengths_count_and_no_deadline_never_stops():
    starts = [0.0, 1.0] + [1.0 + 0.1 * k for k in range(1, EndGuess.KEEP + 1)]
    # the 1 s length has left the window of the last KEEP lengths by the last start
    assert guess(starts, starts[-1] + 0.15)[-1] is False
    assert guess(starts, starts[-1] + 0.05)[-1] is True
    assert not any(guess(starts, None))
