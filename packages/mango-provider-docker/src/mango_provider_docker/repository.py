"""Offline package repositories for the package tests: real ``.deb`` files and wheels.

Every package named here installs one program of the same name that prints
its name and exits 0, so "installed and working" is one command to check.
The files are made in memory (a ``.deb`` is an ``ar`` archive of two
tarballs, a wheel a zip with its metadata), so no packaging tool is needed
on the host:

* :func:`apt_repository` -- a flat apt repository (``Packages``,
  ``Release``, the ``.deb`` files), for a source line
  ``deb [trusted=yes] <where>/ ./``;
* :func:`pip_repository` -- the wheels and a PEP 503 ``simple/`` index, for
  ``pip install --index-url <where>/simple/`` or ``--find-links <where>/wheels``.

The Docker conformance target bakes both into an image (``file:`` sources);
the package tests serve them over HTTP on the Docker bridge.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import tarfile
import zipfile
from collections.abc import Iterable, Mapping

__all__ = [
    "VERSION",
    "apt_repository",
    "deb_package",
    "pip_repository",
    "program",
    "wheel_file",
    "wheel_name",
]

VERSION = "1.0"
"""The version of every package made here."""
_MTIME = 1_700_000_000
"""A fixed modification time: the same names give byte-identical files."""
_NAME = re.compile(r"[a-z0-9][a-z0-9.+-]*\Z")


def _check(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not a package name of lowercase letters, digits, '.+-'")
    return name


def program(name: str) -> bytes:
    """The one program a package installs: a shell script that prints ``name``."""
    return f"#!/bin/sh\nprintf '%s\\n' {_check(name)}\n".encode()


def _tar_gz(files: Mapping[str, tuple[bytes | None, int]]) -> bytes:
    """A gzipped tarball of ``path -> (bytes, mode)``; ``None`` bytes make a directory."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path)
            info.mtime, info.mode, info.uname, info.gname = _MTIME, mode, "root", "root"
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=_MTIME)


def _ar(members: Iterable[tuple[str, bytes]]) -> bytes:
    """A System V ``ar`` archive, as ``dpkg-deb`` writes one."""
    out = [b"!<arch>\n"]
    for name, data in members:
        header = f"{name:<16}{_MTIME:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n"
        out.append(header.encode("ascii"))
        out.append(data + (b"\n" if len(data) % 2 else b""))
    return b"".join(out)


def deb_package(name: str) -> bytes:
    """A ``.deb`` of architecture ``all`` that installs ``/usr/bin/<name>``."""
    control = (
        f"Package: {_check(name)}\nVersion: {VERSION}\nArchitecture: all\n"
        "Maintainer: mango tests <tests@mango.invalid>\n"
        f"Description: prints {name} (a mango package-setup test package)\n"
    ).encode()
    return _ar(
        [
            ("debian-binary", b"2.0\n"),
            ("control.tar.gz", _tar_gz({"./": (None, 0o755), "./control": (control, 0o644)})),
            (
                "data.tar.gz",
                _tar_gz(
                    {
                        "./": (None, 0o755),
                        "./usr/": (None, 0o755),
                        "./usr/bin/": (None, 0o755),
                        f"./usr/bin/{name}": (program(name), 0o755),
                    }
                ),
            ),
        ]
    )


def apt_repository(names: Iterable[str]) -> dict[str, bytes]:
    """A flat apt repository of ``names``: ``Packages``, ``Release`` and ``<name>_1.0_all.deb``."""
    files: dict[str, bytes] = {}
    entries = []
    for name in sorted(set(names)):
        deb = deb_package(name)
        filename = f"{name}_{VERSION}_all.deb"
        files[filename] = deb
        entries.append(
            f"Package: {name}\nVersion: {VERSION}\nArchitecture: all\n"
            f"Maintainer: mango tests <tests@mango.invalid>\nFilename: ./{filename}\n"
            f"Size: {len(deb)}\nSHA256: {hashlib.sha256(deb).hexdigest()}\n"
            f"Description: prints {name}\n"
        )
    packages = "\n".join(entries).encode()
    files["Packages"] = packages
    files["Release"] = (
        "Origin: mango-tests\nLabel: mango-tests\nArchitectures: all\n"
        "Date: Tue, 14 Nov 2023 22:13:20 UTC\nSHA256:\n"
        f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n"
    ).encode()
    return files


def wheel_name(name: str) -> str:
    """The file name of ``name``'s wheel (``mango_probe-1.0-py3-none-any.whl``)."""
    return f"{_check(name).replace('-', '_').replace('.', '_')}-{VERSION}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def wheel_file(name: str) -> bytes:
    """A pure-Python wheel whose console script ``name`` prints ``name``."""
    module = _check(name).replace("-", "_").replace(".", "_")
    info = f"{module}-{VERSION}.dist-info"
    contents = {
        f"{module}.py": f"def main():\n    print({name!r})\n".encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n"
            f"Summary: prints {name} (a mango package-setup test package)\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: mango-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": f"[console_scripts]\n{name} = {module}:main\n".encode(),
    }
    record = "".join(
        f"{path},{_record_hash(data)},{len(data)}\n" for path, data in contents.items()
    )
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            entry = zipfile.ZipInfo(path, date_time=(2023, 11, 14, 22, 13, 20))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data)
    return raw.getvalue()


def pip_repository(names: Iterable[str]) -> dict[str, bytes]:
    """``wheels/<wheel>`` for each of ``names`` and a PEP 503 index under ``simple/``."""
    files: dict[str, bytes] = {}
    projects = []
    for name in sorted(set(names)):
        wheel, filename = wheel_file(name), wheel_name(name)
        files[f"wheels/{filename}"] = wheel
        digest = hashlib.sha256(wheel).hexdigest()
        link = f'<a href="../../wheels/{filename}#sha256={digest}">{filename}</a>'
        files[f"simple/{name}/index.html"] = (
            f"<!DOCTYPE html>\n<html><body>{link}</body></html>\n".encode()
        )
        projects.append(f'<a href="{name}/">{name}</a>')
    files["simple/index.html"] = (
        f"<!DOCTYPE html>\n<html><body>{''.join(projects)}</body></html>\n".encode()
    )
    return files
