"""loom.state: offload, load and prefetch a job's tensors through the node's loom-state daemon.

loom-state (docs/state.md) keeps each job's tensors on one of three tiers: the worker's device
memory, the daemon's pinned host pool, or O_DIRECT files on disk. Tensors are stored under
canonical keys ``(job, version, name, slice, dtype)``, so data-parallel replicas offloading the
same slice store it once, and a rank may load a different slice of a tensor than the ones that
were saved (re-layout reload). Every call is synchronous: when ``offload`` returns the state is
resident in the tier asked for; when ``load`` returns the bytes are in your buffers::

    import numpy as np
    from loom import state

    st = state.Client("/run/loom-state/loom-state.sock")
    dev = state.DeviceBuffer(256 << 20)          # emulated device memory (a memfd)
    w = dev.array((4096, 4096), np.float32)       # a tensor living in it
    st.offload({"w": w}, job="math-7b", version=3)            # device -> host
    st.prefetch("math-7b")                                   # scheduler hint (async)
    res = st.load({"w": w}, job="math-7b", version=3, device="gpu0")
    print(res.found, res.seconds)                            # 'host', 0.01

Tensors are numpy arrays or PyTorch tensors (C-contiguous), handed over as raw buffers: an
array that lives in a :class:`DeviceBuffer` goes to the daemon by file descriptor with no extra
copy; any other array is staged through the client's own memfd (one copy, counted in
``Result.staged_bytes``). CUDA tensors (torch on a ``cuda`` device, bf16 included, or any object
with ``__cuda_array_interface__``) go through the CUDA path: the client library loads libcudart
with dlopen and copies through a pinned staging buffer the daemon shares (docs/gpu.md);
``Result.path`` says which path ran, ``cuda_available()`` whether it can. A dict key is a tensor name (the whole tensor) or a :class:`Slice`
(a rectangle of a bigger tensor, e.g. one tensor-parallel rank's shard). Shapes map to
rectangles as rows x cols: 1-D (n,) is n x 1; N-D is shape[0] x prod(shape[1:]).

numpy (and torch) are needed only for the arrays you pass; this module itself is ctypes over
libloomstate.so (found like libloomclient.so, see ``loom._native``; $LOOM_STATE_LIB overrides).
"""

import ctypes
import fcntl
import mmap
import os

from . import _native
from ._native import ECORRUPT, EEXIST, EINVAL, EIO, ENOENT, ERANGE  # noqa: F401  (re-exported)

TIERS = {0: "none", 1: "device", 2: "host", 3: "disk"}
_TIER_CODE = {v: k for k, v in TIERS.items()}


class StateError(Exception):
    """A loom-state call failed: ``code`` is the LOOM_E* code, ``field`` names the key."""

    def __init__(self, code, msg, field=""):
        super().__init__(msg)
        self.code = code
        self.field = field


class _Key(ctypes.Structure):
    _fields_ = [("job", ctypes.c_char * 64), ("version", ctypes.c_uint64),
                ("name", ctypes.c_char * 128), ("r0", ctypes.c_uint64), ("r1", ctypes.c_uint64),
                ("c0", ctypes.c_uint64), ("c1", ctypes.c_uint64), ("dtype", ctypes.c_char * 8)]


class _Io(ctypes.Structure):
    _fields_ = [("key", _Key), ("fd", ctypes.c_int), ("off", ctypes.c_uint64),
                ("ptr", ctypes.c_void_p), ("len", ctypes.c_uint64)]


class _Result(ctypes.Structure):
    _fields_ = [("found", ctypes.c_int), ("bytes", ctypes.c_uint64),
                ("dedup_bytes", ctypes.c_uint64), ("disk_bytes", ctypes.c_uint64),
                ("staged_bytes", ctypes.c_uint64), ("seconds", ctypes.c_double),
                ("buckets", ctypes.c_uint32), ("path", ctypes.c_char * 16)]


