"""ctypes bindings of libloomclient (include/loom/client.h), and the one place that finds and
loads loom's shared libraries (libloomclient.so, libloomstate.so, libloomsync.so).

A library is looked up in this order: the path in its own variable ($LOOM_CLIENT_LIB,
$LOOM_STATE_LIB, $LOOM_SYNC_LIB); the library in $LOOM_BUILD_DIR; beside $LOOM_CLIENT_LIB; in
the repository's build folders (build, build-test, build-*) next to this package; then an
installed library: its soname (libloomclient.so.0) through the dynamic loader's own search
($LD_LIBRARY_PATH, the ld.so cache, /usr/lib), ctypes.util.find_library, and last the libdir
that pkg-config gives for loom-client, loom-state or loom-sync ($PKG_CONFIG_PATH). Each is
loaded once per process.
"""

import ctypes
import ctypes.util
import glob
import os
import subprocess
import threading

# Error codes of include/loom/common.h.
EINVAL, ENOMEM, ENOENT, ESTATE, EREJECT, EIO = -1, -2, -3, -4, -5, -6
ERANGE, ECORRUPT, ETIMEDOUT, EEXIST, EPROTO = -7, -8, -9, -10, -11


class Err(ctypes.Structure):
    """loom_err of include/loom/common.h: what went wrong, and in which field."""
    _fields_ = [("msg", ctypes.c_char * 512), ("field", ctypes.c_char * 128),
                ("line", ctypes.c_int), ("col", ctypes.c_int)]


class Handle:
    """An object that owns a C handle: close() frees it, and so does garbage collection."""

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Opts(ctypes.Structure):
    _fields_ = [
        ("request_timeout_s", ctypes.c_double),
        ("retry_for_s", ctypes.c_double),
        ("heartbeat", ctypes.c_bool),
        ("token", ctypes.c_char_p),
        ("ca_file", ctypes.c_char_p),
    ]


class CLease(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_int64),
        ("job", ctypes.c_uint32),
        ("phase", ctypes.c_char * 16),
        ("n_nodes", ctypes.c_int),
        ("nodes", ctypes.c_uint32 * 32),
        ("gpus", ctypes.c_int),
        ("timeout_s", ctypes.c_double),
        ("iteration", ctypes.c_int64),
    ]


class CResume(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_char * 16),
        ("next_phase", ctypes.c_char * 16),
        ("iterations", ctypes.c_int64),
        ("iterations_done", ctypes.c_int64),
        ("resume_iteration", ctypes.c_int64),
        ("restarts", ctypes.c_int),
        ("max_restarts", ctypes.c_int),
        ("resubmits", ctypes.c_int),
        ("took_over", ctypes.c_bool),
    ]


def _candidates(name, env):
    file = f"lib{name}.so"
    path = os.environ.get(env)
    if path:
        yield path
    bdir = os.environ.get("LOOM_BUILD_DIR")
    if bdir:
        yield os.path.join(bdir, file)
    client = os.environ.get("LOOM_CLIENT_LIB")
    if client and env != "LOOM_CLIENT_LIB":
        yield os.path.join(os.path.dirname(client), file)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for d in ["build", "build-test"] + sorted(glob.glob(os.path.join(root, "build-*"))):
        yield os.path.join(root, d, file)
    yield f"lib{name}.so.{SOVERSION}"
    found = ctypes.util.find_library(name)
    if found:
        yield found
    libdir = _pkg_config_libdir(_PC_NAMES.get(name, name))
    if libdir:
        yield os.path.join(libdir, f"lib{name}.so.{SOVERSION}")


# The installed libraries' soname version (LOOM_SOVERSION in packaging/install.cmake) and their
# pkg-config modules.
SOVERSION = 0
_PC_NAMES = {"loomclient": "loom-client", "loomstate": "loom-state", "loomsync": "loom-sync"}


def _pkg_config_libdir(module):
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", module], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None


def _open(name, env):
    tried = []
    for path in _candidates(name, env):
        if os.path.isabs(path) and not os.path.exists(path):
            tried.append(f"{path}: not found")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise OSError(f"lib{name}.so not found (install loom, or set {env} or LOOM_BUILD_DIR); "
                  "tried:\n  " + "\n  ".join(tried))


_libs = {}
_libs_lock = threading.Lock()


def library(name, env, declare):
    """lib<name>.so (name: 'loomclient', 'loomstate', 'loomsync'; env: the variable that names
    its path), loaded once per process; declare(lib) sets its functions' types and returns it.
    Raises OSError, listing every place tried, when it is not found."""
    with _libs_lock:
        if name not in _libs:
            _libs[name] = declare(_open(name, env))
        return _libs[name]


def load():
    """libloomclient with its functions declared; raises OSError when it is not found."""
    return library("loomclient", "LOOM_CLIENT_LIB", _declare)


def _declare(lib):
    P = ctypes.c_void_p
    lib.loom_client_opts_default.argtypes = [ctypes.POINTER(Opts)]
    lib.loom_client_new.argtypes = [ctypes.c_char_p, ctypes.POINTER(Opts)]
    lib.loom_client_new.restype = P
    lib.loom_client_free.argtypes = [P]
    lib.loom_client_error.argtypes = [P]
    lib.loom_client_error.restype = ctypes.c_char_p
    lib.loom_client_status.argtypes = [P]
    lib.loom_client_free_string.argtypes = [P]
    lib.loom_client_submit.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(P)]
    lib.loom_client_get.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(P)]
    lib.loom_client_cancel.argtypes = [P, ctypes.c_uint32]
    lib.loom_client_acquire.argtypes = [P, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_double,
                                        ctypes.POINTER(CLease)]
    lib.loom_client_progress.argtypes = [P, ctypes.POINTER(CLease), ctypes.c_int64,
                                         ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]
    lib.loom_client_release.argtypes = [P, ctypes.POINTER(CLease), ctypes.c_bool,
                                        ctypes.POINTER(P)]
    lib.loom_client_heartbeat.argtypes = [P, ctypes.POINTER(CLease)]
    lib.loom_client_attach.argtypes = [P, ctypes.c_uint32, ctypes.c_char_p,
                                       ctypes.POINTER(CResume)]
    return lib
