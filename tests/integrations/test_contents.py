"""Rendered files stored by content outside the push rows (integrations.contents, issue 32): pieces cut by
content, stored once, read back exactly, only the changed ones written; the directory target written from
them; garbage collection never takes what a kept push names."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from integrations import contents, push_history, push_runs, pushes
from integrations.contents import payload_of
from integrations.models import ConfigPiece, ConfigPush, PushStatus
from tests.integrations.test_pushes import change_state, push_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def local(local_target, demo_inventory):
    """The embedded directory target writing into render_dir, with the demo inventory to render."""
    return local_target


def lines_text(lines: int, tag: str = "") -> str:
    return "".join(
        f"NodeName=gb-r{n:05d}-t{n % 18:02d}{tag} Gres=gpu:4 CPUs=144 State=UNKNOWN\n" for n in range(lines)
    )


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab\nc-é日\n\n"), max_size=3000), st.integers(1, 4))
def test_cut_pieces_join_back_to_the_text(text, repeat):
    text = text * repeat * 40
    pieces = contents.cut(text)
    assert "".join(pieces) == text
    assert all(pieces) or pieces == [""] == [text]
    assert all(len(p) <= contents.PIECE_MAX + 4096 for p in pieces)


def test_a_local_change_changes_few_pieces():
    """A line changed in a 6 MB file changes a piece or two, not every piece after it."""
    before = lines_text(80_000)
    after = before.replace("gb-r40000-t04 ", "gb-r40000-t04 Features=x ", 1)
    assert after != before
    old, new = contents.cut(before), contents.cut(after)
    assert len(old) > 20
    assert len(set(new) - set(old)) <= 3


def test_split_stores_each_piece_once_and_reads_back_exactly():
    files = {"slurm/rackplane.conf": lines_text(30_000), "nfs/exports": "/x 10.0.0.0/8(rw)\n"}
    stored, texts = contents.split_payload({"files": files, "qos": [{"name": "a"}]})
    assert set(stored) == {"file_pieces", "qos"}
    assert contents.save_pieces(texts) == len(texts) > 2
    assert contents.save_pieces(texts) == 0  # stored once
    contents.PIECES.clear()  # read from the database, not the process's kept pieces
    loaded = contents.payload_of(stored)
    assert loaded["qos"] == [{"name": "a"}]
    assert dict(loaded["files"].items()) == files
    assert loaded["files"].size("slurm/rackplane.conf") == len(files["slurm/rackplane.conf"].encode())


def test_a_payload_without_whole_files_and_an_old_row_are_stored_and_read_as_they_are():
    objects = {"objects": [{"kind": "Node", "metadata": {"name": "n1"}}]}
    assert contents.split_payload(objects) == (objects, {})
    old_row = {"files": {"a.txt": "a\n"}}
    assert contents.payload_of(old_row) is old_row


def test_a_push_row_holds_digests_and_its_task_writes_the_files(
    local, render_dir, django_capture_on_commit_callbacks
):
    (push,) = push_now(django_capture_on_commit_callbacks)
    assert push.status == PushStatus.SUCCEEDED
    assert set(push.payload) == {"file_pieces"}
    assert "files" not in push.payload
    live = render_dir / "current"
    files = contents.payload_of(push.payload)["files"]
    for name in files:
        assert (live / name).read_text() == files[name]
    assert push.payload_hash == pushes.payload_hash(push.payload)


def test_a_change_stores_only_its_new_pieces(local, render_dir, django_capture_on_commit_callbacks):
    push_now(django_capture_on_commit_callbacks)
    before = set(ConfigPiece.objects.values_list("digest", flat=True))
    change_state("Vision")
    (second,) = push_now(django_capture_on_commit_callbacks)
    new = set(ConfigPiece.objects.values_list("digest", flat=True)) - before
    named = {d for pieces in second.payload["file_pieces"].values() for d, _ in pieces}
    assert new and new <= named
    assert len(new) < len(named)  # the unchanged files' pieces were not written again
    assert "vision" in (render_dir / "current" / "nfs/exports").read_text()


def test_a_worker_reads_only_the_pieces_the_live_version_lacks(
    local, render_dir, django_capture_on_commit_callbacks, django_assert_max_num_queries, monkeypatch
):
    """A push run by a process that kept nothing (another worker) takes unchanged pieces from the live
    version's bytes and links unchanged files; it reads from the database only the changed pieces."""
    push_now(django_capture_on_commit_callbacks)
    change_state("Vision")
    read: list[str] = []
    load = contents.load_pieces

    def counting(digests):
        digests = list(digests)
        read.extend(digests)
        return load(digests)

    monkeypatch.setattr(contents, "load_pieces", counting)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        (second,) = pushes.queue_pushes(reason="test")
    contents.PIECES.clear()
    push_runs.execute(second.pk)
    second.refresh_from_db()
    assert second.status == PushStatus.SUCCEEDED, second.log
    files = contents.payload_of(second.payload)["files"]
    first = ConfigPush.objects.filter(target=local).exclude(pk=second.pk).get()
    old = contents.payload_of(first.payload)["files"]
    new_digests = {d for name in files for d, _ in files.pieces(name)} - {
        d for name in old for d, _ in old.pieces(name)
    }
    assert set(read) == new_digests
    assert callbacks  # the task was queued on commit
    for name in files:
        assert (render_dir / "current" / name).read_text() == files[name]
    unchanged = [n for n in files if n in old and files.pieces(n) == old.pieces(n)]
    assert unchanged and all(
        (render_dir / "current" / n).stat().st_nlink > 1 for n in unchanged
    )  # linked, not written


