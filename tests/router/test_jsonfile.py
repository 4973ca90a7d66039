"""JSON files other processes read while we rewrite them (router/jsonfile.py)."""

from __future__ import annotations

import json
import os
import stat
import threading

from router.jsonfile import write_json_atomic


def test_a_reader_sees_the_old_document_or_the_new_never_a_part(tmp_path):
    path = str(tmp_path / "status" / "job.json")  # the directory is made on the first write
    docs = [{"batch": i, "tables": {f"db.t{j}": i * j for j in range(20_000)}} for i in range(2)]
    write_json_atomic(path, docs[0])
    done, seen, broken = threading.Event(), set(), []

    def read_while_written() -> None:
        while not done.is_set():
            with open(path) as fh:
                text = fh.read()
            try:
                seen.add(json.loads(text)["batch"])
            except ValueError:
                broken.append(len(text))

    reader = threading.Thread(target=read_while_written)
    reader.start()
    try:
        for i in range(40):
            write_json_atomic(path, docs[i % 2], indent=1, sort_keys=True)
    finally:
        done.set()
        reader.join()
    assert not broken and seen == {0, 1}
    assert os.listdir(tmp_path / "status") == ["job.json"]  # no temporary file left behind


def test_a_private_file_is_readable_by_its_owner_only(tmp_path):
    secret, shared = str(tmp_path / "state.json"), str(tmp_path / "status.json")
    write_json_atomic(secret, {"password": "p"}, private=True)
    write_json_atomic(shared, {"rows": 1})
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o666 & ~umask  # what open(path, "w") gives
    with open(secret) as fh:
        assert json.load(fh) == {"password": "p"}
