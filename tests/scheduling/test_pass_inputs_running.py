"""scheduling.pass_inputs.engine_running_jobs: the RunningJob of each running row, the one of the last pass
given back for the very row read then (found in C: 47,700 rows at 10,000 racks), made again for a changed
row, a new one, and a row without a start ("started now"), and the same jobs whatever was kept."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.pass_inputs import engine_running_jobs

SLUG = {1: "alpha", 2: "beta"}
PROJECTS = {7: "vision"}


def row(pk: int, gpus: int = 4, since: float | None = 100.0, department: int = 1, over: bool = False):
    """A `read_running` row: pk, department, GPUs, limit (min), over_quota, class, project, since, placed."""
    return (pk, department, gpus, 60, over, "train", 7 if pk % 2 else None, since, 50.0)


def test_the_very_row_of_the_last_pass_gives_back_its_job_and_others_are_made_again():
    kept: dict = {}
    first_rows = [row(1), row(2), row(3, since=None)]
    first = engine_running_jobs(first_rows, SLUG, kept, PROJECTS)
    assert [(j.id, j.department, j.project, j.expected_end) for j in first[:2]] == [
        (1, "alpha", "vision", 3700.0),
        (2, "alpha", None, 3700.0),
    ]
    changed = row(2, gpus=8)
    second = engine_running_jobs([first_rows[0], changed, first_rows[2], row(4)], SLUG, kept, PROJECTS)
    assert second[0] is first[0]  # the very row: its job
    assert second[1] is not first[1] and second[1].gpus == 8  # a changed row: made again
    assert second[2] is not first[2]  # started now: never kept
    assert second[3].id == 4
    equal_row = row(1)  # equal, but not the row read then (a cold read): made again, equal
    third = engine_running_jobs([equal_row], SLUG, kept, PROJECTS)
    assert third[0] is not second[0] and third[0] == second[0]
    assert set(kept["rows"]) == {1}


def test_a_renamed_department_makes_every_job_again():
    kept: dict = {}
    rows = [row(1), row(2, department=2)]
    first = engine_running_jobs(rows, SLUG, kept, PROJECTS)
    again = engine_running_jobs(rows, {1: "alpha", 2: "gamma"}, kept, PROJECTS)
    assert again[0] is not first[0] and [j.department for j in again] == ["alpha", "gamma"]


@settings(max_examples=100, deadline=None)
@given(
    passes=st.lists(
        st.lists(st.tuples(st.integers(1, 12), st.sampled_from([1, 2, 4]), st.booleans()), max_size=12),
        min_size=1,
        max_size=5,
    )
)
def test_whatever_was_kept_the_jobs_are_the_ones_made_fresh(passes):
    kept: dict = {}
    rows_by_pk: dict[int, tuple] = {}
    for rows_spec in passes:
        rows = []
        for pk, gpus, started in {pk: (pk, g, s) for pk, g, s in rows_spec}.values():
            fresh = row(pk, gpus, 100.0 if started else None)
            if rows_by_pk.get(pk) != fresh or fresh[7] is None:
                rows_by_pk[pk] = fresh
            rows.append(rows_by_pk[pk])  # the same object while unchanged, as a kept cluster gives
        jobs = engine_running_jobs(rows, SLUG, kept, PROJECTS)
        alone = engine_running_jobs(rows, SLUG, {}, PROJECTS)
        assert [(j.id, j.gpus, j.department, j.project) for j in jobs] == [
            (j.id, j.gpus, j.department, j.project) for j in alone
        ]
        assert [j.started_at for j in jobs if j.started_at == 100.0] == [
            j.started_at for j in alone if j.started_at == 100.0
        ]
        # Kept in place: exactly this pass's rows with a start (jobs gone since, or started now, are not).
        assert set(kept["rows"]) == set(kept["jobs"]) == {r[0] for r in rows if r[7] is not None}
        assert all(kept["rows"][r[0]] is r for r in rows if r[7] is not None)