def test_garbage_collection_keeps_what_kept_pushes_name(
    local, django_capture_on_commit_callbacks, monkeypatch
):
    push_now(django_capture_on_commit_callbacks)
    ConfigPiece.objects.create(digest="0" * 64, text="nobody names me\n")
    change_state("Vision")
    (second,) = push_now(django_capture_on_commit_callbacks)
    # Nothing was let go: nothing read, nothing collected (pieces stop being named only when a payload goes).
    assert ConfigPiece.objects.filter(digest="0" * 64).exists()
    monkeypatch.setattr(push_runs, "prune_payloads", functools.partial(pushes.prune_payloads, keep=1))
    change_state("Research")
    (third,) = push_now(django_capture_on_commit_callbacks)
    assert not ConfigPiece.objects.filter(digest="0" * 64).exists()  # collected after the push let one go
    second.refresh_from_db()
    assert second.payload == {}  # let go (keep=1): its pieces only third's names stay
    for push in ConfigPush.objects.exclude(payload={}):
        files = contents.payload_of(push.payload)["files"]
        assert all(files[name] is not None for name in files)  # every piece still there
    # Payloads let go: their pieces go with them, the last successful push's never.
    ConfigPush.objects.exclude(pk=third.pk).update(payload={})
    contents.collect_garbage()
    named = {d for pieces in third.payload["file_pieces"].values() for d, _ in pieces}
    assert set(ConfigPiece.objects.values_list("digest", flat=True)) == named


def test_pruning_never_lets_go_of_the_last_successful_push(local, django_capture_on_commit_callbacks):
    (good,) = push_now(django_capture_on_commit_callbacks)
    for number in range(4):
        ConfigPush.objects.create(
            target=local, payload={"files": {}}, payload_hash=f"h{number}", status=PushStatus.FAILED
        )
    assert pushes.prune_payloads(local.pk, keep=2) > 0
    good.refresh_from_db()
    assert good.payload
    contents.collect_garbage()
    files = contents.payload_of(good.payload)["files"]
    assert all(files[name] for name in files if files.size(name))


def test_history_diff_and_push_again_read_the_stored_files(
    local, admin_user, django_capture_on_commit_callbacks
):
    (first,) = push_now(django_capture_on_commit_callbacks)
    change_state("Vision")
    (second,) = push_now(django_capture_on_commit_callbacks)
    diff = push_history.push_diff(second)
    changed = {item.name for item in diff.items if item.state == "changed"}
    assert "nfs/exports" in changed
    with django_capture_on_commit_callbacks(execute=True):
        again = push_history.push_again(first, admin_user)
    again.refresh_from_db()
    assert again.status == PushStatus.SUCCEEDED, again.log
    assert again.payload_hash == first.payload_hash


def test_a_file_missing_from_the_live_version_is_written_again(
    local, render_dir, django_capture_on_commit_callbacks
):
    """The pieces' record says the file is unchanged, but someone removed it from the live version: it is
    written from its pieces, not assumed linked."""
    push_now(django_capture_on_commit_callbacks)
    (render_dir / "current" / "slurm/topology.conf").unlink()
    change_state("Vision")
    (second,) = push_now(django_capture_on_commit_callbacks)
    assert second.status == PushStatus.SUCCEEDED, second.log
    files = payload_of(second.payload)["files"]
    assert (render_dir / "current" / "slurm/topology.conf").read_text() == files["slurm/topology.conf"]


@settings(max_examples=500, deadline=None)
@given(
    lines=st.lists(
        st.text(alphabet="abcdefgh ", min_size=0, max_size=40) | st.sampled_from(["", "a", "ab c d"]),
        min_size=10,
        max_size=150,
    ),
    edits=st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 60), st.text(alphabet="xyz\n", max_size=50)),
        min_size=1,
        max_size=3,
    ),
)
def test_recut_is_cut_for_any_change(lines, edits):
    """Pieces cut again around a change are the pieces a cut of the whole new text gives (small sizes, so
    that a few lines make many pieces)."""
    old = "\n".join(lines)
    new = old
    for at, removed, inserted in edits:
        at = at % (len(new) + 1)
        new = new[:at] + inserted + new[at + removed :]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contents, "PIECE_MIN", 40)
        patch.setattr(contents, "PIECE_MAX", 200)
        patch.setattr(contents, "_MASK", 0x3)
        old_pieces = contents.cut(old)
        again = contents.recut(old_pieces, new)
        assert again == contents.cut(new)
    assert "".join(again) == new


def test_recut_keeps_the_unchanged_pieces():
    """A change in the middle of a large text: the pieces before and after it are the old objects."""
    lines = [f"node-{n:06d} labels rack=r{n // 18:05d} partition=p{n % 3}" for n in range(60_000)]
    old = "\n".join(lines) + "\n"
    new = old.replace(
        "node-030000 labels rack=r01666 partition=p0", "node-030000 labels rack=r01666 partition=p9"
    )
    assert new != old
    old_pieces = contents.cut(old)
    again = contents.recut(old_pieces, new)
    assert again == contents.cut(new)
    reused = sum(1 for piece in again if any(piece is o for o in old_pieces))
    assert len(old_pieces) > 20 and reused >= len(again) - 2
