"""The Files store's pure parts: ids, names, keys, the content check, and the settings."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mango.domain import ConfigurationError, ContentMismatch, InvalidInput
from mango.domain.files import (
    ContentCheck,
    NewFile,
    file_blob_key,
    new_file_id,
    validate_blob_key,
    validate_file_id,
    validate_filename,
    validate_mime_type,
)
from mango.filestore import FileStoreKind, FileStoreSettings


def test_new_ids_are_valid_and_distinct() -> None:
    """Fresh ids match the id rule and do not repeat."""
    ids = {new_file_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(validate_file_id(file_id) == file_id for file_id in ids)
    assert file_blob_key("ns", "file-" + "a" * 32) == "ns/files/file-" + "a" * 32


@pytest.mark.parametrize("bad", ["", "file-", "file-" + "A" * 32, "file-" + "a" * 33, 7, None])
def test_malformed_ids_are_refused(bad: object) -> None:
    """Anything but file- and 32 lowercase hex digits is InvalidInput, with a hint."""
    with pytest.raises(InvalidInput) as caught:
        validate_file_id(bad)
    assert caught.value.hint


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "x\x00y", "tab\there", "é" * 128, "\x7f", None]
)
def test_bad_filenames_are_refused(name: object) -> None:
    """Empty, a path, a control character or over 255 bytes of UTF-8 is InvalidInput."""
    with pytest.raises(InvalidInput):
        validate_filename(name)


@pytest.mark.parametrize("name", ["report.pdf", "é" * 127, "a" * 255, "with space.txt", ".env"])
def test_good_filenames_pass(name: str) -> None:
    """Ordinary names, and names up to 255 bytes of UTF-8, pass unchanged."""
    assert validate_filename(name) == name


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("text/plain", True),
        ("application/vnd.ms-excel", True),
        ("text/csv; charset=utf-8", True),
        ("text", False),
        ("text/", False),
        ("téxt/plain", False),
        ("text/plain\n", False),
        ("a/" + "b" * 300, False),
    ],
)
def test_mime_types(value: str, ok: bool) -> None:
    """type/subtype with optional parameters; nothing else."""
    if ok:
        assert validate_mime_type(value) == value
    else:
        with pytest.raises(InvalidInput):
            validate_mime_type(value)


@pytest.mark.parametrize("key", ["a", "ns/files/file-1", "A.b_c-d/e"])
def test_good_blob_keys(key: str) -> None:
    """'/'-separated safe segments are keys."""
    assert validate_blob_key(key) == key


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", "../a", "a/..", ".a", "a b", "a" * 1025])
def test_bad_blob_keys(key: str) -> None:
    """Empty segments, dot segments, hidden names, spaces and overlong keys are refused."""
    with pytest.raises(InvalidInput):
        validate_blob_key(key)


def test_an_output_file_needs_its_session() -> None:
    """output_path without session_id is refused when the row is built."""
    with pytest.raises(InvalidInput, match="needs its Session"):
        NewFile(new_file_id(), "o.txt", "text/plain", "ns/files/x", output_path="o.txt")


@given(st.lists(st.binary(max_size=300), max_size=8))
def test_content_check_measures_what_passed(chunks: list[bytes]) -> None:
    """Size and SHA-256 are those of the concatenation, and the right expectations pass."""
    data = b"".join(chunks)
    digest = hashlib.sha256(data).hexdigest()
    check = ContentCheck("x", size=len(data), sha256=digest)
    for chunk in chunks:
        check.update(chunk)
    info = check.finish()
    assert (info.size, info.sha256) == (len(data), digest)


def test_content_check_refuses_surplus_shortfall_and_other_digests() -> None:
    """More bytes fail at once; fewer bytes and another digest fail at the end."""
    long = ContentCheck("the blob", size=3)
    long.update(b"abc")
    with pytest.raises(ContentMismatch, match="more than the 3 bytes") as caught:
        long.update(b"d")
    assert (caught.value.expected_size, caught.value.size) == (3, 4)
    short = ContentCheck("the blob", size=3)
    short.update(b"ab")
    with pytest.raises(ContentMismatch, match="has 2 bytes, 3 expected"):
        short.finish()
    other = ContentCheck("the blob", sha256=hashlib.sha256(b"x").hexdigest())
    other.update(b"y")
    with pytest.raises(ContentMismatch, match="has SHA-256") as digest:
        other.finish()
    assert digest.value.sha256 == hashlib.sha256(b"y").hexdigest()
    with pytest.raises(InvalidInput):
        ContentCheck("x", sha256="ABC")
    with pytest.raises(InvalidInput):
        ContentCheck("x", size=-1)


# ------------------------------------------------------------------ settings


def test_the_default_is_the_filesystem_under_the_state_dir(tmp_path: Path) -> None:
    """No setting: fs in <state dir>/files; MANGO_FILE_STORE_DIR moves it."""
    default = FileStoreSettings.from_env({"MANGO_STATE_DIR": str(tmp_path)})
    assert (default.kind, default.directory) == (FileStoreKind.FS, tmp_path / "files")
    moved = FileStoreSettings.from_env(
        {"MANGO_FILE_STORE": " FS ", "MANGO_FILE_STORE_DIR": str(tmp_path / "elsewhere")}
    )
    assert moved.directory == tmp_path / "elsewhere"
    assert str(tmp_path / "elsewhere") in moved.display


def test_s3_settings_are_normalised() -> None:
    """Slashes around the prefix and after the endpoint are dropped; the display has no secret."""
    settings = FileStoreSettings.from_env(
        {
            "MANGO_FILE_STORE": "s3",
            "MANGO_S3_BUCKET": "my-bucket.eu",
            "MANGO_S3_PREFIX": "/team/mango/",
            "MANGO_S3_ENDPOINT_URL": "https://minio.internal:9000/",
            "AWS_SECRET_ACCESS_KEY": "never-shown",
        }
    )
    assert (settings.s3_bucket, settings.s3_prefix, settings.s3_endpoint_url) == (
        "my-bucket.eu",
        "team/mango",
        "https://minio.internal:9000",
    )
    assert (
        settings.display == "S3 store s3://my-bucket.eu/team/mango at https://minio.internal:9000"
    )
    assert "never-shown" not in repr(settings)


def test_the_endpoint_falls_back_to_the_aws_variables() -> None:
    """MANGO_S3_ENDPOINT_URL wins; else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL; else AWS."""
    base = {"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "abc"}
    chain = {
        "MANGO_S3_ENDPOINT_URL": "http://mango:1",
        "AWS_ENDPOINT_URL_S3": "http://s3-only:2",
        "AWS_ENDPOINT_URL": "http://every-service:3",
    }
    expected = ["http://mango:1", "http://s3-only:2", "http://every-service:3", None]
    for dropped, endpoint in enumerate(expected):
        env = {**base, **dict(list(chain.items())[dropped:])}
        assert FileStoreSettings.from_env(env).s3_endpoint_url == endpoint
    assert FileStoreSettings.from_env(base).display == "S3 store s3://abc at AWS"
    with pytest.raises(ConfigurationError, match="AWS_ENDPOINT_URL must be an http"):
        FileStoreSettings.from_env({**base, "AWS_ENDPOINT_URL": "s3.example"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MANGO_FILE_STORE": "gcs"}, "MANGO_FILE_STORE must be 'fs' or 's3'"),
        ({"MANGO_FILE_STORE_DIR": "rel"}, "MANGO_FILE_STORE_DIR must be an absolute path"),
        ({"MANGO_FILE_STORE": "s3"}, "needs MANGO_S3_BUCKET"),
        ({"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "ab"}, "bucket name"),
        ({"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "a..b"}, "bucket name"),
        ({"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "UPPER"}, "bucket name"),
        (
            {"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "abc", "MANGO_S3_PREFIX": "a//b"},
            "MANGO_S3_PREFIX",
        ),
        (
            {"MANGO_FILE_STORE": "s3", "MANGO_S3_BUCKET": "abc", "MANGO_S3_ENDPOINT_URL": "x"},
            "http:// or https:// URL",
        ),
        (
            {
                "MANGO_FILE_STORE": "s3",
                "MANGO_S3_BUCKET": "abc",
                "MANGO_S3_ENDPOINT_URL": "http://h:notaport",
            },
            "http:// or https:// URL",
        ),
        (
            {
                "MANGO_FILE_STORE": "s3",
                "MANGO_S3_BUCKET": "abc",
                "MANGO_S3_ENDPOINT_URL": "http://h/?x=1",
            },
            "no query",
        ),
        (
            {
                "MANGO_FILE_STORE": "s3",
                "MANGO_S3_BUCKET": "abc",
                "MANGO_S3_ENDPOINT_URL": "https://AKIA:topsecret@h",
            },
            "must not carry credentials",
        ),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    """Each malformed setting is a ConfigurationError naming it; a URL's secret is not echoed."""
    with pytest.raises(ConfigurationError, match=message) as caught:
        FileStoreSettings.from_env({"MANGO_STATE_DIR": "/tmp/state", **env})
    assert "topsecret" not in str(caught.value)