class _Usage(ctypes.Structure):
    _fields_ = [("job", ctypes.c_char * 64), ("host_bytes", ctypes.c_uint64),
                ("disk_bytes", ctypes.c_uint64), ("device_bytes", ctypes.c_uint64),
                ("slices", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [("host_cap", ctypes.c_uint64), ("host_used", ctypes.c_uint64),
                ("disk_cap", ctypes.c_uint64), ("disk_used", ctypes.c_uint64),
                ("device_cap", ctypes.c_uint64), ("host_locked", ctypes.c_int),
                ("evictions", ctypes.c_uint64), ("prefetches", ctypes.c_uint64),
                ("prefetch_bytes", ctypes.c_uint64), ("njobs", ctypes.c_size_t),
                ("jobs", ctypes.POINTER(_Usage))]


class Result:
    """What a call did: ``found`` ('device', 'host', 'disk'), ``bytes`` copied, ``dedup_bytes``
    (offload: already stored), ``disk_bytes``, ``staged_bytes`` (copied through the client's
    staging memfd), ``seconds`` (daemon side), ``path``: which copy path ran ('cuda': GPU
    memory through the CUDA runtime; 'emulated': memfd device buffers and plain memory;
    'cuda+emulated' when a call had both) and ``buckets`` (daemon requests)."""

    def __init__(self, r=None):
        self.found, self.path = "none", ""
        self.bytes = self.dedup_bytes = self.disk_bytes = self.staged_bytes = self.buckets = 0
        self.seconds = 0.0
        if r is not None:
            self.add(r)

    def add(self, r):
        found = TIERS.get(r.found, "none")
        if _TIER_CODE[found] > _TIER_CODE[self.found]:
            self.found = found
        self.bytes += r.bytes
        self.dedup_bytes += r.dedup_bytes
        self.disk_bytes += r.disk_bytes
        self.staged_bytes += r.staged_bytes
        self.seconds += r.seconds
        self.buckets += r.buckets
        path = r.path.decode()
        self.path = path if self.path in ("", path) else "cuda+emulated"

    def __repr__(self):
        return (f"Result(found={self.found!r}, bytes={self.bytes}, dedup_bytes={self.dedup_bytes}"
                f", disk_bytes={self.disk_bytes}, seconds={self.seconds:.6f}, path={self.path!r})")


class Slice:
    """A rectangle of a rows x cols tensor: rows [r0, r1), columns [c0, c1). Use it as the dict
    key to offload or load one shard: ``{Slice("wq", rows=(0, 2048)): shard}``; cols defaults
    to the shard's own width starting at 0."""

    def __init__(self, name, rows=None, cols=None):
        self.name, self.rows, self.cols = name, rows, cols

    def __repr__(self):
        return f"Slice({self.name!r}, rows={self.rows}, cols={self.cols})"


def _load_lib():
    return _native.library("loomstate", "LOOM_STATE_LIB", _declare)


def _declare(lib):
    P, E = ctypes.c_void_p, ctypes.POINTER(_native.Err)
    lib.loom_state_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(P), E]
    lib.loom_state_close.argtypes = [P]
    lib.loom_state_offload.argtypes = [P, ctypes.POINTER(_Io), ctypes.c_size_t, ctypes.c_int,
                                       ctypes.POINTER(_Result), E]
    lib.loom_state_load.argtypes = [P, ctypes.POINTER(_Io), ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.POINTER(_Result), E]
    lib.loom_state_prefetch.argtypes = [P, ctypes.c_char_p, E]
    lib.loom_state_order.argtypes = [P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, E]
    lib.loom_state_drop.argtypes = [P, ctypes.c_char_p, ctypes.c_uint64, E]
    lib.loom_state_stat.argtypes = [P, ctypes.POINTER(_Stats), E]
    lib.loom_state_stats_free.argtypes = [ctypes.POINTER(_Stats)]
    lib.loom_state_cuda_probe.argtypes = [ctypes.c_char_p, ctypes.c_size_t, E]
    lib.loom_state_cuda_offload.argtypes = [P, ctypes.POINTER(_Io), ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_int, ctypes.POINTER(_Result), E]
    lib.loom_state_cuda_load.argtypes = [P, ctypes.POINTER(_Io), ctypes.c_size_t, ctypes.c_int,
                                         ctypes.POINTER(_Result), E]
    lib.loom_state_cuda_bucket.argtypes = [P, ctypes.c_uint64]
    return lib


def _check(rc, err):
    if rc != 0:
        raise StateError(rc, err.msg.decode(errors="replace"), err.field.decode(errors="replace"))


# dtype names of the daemon, by numpy dtype string and torch dtype name
_NP_DTYPES = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "uint8": "u8",
              "int16": "i16", "int32": "i32", "int64": "i64", "bfloat16": "bf16"}


