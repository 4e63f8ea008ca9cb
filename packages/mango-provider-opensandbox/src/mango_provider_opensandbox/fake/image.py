"""The fake's image: what a sandbox has outside its workspace, above all ``apt-get``.

A real sandbox runs an image (``python:3.12-slim`` by default) whose
``apt-get`` installs into the sandbox. The fake's sandboxes are host
processes, so the host's package manager would install on the host. Each
fake sandbox therefore gets an emulated image under its private file-system
root (``fsroot``, where the fake keeps every absolute path outside
``/workspace``): ``/usr/bin/apt-get``, first on the commands' ``PATH``,
which does what mango's package step needs from it, and nothing else:

* ``apt-get update`` fetches the ``Packages`` index of every ``deb URL ./``
  line of ``/etc/apt/sources.list`` (written from the fake's
  ``apt_source``; none: an image with no sources), over HTTP through the
  egress gateway, so the sandbox's egress policy applies as it would to the
  real one;
* ``apt-get install [-y] [--no-install-recommends] NAME...`` installs from
  the fetched index only: without a prior ``update`` the lists are empty
  and every name is ``E: Unable to locate package NAME`` (exit 100), as on
  a fresh image; a name the index lacks fails the whole command and
  installs nothing; a package's file becomes ``/usr/bin/NAME`` (mode 755).

Everything else ``apt-get`` can do answers exit 100.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["IMAGE_PATH", "fsroot_of", "prepare_image"]

IMAGE_PATH = ("usr/local/bin", "usr/bin")
"""Directories of the image (under ``fsroot``) searched before the host's ``PATH``."""

_APT_GET = '''\
#!{python}
"""apt-get of the fake OpenSandbox image (see mango_provider_opensandbox.fake.image)."""
import os
import sys
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = os.path.join(ROOT, "etc", "apt", "sources.list")
LISTS = os.path.join(ROOT, "var", "lib", "apt", "lists", "Packages")
BIN = os.path.join(ROOT, "usr", "bin")


def fail(message):
    print("E: " + message, file=sys.stderr)
    return 100


def fetch(url):
    with urllib.request.urlopen(url, timeout=20) as answer:
        return answer.read()


def sources():
    try:
        with open(SOURCES, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    return [line.split()[1].rstrip("/") for line in lines if line.startswith("deb ")]


def update():
    entries = []
    for number, base in enumerate(sources(), 1):
        print("Get:%d %s ./ Packages" % (number, base))
        try:
            text = fetch(base + "/Packages").decode("utf-8")
        except (urllib.error.URLError, OSError, UnicodeDecodeError) as exc:
            return fail("Failed to fetch %s/Packages  %s" % (base, exc))
        name = None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key == "Package":
                name = value.strip()
            elif key == "Filename" and name:
                entries.append("%s\\t%s/%s" % (name, base, value.strip()))
    os.makedirs(os.path.dirname(LISTS), exist_ok=True)
    with open(LISTS, "w", encoding="utf-8") as handle:
        handle.write("".join(entry + "\\n" for entry in entries))
    print("Reading package lists... Done")
    return 0


def install(names):
    try:
        with open(LISTS, encoding="utf-8") as handle:
            known = dict(line.split("\\t", 1) for line in handle.read().splitlines() if line)
    except FileNotFoundError:
        known = {{}}
    for name in names:
        if name not in known:
            return fail("Unable to locate package " + name)
    for name in names:
        try:
            data = fetch(known[name])
        except (urllib.error.URLError, OSError) as exc:
            return fail("Failed to fetch %s  %s" % (known[name], exc))
        target = os.path.join(BIN, name)
        with open(target, "wb") as handle:
            handle.write(data)
        os.chmod(target, 0o755)
        print("Setting up %s ..." % name)
    print("%d newly installed" % len(names))
    return 0


def main(argv):
    words = [word for word in argv if not word.startswith("-")]
    if words[:1] == ["update"]:
        return update()
    if words[:1] == ["install"]:
        return install(words[1:])
    return fail("the fake image's apt-get only knows update and install")


sys.exit(main(sys.argv[1:]))
'''


def fsroot_of(workspace: Path) -> Path:
    """The private root of a sandbox whose ``/workspace`` is ``workspace``."""
    return workspace.parent / "fsroot"


def prepare_image(fsroot: Path, apt_source: str | None) -> None:
    """Lay the image's files under ``fsroot`` (once per sandbox; idempotent)."""
    apt_get = fsroot / "usr" / "bin" / "apt-get"
    if apt_get.exists():
        return
    for directory in IMAGE_PATH:
        (fsroot / directory).mkdir(parents=True, exist_ok=True)
    sources = fsroot / "etc" / "apt" / "sources.list"
    sources.parent.mkdir(parents=True, exist_ok=True)
    sources.write_text(f"deb {apt_source} ./\n" if apt_source else "", encoding="utf-8")
    staged = apt_get.with_name(".apt-get.tmp")
    staged.write_text(_APT_GET.format(python=sys.executable), encoding="utf-8")
    staged.chmod(0o755)
    staged.replace(apt_get)
