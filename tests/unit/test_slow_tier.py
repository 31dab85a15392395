"""tests/slow_tier.py: the slow tier's list from pytest's --durations lines."""

import slow_tier


def test_a_test_s_phases_add_up_and_the_xdist_group_suffix_is_dropped():
    lines = [
        '============================= slowest durations =============================',
        '1.50s call     tests/a.py::test_x[ray-2]@ray',
        '0.70s setup    tests/a.py::test_x[ray-2]@ray',
        '0.01s teardown tests/a.py::test_x[ray-2]',
        '1.99s call     tests/b.py::test_y',
        '(12 durations < 0.005s hidden.)',
    ]
    got = slow_tier.totals(lines)
    assert set(got) == {'tests/a.py::test_x[ray-2]', 'tests/b.py::test_y'}
    assert abs(got['tests/a.py::test_x[ray-2]'] - 2.21) < 1e-9


def test_main_lists_the_tests_at_or_over_the_threshold_slowest_first(tmp_path, capsys):
    t = slow_tier.THRESHOLD_S
    f = tmp_path / 'durations.txt'
    f.write_text(
        f'{t + 1:.2f}s call     tests/a.py::test_x\n'
        f'{t:.2f}s call     tests/b.py::test_y\n'
        f'{t - 0.01:.2f}s call     tests/c.py::test_z\n'
        f'{t + 3:.2f}s setup    tests/d.py::test_w@remote\n'
    )
    assert slow_tier.main(['slow_tier.py', str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('#') and '3 of 4 tests' in out[0]
    assert out[1:] == ['tests/d.py::test_w', 'tests/a.py::test_x', 'tests/b.py::test_y']
    listed = tmp_path / 'slow.txt'
    listed.write_text('\n'.join(out) + '\n\n')
    assert slow_tier.listed(listed) == {
        'tests/d.py::test_w',
        'tests/a.py::test_x',
        'tests/b.py::test_y',
    }


def test_the_watch_s_lines_of_a_quick_run_join_a_full_run_s_durations(tmp_path, capsys):
    t = slow_tier.THRESHOLD_S
    full = tmp_path / 'full.txt'
    full.write_text(
        f'{t / 2:.2f}s call     tests/a.py::test_x\n{t / 2:.2f}s call     tests/b.py::test_y\n'
    )
    quick = tmp_path / 'quick.txt'
    quick.write_text(
        '---- 1 test(s) outside the slow tier took >= 4 s (tests/slow_tier.py) ----\n'
        '  12.5s tests/a.py::test_x\n'
        '5 passed in 30.00s\n'
    )
    assert slow_tier.main(['slow_tier.py', str(full), str(quick)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ['tests/a.py::test_x']


def test_no_duration_lines_is_an_error_not_an_empty_list(tmp_path, capsys):
    f = tmp_path / 'out.txt'
    f.write_text('5 passed in 1.00s\n')
    assert slow_tier.main(['slow_tier.py', str(f)]) == 1
    assert 'no duration lines' in capsys.readouterr().err


def test_the_project_list_names_tests_of_the_suite():
    ids = slow_tier.listed()
    assert len(ids) > 50
    assert all(i.startswith('tests/') and '::' in i and '@' not in i for i in ids)


def test_the_watch_names_quick_tests_over_twice_the_threshold_not_slow_ones():
    w = slow_tier.Watch()
    w.add('tests/a.py::test_x@ray', 3.0, False)
    w.add('tests/a.py::test_x', 1.5, False)  # its teardown: 4.5 s in all
    w.add('tests/b.py::test_y', 9.0, True)  # in the slow tier
    w.add('tests/c.py::test_z', slow_tier.WATCH_S - 0.01, False)
    w.add('tests/d.py::test_w', 6.0, False)
    assert w.over() == ['tests/d.py::test_w', 'tests/a.py::test_x']