# __cuda_array_interface__ type strings (CuPy, Numba, ...) by daemon dtype name
_CAI_DTYPES = {"<f2": "f16", "<f4": "f32", "<f8": "f64", "|i1": "i8", "|u1": "u8", "<i2": "i16",
               "<i4": "i32", "<i8": "i64"}


def _cuda_device(t):
    """The CUDA device ordinal of a GPU tensor, or None for host memory: torch tensors on a
    'cuda' device and objects with ``__cuda_array_interface__`` (device: their ``.device.id``,
    else 0)."""
    if type(t).__module__.startswith("torch"):
        return t.device.index if t.device.type == "cuda" else None
    if hasattr(t, "__cuda_array_interface__"):
        return getattr(getattr(t, "device", None), "id", 0) or 0
    return None


def _buffer(t):
    """(address, nbytes, dtype name, shape) of a C-contiguous numpy array, torch tensor (CPU or
    CUDA) or object with ``__cuda_array_interface__``."""
    mod = type(t).__module__
    if mod.startswith("torch"):
        if t.device.type not in ("cpu", "cuda") or not t.is_contiguous():
            raise ValueError("torch tensors must be contiguous, on the CPU or a CUDA device")
        name = str(t.dtype).replace("torch.", "")
        if name not in _NP_DTYPES:
            raise ValueError(f"dtype {t.dtype} is not supported")
        return t.data_ptr(), t.numel() * t.element_size(), _NP_DTYPES[name], tuple(t.shape)
    cai = getattr(t, "__cuda_array_interface__", None)
    if cai is not None:
        if cai.get("strides") is not None:
            raise ValueError("CUDA arrays must be C-contiguous (strides None)")
        if cai["typestr"] not in _CAI_DTYPES:
            raise ValueError(f"typestr {cai['typestr']} is not supported")
        dt, shape = _CAI_DTYPES[cai["typestr"]], tuple(cai["shape"])
        n = 1
        for d in shape:
            n *= d
        return cai["data"][0], n * _ESIZE[dt], dt, shape
    if not t.flags["C_CONTIGUOUS"]:
        raise ValueError("numpy arrays must be C-contiguous")
    name = str(t.dtype)
    if name not in _NP_DTYPES:
        raise ValueError(f"dtype {t.dtype} is not supported")
    return t.ctypes.data, t.nbytes, _NP_DTYPES[name], tuple(t.shape)


def _sync_torch(tensors):
    """Wait for the work queued on torch's current stream of each CUDA device used: the copies run
    on loom-state's own stream, which does not order itself after torch's."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None:
        return
    for dev in {t.device.index for t in tensors
                if type(t).__module__.startswith("torch") and t.device.type == "cuda"}:
        torch.cuda.current_stream(dev).synchronize()


def _cudart_in_process():
    """The libcudart already mapped into this process (by torch or CuPy), so loom-state uses the
    same runtime; None when there is none (a runtime linked statically leaves no file)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "/libcudart.so" in path and os.path.exists(path):
                    return path
    except OSError:
        pass
    return None


_cuda_probe = None  # cuda_available()'s answer: the runtime is loaded once per process


def cuda_available():
    """(True, runtime file) when loom-state's CUDA path can run, else (False, the reason: "no CUDA
    runtime: ..." or "no CUDA device: ..."). Asked once per process."""
    global _cuda_probe
    if _cuda_probe is None:
        _cuda_probe = _probe_cuda()
    return _cuda_probe


def _probe_cuda():
    lib = _load_lib()
    if not os.environ.get("LOOM_CUDART"):
        found = _cudart_in_process()
        if found:
            os.environ["LOOM_CUDART"] = found
    buf, err = ctypes.create_string_buffer(256), _native.Err()
    n = lib.loom_state_cuda_probe(buf, 256, ctypes.byref(err))
    if n <= 0:
        return False, err.msg.decode(errors="replace")
    return True, buf.value.decode()


def _rect(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], 1
    cols = 1
    for s in shape[1:]:
        cols *= s
    return shape[0], cols


