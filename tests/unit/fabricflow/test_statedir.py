"""A directory a service writes is created when missing, and an unusable one is one line naming the setting."""

from __future__ import annotations

import os

import pytest

from fabricflow.statedir import StateDirError, writable_dir


def test_a_missing_directory_is_created_with_its_parents(tmp_path):
    d = writable_dir(tmp_path / "a" / "b", "processors.datadir")
    assert d.is_dir()
    assert writable_dir(d, "processors.datadir") == d  # existing: fine


def test_a_file_in_the_way_names_the_setting_and_its_variable(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(StateDirError) as e:
        writable_dir(tmp_path / "f" / "faust", "processors.datadir")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"processors.datadir: cannot create {tmp_path / 'f' / 'faust'}: Not a directory")
    assert "FABRICFLOW_PROCESSORS__DATADIR" in msg and f"user id {os.getuid()}" in msg
    with pytest.raises(StateDirError, match="exists and is not a directory"):
        writable_dir(tmp_path / "f", "archive.url")


def test_an_unwritable_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda *_a, **_k: False)  # root may write anywhere: pretend it may not
    with pytest.raises(StateDirError, match=r"^stack.state_dir: .* is not writable \(permission denied\); set stack.state_dir "
                                            r"\(FABRICFLOW_STACK__STATE_DIR\)"):
        writable_dir(tmp_path, "stack.state_dir")


def test_a_relative_path_shows_where_it_points(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "var").write_text("x")
    with pytest.raises(StateDirError, match=rf"var/faust \(= {tmp_path}/var/faust\)"):
        writable_dir("var/faust", "processors.datadir")
