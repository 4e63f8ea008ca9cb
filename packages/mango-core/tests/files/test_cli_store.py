"""``mango store`` end to end: real processes, real PostgreSQL, the filesystem store and S3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from mango.filestore import FileStoreKind, FileStoreSettings

from .conftest import AWS_TEST_ENV, store_environ

pytestmark = pytest.mark.postgres

MANGO = str(Path(sys.executable).with_name("mango"))
GiB = 1024 * 1024 * 1024


def base_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MANGO_", "DOCKER_", "AWS_"))
    }
    env.update(
        MANGO_DATABASE_URL=database_url,
        MANGO_STATE_DIR=str(tmp_path / "state"),
        MANGO_DISABLE_PLUGINS="1",
    )
    return env


@pytest.fixture
def run(database_url: str, tmp_path: Path, file_store_settings: FileStoreSettings) -> Any:
    """Run ``mango ARGS`` on the test's database and a store of each kind."""
    env = {**base_env(database_url, tmp_path), **store_environ(file_store_settings)}

    def invoke(
        *args: str, extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [MANGO, *args],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            env={**env, **(extra or {})},
            timeout=300,
            check=False,
        )

    def popen(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen([MANGO, *args], stdin=subprocess.DEVNULL, env=env, **kwargs)

    invoke.popen = popen  # type: ignore[attr-defined]
    invoke.env = env  # type: ignore[attr-defined]
    return invoke


def ok(done: subprocess.CompletedProcess[bytes]) -> bytes:
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def failed(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    """The ``error:`` and ``hint:`` lines of an expected failure (exit 2, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert b"Traceback" not in done.stderr
    lines = done.stderr.decode().splitlines()
    assert lines[0].startswith("error: "), lines
    return lines


async def file_rows(url: str) -> list[tuple[str, str]]:
    """``(id, state)`` of every stored-file row (none before the first command migrated)."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute("SELECT to_regclass('mango_files') IS NOT NULL")
        exists = await cursor.fetchone()
        if not (exists and exists[0]):
            return []
        cursor = await conn.execute("SELECT id, state FROM mango_files ORDER BY created_at")
        return [(str(row[0]), str(row[1])) for row in await cursor.fetchall()]


def store_contents(settings: FileStoreSettings) -> list[str]:
    """Every object or file in the store's backend (leftovers of puts included)."""
    if settings.kind is FileStoreKind.FS:
        assert settings.directory is not None
        root = settings.directory
        return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    response = httpx.get(
        f"{settings.s3_endpoint_url}/{settings.s3_bucket}", params={"list-type": "2"}, timeout=30
    )
    assert response.status_code == 200, response.text
    return sorted(part.split("</Key>")[0] for part in response.text.split("<Key>")[1:])


def s3_uploads_in_progress(settings: FileStoreSettings) -> int:
    response = httpx.get(
        f"{settings.s3_endpoint_url}/{settings.s3_bucket}", params={"uploads": ""}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.text.count("<UploadId>")


# ------------------------------------------------------------------ the round trip


def test_put_ls_get_rm(run: Any, tmp_path: Path) -> None:
    """put prints an id; ls lists it; get streams it (stdout or -o); rm removes it."""
    data = os.urandom(2 * 1024 * 1024 + 5)
    source = tmp_path / "notes.txt"
    source.write_bytes(data)
    file_id = ok(run("store", "put", str(source))).decode().strip()
    assert file_id.startswith("file-")
    assert len(file_id) == 37
    other = ok(run("store", "put", str(source), "--name", "renamed.md")).decode().strip()

    listed = json.loads(ok(run("store", "ls", "--json")))
    assert [(row["id"], row["filename"], row["size"]) for row in listed] == [
        (file_id, "notes.txt", len(data)),
        (other, "renamed.md", len(data)),
    ]
    assert listed[0]["mime_type"] == "text/plain"
    assert listed[1]["sha256"] == listed[0]["sha256"]
    table = ok(run("store", "ls")).decode().splitlines()
    assert table[0].split() == ["ID", "SIZE", "TYPE", "CREATED", "NAME"]
    assert [line.split()[0] for line in table[1:]] == [file_id, other]

    assert ok(run("store", "get", file_id)) == data
    target = tmp_path / "out" / "copy.txt"
    target.parent.mkdir()
    assert ok(run("store", "get", file_id, "-o", str(target))) == b""
    assert target.read_bytes() == data

    assert ok(run("store", "rm", file_id)) == b""
    assert [row["id"] for row in json.loads(ok(run("store", "ls", "--json")))] == [other]
    lines = failed(run("store", "get", file_id))
    assert lines == [
        f"error: no stored file '{file_id}'",
        "hint: list the stored files with 'mango store ls'",
    ]
    failed(run("store", "rm", file_id))


# ------------------------------------------------------------------ bad input


def test_bad_input_is_one_error_line_and_a_hint(
    run: Any, tmp_path: Path, database_url: str
) -> None:
    """Missing file, directory, malformed id, unknown id, an id still uploading."""
    missing = failed(run("store", "put", str(tmp_path / "absent.bin")))
    assert missing == [f"error: no file '{tmp_path / 'absent.bin'}'", "hint: check the path"]
    directory = failed(run("store", "put", str(tmp_path)))
    assert directory[0] == f"error: '{tmp_path}' is a directory"
    assert directory[1].startswith("hint: store one file at a time")
    assert failed(run("store", "get", "nope"))[1].startswith("hint: ids are printed by")
    assert failed(run("store", "rm", "file-" + "9" * 32))[0] == (
        f"error: no stored file 'file-{'9' * 32}'"
    )
    slash = failed(run("store", "put", str(tmp_path / "absent.bin"), "--name", "a/b"))
    assert "must be a name, not a path" in slash[0]

    uploading = "file-" + "7" * 32
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mango_files (id, filename, mime_type, state, blob_key)"
            " VALUES (%s, 'u.bin', 'application/octet-stream', 'uploading', %s)",
            (uploading, f"ns/files/{uploading}"),
        )
    for command in ("get", "rm"):
        lines = failed(run("store", command, uploading))
        assert lines[0] == f"error: stored file '{uploading}' is still uploading"
        assert "mango store reconcile" in lines[1]


def test_a_damaged_blob_fails_the_get_and_writes_no_file(
    run: Any, tmp_path: Path, file_store_settings: FileStoreSettings
) -> None:
    """Bytes changed in the backend: get -o exits 2 and creates nothing; stdout says so too."""
    source = tmp_path / "orig.bin"
    source.write_bytes(b"A" * 300_000)
    file_id = ok(run("store", "put", str(source))).decode().strip()
    (key,) = store_contents(file_store_settings)
    if file_store_settings.kind is FileStoreKind.FS:
        assert file_store_settings.directory is not None
        blob = file_store_settings.directory / key
        blob.chmod(0o644)
        blob.write_bytes(b"B" * 300_000)
    else:
        response = httpx.put(
            f"{file_store_settings.s3_endpoint_url}/{file_store_settings.s3_bucket}/{key}",
            content=b"B" * 300_000,
            timeout=30,
        )
        assert response.status_code == 200
    target = tmp_path / "copy.bin"
    lines = failed(run("store", "get", file_id, "-o", str(target)))
    assert lines[0].startswith(f"error: stored file '{file_id}' is damaged:")
    assert "SHA-256" in lines[0]
    assert lines[1].startswith("hint: the store lost or altered this file's bytes")
    assert not target.exists()
    assert list(tmp_path.glob(".copy.bin*")) == []
    streamed = run("store", "get", file_id)
    assert streamed.returncode == 2
    assert b"is damaged" in streamed.stderr


# ------------------------------------------------------------------ a crash mid-upload


def test_a_killed_put_leaves_no_ready_row_and_reconcile_cleans_up(
    run: Any, tmp_path: Path, database_url: str, file_store_settings: FileStoreSettings
) -> None:
    """SIGKILL while a large file uploads: nothing visible; reconcile removes row and bytes."""
    import asyncio

    big = tmp_path / "big.bin"
    with big.open("wb") as handle:
        handle.truncate(16 * GiB)  # sparse: costs nothing to make, takes long to upload
    process = run.popen("store", "put", str(big), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def uploading() -> bool:
        if asyncio.run(file_rows(database_url)) == []:
            return False
        if file_store_settings.kind is FileStoreKind.FS:
            assert file_store_settings.directory is not None
            parts = list((file_store_settings.directory / ".incoming").glob("*.part"))
            return bool(parts) and parts[0].stat().st_size > 0
        return s3_uploads_in_progress(file_store_settings) > 0

    deadline = time.monotonic() + 120
    while not uploading():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.05)  # polling for the upload to be under way, not timing it
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL

    ((file_id, state),) = asyncio.run(file_rows(database_url))
    assert state == "uploading"
    assert json.loads(ok(run("store", "ls", "--json"))) == []
    assert "still uploading" in failed(run("store", "get", file_id))[0]
    leftovers = store_contents(file_store_settings)
    if file_store_settings.kind is FileStoreKind.FS:
        assert [Path(name).parent.name for name in leftovers] == [".incoming"]
    else:
        assert leftovers == []  # an incomplete multipart upload is no object

    report = json.loads(ok(run("store", "reconcile", "--stale-after", "0", "--json")))
    assert (report["abandoned_uploads"], report["removed_files"], report["failures"]) == (
        1,
        1,
        [],
    )
    expected_leftovers = 1 if file_store_settings.kind is FileStoreKind.FS else 0
    assert report["incomplete_puts"] == expected_leftovers
    assert asyncio.run(file_rows(database_url)) == []
    assert store_contents(file_store_settings) == []
    again = json.loads(ok(run("store", "reconcile", "--stale-after", "0", "--json")))
    assert again == {
        "abandoned_uploads": 0,
        "removed_files": 0,
        "orphan_blobs": 0,
        "incomplete_puts": 0,
        "failures": [],
    }


def test_a_terminated_put_removes_what_it_started(
    run: Any, tmp_path: Path, database_url: str, file_store_settings: FileStoreSettings
) -> None:
    """SIGTERM mid-upload: exit 143 after the row and the bytes are gone, no reconcile needed."""
    import asyncio

    big = tmp_path / "big.bin"
    with big.open("wb") as handle:
        handle.truncate(16 * GiB)
    process = run.popen("store", "put", str(big), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while asyncio.run(file_rows(database_url)) == []:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.05)  # polling for the upload to be under way, not timing it
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert (process.returncode, stderr) == (143, b"error: terminated\n")
    assert asyncio.run(file_rows(database_url)) == []
    assert store_contents(file_store_settings) == []


# ------------------------------------------------------------------ settings and S3 failures


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"MANGO_FILE_STORE": "ftp"}, "error: MANGO_FILE_STORE must be 'fs' or 's3', got 'ftp'"),
        ({"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": ""}, "needs MANGO_S3_BUCKET"),
        ({"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "Bad_Name"}, "must be an S3 bucket name"),
        (
            {"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "b-1", "MANGO_S3_PREFIX": "a/../b"},
            "MANGO_S3_PREFIX must be",
        ),
        (
            {
                "MANGO_FILE_STORE": "s3",
                "MANGO_S3_BUCKET": "b-1",
                "MANGO_S3_ENDPOINT_URL": "http://key:hunter2@127.0.0.1:9",
            },
            "MANGO_S3_ENDPOINT_URL must not carry credentials",
        ),
        ({"MANGO_FILE_STORE_DIR": "relative/dir"}, "MANGO_FILE_STORE_DIR must be an absolute"),
    ],
)
def test_bad_settings_fail_before_anything_opens(
    tmp_path: Path, settings: dict[str, str], expected: str
) -> None:
    """Each malformed setting is named in one error line, before an embedded database starts.

    A password in a URL is never echoed.
    """
    env = base_env("", tmp_path)
    del env["MANGO_DATABASE_URL"]  # the embedded PostgreSQL would start under the state dir
    done = subprocess.run(
        [MANGO, "store", "ls"],
        capture_output=True,
        env={**env, **settings},
        timeout=120,
        check=False,
    )
    lines = failed(done)
    assert expected in lines[0]
    assert b"hunter2" not in done.stderr
    assert not (tmp_path / "state").exists()


def test_an_unreachable_s3_endpoint_is_one_error_line(
    database_url: str, tmp_path: Path, refused_port: int
) -> None:
    """Connection refused: exit 2 with the endpoint and a hint; no traceback, no secret."""
    port = refused_port
    source = tmp_path / "f.txt"
    source.write_bytes(b"going nowhere")
    env = {
        **base_env(database_url, tmp_path),
        **AWS_TEST_ENV,
        "MANGO_FILE_STORE": "s3",
        "MANGO_S3_BUCKET": "mango-down",
        "MANGO_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    started = time.monotonic()
    done = subprocess.run(
        [MANGO, "store", "put", str(source)], capture_output=True, env=env, timeout=120, check=False
    )
    assert time.monotonic() - started < 60
    lines = failed(done)
    assert lines[0].startswith("error: the S3 file store (s3://mango-down at http://127.0.0.1:")
    assert lines[1] == "hint: check that the endpoint is reachable, then retry"
    assert AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"].encode() not in done.stderr + done.stdout
    listed = subprocess.run(
        [MANGO, "store", "ls", "--json"], capture_output=True, env=env, timeout=120, check=False
    )
    assert json.loads(ok(listed)) == []


def test_a_missing_bucket_is_a_configuration_error(
    database_url: str, tmp_path: Path, s3_endpoint: str
) -> None:
    """A bucket that does not exist is named, with what to do."""
    source = tmp_path / "f.txt"
    source.write_bytes(b"x")
    env = {
        **base_env(database_url, tmp_path),
        **AWS_TEST_ENV,
        "MANGO_FILE_STORE": "s3",
        "MANGO_S3_BUCKET": "mango-never-made",
        "MANGO_S3_ENDPOINT_URL": s3_endpoint,
    }
    done = subprocess.run(
        [MANGO, "store", "put", str(source)], capture_output=True, env=env, timeout=120, check=False
    )
    assert failed(done) == [
        (
            "error: the S3 bucket 'mango-never-made' does not exist (s3://mango-never-made at "
            f"{s3_endpoint})"
        ),
        "hint: create it, or set MANGO_S3_BUCKET to an existing bucket",
    ]


# ------------------------------------------------------------------ streaming and start-up cost


def _peak_growth(run: Any, *args: str) -> int:
    """Peak RSS of ``mango ARGS`` over a bare python started the same way, in bytes."""
    baseline = subprocess.Popen([sys.executable, "-c", "pass"])
    _, _, bare = os.wait4(baseline.pid, 0)
    baseline.returncode = 0
    process = run.popen(*args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.returncode == 0, stderr
    return int((usage.ru_maxrss - bare.ru_maxrss) * 1024)


@pytest.mark.slow
@pytest.mark.parametrize("store_kind", ["fs"], indirect=True)
def test_a_1_gib_put_and_get_stream(run: Any, tmp_path: Path) -> None:
    """1 GiB in and out through the CLI costs far less memory than its size (generous bound)."""
    big = tmp_path / "gib.bin"
    with big.open("wb") as handle:
        handle.truncate(GiB)
    growth = {"put": _peak_growth(run, "store", "put", str(big))}
    (row,) = json.loads(ok(run("store", "ls", "--json")))
    assert row["size"] == GiB
    growth["get"] = _peak_growth(run, "store", "get", row["id"])
    assert all(value < 256 * 1024 * 1024 for value in growth.values()), growth


_PROBE = """
import sys
from mango.cli import cli
try:
    cli(sys.argv[1:], prog_name="mango")
except SystemExit:
    pass
print(" ".join(sorted({m.split(".")[0] for m in sys.modules} & {"obstore", "psycopg"})),
      file=sys.stderr)
"""


@pytest.mark.parametrize("store_kind", ["s3"], indirect=True)
def test_the_s3_client_loads_only_when_selected(run: Any) -> None:
    """--help and the filesystem store never import obstore; the S3 store does."""

    def loaded(*args: str, extra: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, *args],
            capture_output=True,
            env={**run.env, **(extra or {})},
            timeout=120,
            check=False,
        )
        return done.stderr.decode().splitlines()[-1]

    assert loaded("--help") == ""
    assert loaded("store", "--help") == ""
    assert loaded("store", "ls", extra={"MANGO_FILE_STORE": "fs"}) == "psycopg"
    assert loaded("store", "ls") == "obstore psycopg"


def test_the_readme_example_runs(database_url: str, tmp_path: Path) -> None:
    """The Python example in the Files store section of mango-core's README works as printed."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    section = readme.read_text().split("## The Files store", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    source = tmp_path / "example.txt"
    source.write_bytes(b"kept by mango\n")
    copy = tmp_path / "copy.txt"
    run = f"keep({str(source)!r}, {str(copy)!r})"
    script = f"{code}\nimport asyncio\nprint(asyncio.run({run}).decode(), end='')\n"
    env = {
        **base_env(database_url, tmp_path),
        "MANGO_FILE_STORE_DIR": str(tmp_path / "blobs"),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=env, timeout=120, check=False
    )
    assert (done.returncode, done.stdout) == (0, b"kept by mango\n"), done.stderr
    assert copy.read_bytes() == b"kept by mango\n"