class DeviceBuffer:
    """Emulated device memory: a memfd the worker owns, mapped into this process. Arrays made by
    :meth:`array` (numpy) or :meth:`tensor` (torch) live in it and travel to the daemon by file
    descriptor with no staging copy. The memfd is sealed against shrinking (``F_SEAL_SHRINK``),
    as the daemon requires of every buffer it maps. Allocation is a bump pointer (64-byte
    aligned); call :meth:`reset` to reuse the space."""

    def __init__(self, nbytes, name="loom-device"):
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, nbytes)
        # loom-state maps the buffer and refuses one that could shrink under its copy
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        self.size = nbytes
        self.mm = mmap.mmap(self.fd, nbytes)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.used = 0

    def _take(self, nbytes):
        off = (self.used + 63) & ~63
        if off + nbytes > self.size:
            raise MemoryError(f"device buffer full: {nbytes} bytes asked, "
                              f"{self.size - off} left of {self.size}")
        self.used = off + nbytes
        return off

    def array(self, shape, dtype):
        """A numpy array of `shape` and `dtype` inside the buffer (contents undefined)."""
        import numpy as np
        dt = np.dtype(dtype)
        n = 1
        for s in (shape if isinstance(shape, tuple) else (shape,)):
            n *= s
        off = self._take(n * dt.itemsize)
        return np.frombuffer(self.mm, dtype=dt, count=n, offset=off).reshape(shape)

    def tensor(self, shape, dtype):
        """A torch tensor of `shape` and torch `dtype` inside the buffer."""
        import numpy as np
        import torch
        esize = torch.empty((), dtype=dtype).element_size()
        n = 1
        for s in shape:
            n *= s
        off = self._take(n * esize)
        raw = np.frombuffer(self.mm, dtype=np.uint8, count=n * esize, offset=off)
        return torch.from_numpy(raw).view(dtype).reshape(shape)

    def reset(self):
        self.used = 0

    def locate(self, addr, nbytes):
        """Offset of [addr, addr + nbytes) in the buffer, or None when it lies outside."""
        if self.base <= addr and addr + nbytes <= self.base + self.size:
            return addr - self.base
        return None

    def close(self):
        # Arrays still referencing the map keep it alive; the fd is ours to close.
        try:
            self.mm.close()
        except BufferError:
            pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Client(_native.Handle):
    """A connection to loom-state. Not thread-safe: use one per thread.

    ``devices`` lists the :class:`DeviceBuffer` objects whose arrays should go by descriptor."""

    def __init__(self, sock_path, devices=()):
        self._lib = _load_lib()
        self._h = ctypes.c_void_p()
        self.devices = list(devices)
        err = _native.Err()
        _check(self._lib.loom_state_connect(sock_path.encode(), ctypes.byref(self._h),
                                            ctypes.byref(err)), err)

    def close(self):
        if self._h:
            self._lib.loom_state_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ios(self, tensors, job, version):
        """The ctypes ios of ``{name or Slice: tensor}`` and, beside them, each one's CUDA device
        ordinal (None: host memory)."""
        items = list(tensors.items())
        ios = (_Io * len(items))()
        devs = []
        for i, (k, t) in enumerate(items):
            addr, nbytes, dt, shape = _buffer(t)
            rows, cols = _rect(shape)
            io = ios[i]
            if isinstance(k, Slice):
                name = k.name
                r0, r1 = k.rows if k.rows is not None else (0, rows)
                c0, c1 = k.cols if k.cols is not None else (0, cols)
            else:
                name, r0, r1, c0, c1 = str(k), 0, rows, 0, cols
            if (r1 - r0) * (c1 - c0) * _ESIZE[dt] != nbytes:
                raise ValueError(f"{name}: slice rows {r0}:{r1} x cols {c0}:{c1} does not match "
                                 f"the buffer's {nbytes} bytes")
            io.key.job = job.encode()
            io.key.version = version
            io.key.name = name.encode()
            io.key.r0, io.key.r1, io.key.c0, io.key.c1 = r0, r1, c0, c1
            io.key.dtype = dt.encode()
            io.len = nbytes
            io.fd = -1
            for d in self.devices:
                off = d.locate(addr, nbytes)
                if off is not None:
                    io.fd, io.off = d.fd, off
                    break
            if io.fd < 0:
                io.ptr = addr
            devs.append(_cuda_device(t))
        return ios, devs

    def _run(self, tensors, job, version, load, tier="host", device=""):
        """One call per path: host buffers through the emulated path, CUDA tensors through the
        CUDA path, one call per CUDA device."""
        ios, devs = self._ios(tensors, job, version)
        if any(d is not None for d in devs):
            ok, why = cuda_available()
            if not ok:
                raise StateError(EIO, why, "cuda")
            _sync_torch(list(tensors.values()))
        out = Result()
        for want in sorted({-1 if d is None else d for d in devs}):
            sel = [i for i, d in enumerate(devs) if (-1 if d is None else d) == want]
            sub = (_Io * len(sel))(*[ios[i] for i in sel])
            res, err = _Result(), _native.Err()
            if want < 0 and load:
                rc = self._lib.loom_state_load(self._h, sub, len(sel), device.encode(),
                                               ctypes.byref(res), ctypes.byref(err))
            elif want < 0:
                rc = self._lib.loom_state_offload(self._h, sub, len(sel), _TIER_CODE[tier],
                                                  ctypes.byref(res), ctypes.byref(err))
            elif load:
                rc = self._lib.loom_state_cuda_load(self._h, sub, len(sel), want,
                                                    ctypes.byref(res), ctypes.byref(err))
            else:
                rc = self._lib.loom_state_cuda_offload(self._h, sub, len(sel), want,
                                                       _TIER_CODE[tier], ctypes.byref(res),
                                                       ctypes.byref(err))
            _check(rc, err)
            out.add(res)
        return out

    def cuda_bucket(self, nbytes):
        """Bucket size of the CUDA path (default 64 MiB): the copies of one bucket to or from the
        GPU overlap the daemon's work on the previous one."""
        self._lib.loom_state_cuda_bucket(self._h, nbytes)

    def offload(self, tensors, job, version=0, tier="host"):
        """Copy ``{name or Slice: tensor}`` into `tier` ('host' or 'disk') under (job, version).
        All or nothing for host buffers; CUDA tensors go in buckets, each all or nothing (see
        docs/state.md). Raises StateError (code ERANGE) when the tier is full, (EIO, field
        'cuda') for CUDA tensors where the CUDA path cannot run."""
        return self._run(tensors, job, version, load=False, tier=tier)

    def load(self, tensors, job, version=0, device=""):
        """Fill ``{name or Slice: tensor}`` in place from the stored slices of (job, version):
        CUDA tensors are filled on the GPU they live on. ``device`` names the emulated device the
        host buffers belong to. Raises StateError (ENOENT: not covered, ECORRUPT: a disk slice
        failed its checksum; ``field`` is the key)."""
        return self._run(tensors, job, version, load=True, device=device)

    def prefetch(self, job):
        """Hint: `job` runs next; the daemon pulls its state up to host memory in the background."""
        err = _native.Err()
        _check(self._lib.loom_state_prefetch(self._h, job.encode(), ctypes.byref(err)), err)

    def order(self, jobs):
        """Hint: the predicted order of the next jobs; eviction spares the soonest."""
        arr = (ctypes.c_char_p * max(1, len(jobs)))(*[j.encode() for j in jobs])
        err = _native.Err()
        _check(self._lib.loom_state_order(self._h, arr, len(jobs), ctypes.byref(err)), err)

    def drop(self, job, version=None):
        """Forget `job`'s slices (versions <= version; all when None)."""
        err = _native.Err()
        v = 0xFFFFFFFFFFFFFFFF if version is None else version
        _check(self._lib.loom_state_drop(self._h, job.encode(), v, ctypes.byref(err)), err)

    def stats(self):
        """Capacity and usage per tier and per job, as a dict."""
        st, err = _Stats(), _native.Err()
        _check(self._lib.loom_state_stat(self._h, ctypes.byref(st), ctypes.byref(err)), err)
        out = {k: getattr(st, k) for k in ("host_cap", "host_used", "disk_cap", "disk_used",
                                           "device_cap", "evictions", "prefetches",
                                           "prefetch_bytes")}
        out["host_locked"] = bool(st.host_locked)
        out["jobs"] = {st.jobs[i].job.decode(): {"host_bytes": st.jobs[i].host_bytes,
                                                 "disk_bytes": st.jobs[i].disk_bytes,
                                                 "device_bytes": st.jobs[i].device_bytes,
                                                 "slices": st.jobs[i].slices}
                       for i in range(st.njobs)}
        self._lib.loom_state_stats_free(ctypes.byref(st))
        return out


_ESIZE = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "u8": 1, "i16": 2, "i32": 4,
          "i64": 8}
