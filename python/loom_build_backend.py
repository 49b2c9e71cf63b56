"""The loom package's build backend (PEP 517, PEP 660), written with the standard library only.

The package is pure Python with no dependencies, so its wheel is a zip of loom/*.py plus the
metadata files PEP 427 asks for. A backend that needs nothing to be installed lets any python3
(>= 3.8, a Debian one or a pyenv/conda/uv one without setuptools or wheel, offline) build and
install the package: `python3 -m pip wheel --no-deps -w dist ./python`, `pip install ./python`,
`pip install -e ./python`, or `python3 -m build python/` where the build package is installed.
Name, version, summary and requires-python come from pyproject.toml's [project] table.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Fixed timestamps make the same sources give the same bytes (SOURCE_DATE_EPOCH overrides).
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, zip's earliest


def _project():
    """The [project] table's simple string fields (tomllib is 3.11+; a regex suffices here)."""
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.S | re.M).group(1)
    fields = dict(re.findall(r'^([a-z-]+)\s*=\s*"([^"]*)"', table, re.M))
    for k in ("name", "version"):
        if k not in fields:
            raise RuntimeError(f"pyproject.toml: [project] has no {k}")
    return fields


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if "description" in p:
        lines.append(f"Summary: {p['description']}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    return "\n".join(lines) + "\n"


def _sources():
    """(path in the archive, file on disk) of every module of the package, sorted."""
    out = []
    pkg = os.path.join(HERE, "loom")
    for root, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(root, f)
                out.append((os.path.relpath(full, HERE).replace(os.sep, "/"), full))
    return out


def _write_wheel(directory, extra, editable):
    p = _project()
    dist = f"{p['name']}-{p['version']}"
    info = f"{dist}.dist-info"
    name = f"{dist}-py3-none-any.whl"
    files = [] if editable else [(arc, open(full, "rb").read()) for arc, full in _sources()]
    files += extra
    files += [
        (f"{info}/METADATA", _metadata(p).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: loom_build_backend\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = []
    for arc, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(directory, exist_ok=True)
    stamp = __import__("time").gmtime(max(EPOCH, 315532800))[:6]
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            zi = zipfile.ZipInfo(arc, stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [], editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this folder on sys.path: edits take effect at once."""
    name = _project()["name"]
    return _write_wheel(wheel_directory, [(f"_{name}_editable.pth", (HERE + "\n").encode())],
                        editable=True)


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name']}-{p['version']}"
    members = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
               ("loom_build_backend.py", os.path.abspath(__file__))] + _sources()
    pkg_info = _metadata(p).encode()
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, f"{base}.tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, data in [("PKG-INFO", pkg_info)] + [(a, open(f, "rb").read()) for a, f in members]:
            ti = tarfile.TarInfo(f"{base}/{arc}")
            ti.size, ti.mtime, ti.mode = len(data), EPOCH, 0o644
            t.addfile(ti, io.BytesIO(data))
    return os.path.basename(path)
