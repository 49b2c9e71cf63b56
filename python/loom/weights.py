"""Weights through loom's sync engine: what ``Job.publish`` and ``Job.pull`` run on.

The trainer publishes every new version of its weights; a thread in libloomsync.so serves
pulls over TCP. A rollout worker that holds the previous version receives sparse XOR deltas of
the bf16 bits (only the buckets that changed); a new or restarted worker receives the version
dense. Each tensor is one shard with its own checksum; the puller verifies every frame's CRC32C
and every shard's checksum against the publisher's manifest before it overwrites anything.

What crosses is the **bf16 bit pattern** of each tensor: that copy is canonical. A trainer that
keeps fp32 master weights publishes their bf16 rounding, and the rollout side runs exactly
those values (bf16 widens to fp32 without loss), so "the rollout worker's weights equal the
trainer's" means equal bf16 bits, which :func:`digest` checks on both sides.

GPU memory: :meth:`Publisher.publish` and :meth:`Puller.pull` also take the flat weights as a
CUDA torch tensor (any 2-byte dtype, contiguous) or an object with ``__cuda_array_interface__``
(CuPy, Numba); the copies then run between the GPU and a pinned staging buffer, overlapped with
encoding and receiving (docs/gpu.md), and the statistics say ``"path": "cuda"`` with each
stage's seconds. Without a CUDA runtime or device that call raises ``SyncError`` ("no CUDA
runtime: ..."). A failed pull into GPU memory may have written part of it: the Puller then
holds no version and its next pull is dense.

Standard library + ctypes; numpy and torch only when given their arrays/tensors. The library
is found like libloomclient (``loom._native``); $LOOM_SYNC_LIB overrides.
"""

import ctypes
import hashlib
import os

from . import _native

NO_VERSION = (1 << 64) - 1


class _PubStats(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint64), ("elems", ctypes.c_uint64),
                ("changed", ctypes.c_uint64), ("delta_bytes", ctypes.c_uint64),
                ("dense_bytes", ctypes.c_uint64), ("buckets", ctypes.c_uint32),
                ("sent", ctypes.c_uint32), ("encode_s", ctypes.c_double)]


class _PullStats(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint64), ("base", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64), ("changed", ctypes.c_uint64),
                ("wait_s", ctypes.c_double), ("seconds", ctypes.c_double)]


class _CudaOpts(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("staging_bytes", ctypes.c_uint64),
                ("have_hash", ctypes.POINTER(ctypes.c_uint64)),
                ("new_hash", ctypes.POINTER(ctypes.c_uint64)),
                ("scratch", ctypes.c_void_p)]


class _CudaStats(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char * 8), ("runtime", ctypes.c_char * 256),
                ("d2h_s", ctypes.c_double), ("h2d_s", ctypes.c_double),
                ("encode_s", ctypes.c_double), ("recv_s", ctypes.c_double),
                ("decode_s", ctypes.c_double), ("d2h_bytes", ctypes.c_uint64),
                ("h2d_bytes", ctypes.c_uint64), ("copies", ctypes.c_uint32)]

    def stages(self):
        return {"d2h_s": self.d2h_s, "encode_s": self.encode_s, "recv_s": self.recv_s,
                "decode_s": self.decode_s, "h2d_s": self.h2d_s, "d2h_bytes": self.d2h_bytes,
                "h2d_bytes": self.h2d_bytes, "runtime": self.runtime.decode()}


class SyncError(Exception):
    """A publish or pull failed; code is the LOOM_E* value, field the offending field."""

    def __init__(self, message, code=0, field=""):
        super().__init__(message)
        self.code = code
        self.field = field


def _load():
    return _native.library("loomsync", "LOOM_SYNC_LIB", _declare)


def _declare(lib):
    P, U64P, E = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(_native.Err)
    lib.loom_sync_pub_new.argtypes = [ctypes.c_char_p, U64P, ctypes.c_size_t, ctypes.c_uint64,
                                      ctypes.c_char_p, ctypes.c_uint16, ctypes.POINTER(P), E]
    lib.loom_sync_pub_port.argtypes = [P]
    lib.loom_sync_pub_port.restype = ctypes.c_uint16
    lib.loom_sync_pub_publish.argtypes = [P, ctypes.c_uint64, P, ctypes.POINTER(_PubStats), E]
    lib.loom_sync_pub_free.argtypes = [P]
    lib.loom_sync_pull.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint16, U64P,
                                   ctypes.c_size_t, P, ctypes.c_uint64, ctypes.c_uint64,
                                   ctypes.c_double, ctypes.POINTER(_PullStats), E]
    lib.loom_sync_pub_set_key.argtypes = [P, ctypes.c_char_p, E]
    lib.loom_sync_pull_keyed.argtypes = [ctypes.c_char_p] + lib.loom_sync_pull.argtypes
    CO, CS = ctypes.POINTER(_CudaOpts), ctypes.POINTER(_CudaStats)
    lib.loom_sync_pub_publish_cuda.argtypes = [P, ctypes.c_uint64, P, CO,
                                               ctypes.POINTER(_PubStats), CS, E]
    lib.loom_sync_pull_cuda.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_uint16, U64P, ctypes.c_size_t, P,
                                        ctypes.c_uint64, ctypes.c_uint64, ctypes.c_double, CO,
                                        ctypes.POINTER(_PullStats), CS, E]
    return lib


def _key(key):
    """The job's sync key as 32 bytes: key (64 hex digits or bytes), else $LOOM_SYNC_KEY, else
    None (pulls not authenticated; docs/security.md)."""
    key = key if key is not None else os.environ.get("LOOM_SYNC_KEY") or None
    if key is None:
        return None
    raw = bytes.fromhex(key) if isinstance(key, str) else bytes(key)
    if len(raw) != 32:
        raise SyncError("sync key: expected 32 bytes (64 hex digits)", -1, "sync_key")
    return raw


def _raise(rc, err, what):
    raise SyncError(f"{what}: {err.field.decode()}{': ' if err.field else ''}"
                    f"{err.msg.decode(errors='replace')}", rc, err.field.decode())


def _shards(sizes):
    sizes = [int(n) for n in sizes]
    if not sizes or min(sizes) <= 0:
        raise SyncError("shards: every shard needs at least one element", -1, "shards")
    return (ctypes.c_uint64 * len(sizes))(*sizes), sizes


def _buffer(flat, elems):
    """Address of a writable, C-contiguous uint16 numpy array of elems elements."""
    if flat.dtype.itemsize != 2 or not flat.flags["C_CONTIGUOUS"] or flat.size != elems:
        raise SyncError(f"weights: need {elems} contiguous 16-bit elements, got "
                        f"{flat.size} of {flat.dtype}", -1, "weights")
    return ctypes.c_void_p(flat.ctypes.data)


def _use_process_cudart():
    """Point the library at the libcudart already mapped into this process (torch's or CuPy's),
    as loom.state does, so one process has one runtime; $LOOM_CUDART wins."""
    if not os.environ.get("LOOM_CUDART"):
        from .state import _cudart_in_process
        found = _cudart_in_process()
        if found:
            os.environ["LOOM_CUDART"] = found


def _cuda_buffer(flat, elems):
    """(address, device) of flat when it lives in GPU memory: a CUDA torch tensor or an object
    with ``__cuda_array_interface__``, contiguous, of elems 2-byte elements; None for host
    memory. Waits for torch's current stream on that device: loom's copies run on their own
    stream, which does not order itself after torch's."""
    if type(flat).__module__.startswith("torch"):
        if flat.device.type != "cuda":
            return None
        if flat.element_size() != 2 or not flat.is_contiguous() or flat.numel() != elems:
            raise SyncError(f"weights: need {elems} contiguous 16-bit elements, got "
                            f"{flat.numel()} of {flat.dtype}", -1, "weights")
        import torch
        torch.cuda.current_stream(flat.device).synchronize()
        _use_process_cudart()
        return ctypes.c_void_p(flat.data_ptr()), flat.device.index or 0
    cai = getattr(flat, "__cuda_array_interface__", None)
    if cai is None:
        return None
    n = 1
    for d in cai["shape"]:
        n *= d
    if cai.get("strides") is not None or cai["typestr"][1:] not in ("u2", "i2", "f2") or n != elems:
        raise SyncError(f"weights: need {elems} C-contiguous 16-bit elements, got shape "
                        f"{tuple(cai['shape'])} of {cai['typestr']}", -1, "weights")
    _use_process_cudart()
    return ctypes.c_void_p(cai["data"][0]), getattr(getattr(flat, "device", None), "id", 0) or 0


# ---- bf16 views of torch tensors ------------------------------------------------------------

def bf16_bits(tensors):
    """The bf16 bit patterns of tensors, concatenated: a new numpy uint16 array."""
    import numpy as np
    import torch
    parts = [t.detach().reshape(-1).to(torch.bfloat16).view(torch.int16).numpy() for t in tensors]
    return np.concatenate(parts).view(np.uint16)


def load_bf16_bits(tensors, flat):
    """Set each tensor (fp32 or bf16) to its slice of flat (bf16 bits), exactly."""
    import torch
    off = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            src = torch.from_numpy(flat[off:off + n].view("int16").copy()).view(torch.bfloat16)
            t.copy_(src.to(t.dtype).view_as(t))
            off += n


def on_cuda(tensors):
    """True when tensors are CUDA torch tensors, all on one device; False when all are on the
    host; else SyncError (a mix, or several devices)."""
    devs = {(t.device.type, t.device.index) for t in tensors}
    if len(devs) != 1:
        raise SyncError(f"tensors: all on the host or all on one CUDA device, got {sorted(devs)}",
                        -1, "tensors")
    return next(iter(devs))[0] == "cuda"


def bf16_bits_cuda(tensors):
    """The bf16 bit patterns of CUDA tensors, concatenated on their GPU (int16)."""
    import torch
    with torch.no_grad():
        return torch.cat([t.detach().reshape(-1).to(torch.bfloat16).view(torch.int16)
                          for t in tensors])


def load_bf16_bits_cuda(tensors, flat):
    """Set each CUDA tensor to its slice of flat (bf16 bits on the same GPU), exactly."""
    import torch
    off = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[off:off + n].view(torch.bfloat16).to(t.dtype).view_as(t))
            off += n


def digest(flat):
    """SHA-256 of the bf16 bits (hex): what both sides log to show they hold the same model."""
    return hashlib.sha256(memoryview(flat).cast("B")).hexdigest()


# ---- publisher and puller -------------------------------------------------------------------

def _model(model):
    return None if model is None else str(model).encode()


class Publisher(_native.Handle):
    """The trainer's side: serves its latest weights. shards: element count per shard.
    model: the id it serves under (a puller that names another id is refused)."""

    def __init__(self, shards, host="127.0.0.1", port=0, bucket_elems=1 << 14,
                 endpoint_file=None, model=None, key=None):
        self.lib = _load()
        self._shards, self.sizes = _shards(shards)
        self.elems = sum(self.sizes)
        self.h = ctypes.c_void_p()
        err = _native.Err()
        self.model = model
        rc = self.lib.loom_sync_pub_new(_model(model), self._shards, len(self.sizes),
                                        int(bucket_elems), host.encode(), int(port),
                                        ctypes.byref(self.h), ctypes.byref(err))
        if rc:
            _raise(rc, err, "publisher")
        self.key = _key(key)
        if self.key:
            self.lib.loom_sync_pub_set_key(self.h, self.key, ctypes.byref(err))
        self.endpoint = f"{host}:{self.lib.loom_sync_pub_port(self.h)}"
        self.version = None
        if endpoint_file:
            tmp = f"{endpoint_file}.tmp{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(self.endpoint + "\n")
            os.replace(tmp, endpoint_file)

    def publish(self, version, flat):
        """Make flat (uint16 bf16 bits of every shard; host memory, or GPU memory: see the
        module's doc) version `version`; returns the delta's statistics: changed elements,
        density, delta and dense bytes, and ``path`` ('host' or 'cuda', with the stages)."""
        st, err = _PubStats(), _native.Err()
        dev = _cuda_buffer(flat, self.elems)
        cs = _CudaStats()
        if dev:
            opts = _CudaOpts(dev[1], 0)
            rc = self.lib.loom_sync_pub_publish_cuda(self.h, int(version), dev[0],
                                                     ctypes.byref(opts), ctypes.byref(st),
                                                     ctypes.byref(cs), ctypes.byref(err))
        else:
            rc = self.lib.loom_sync_pub_publish(self.h, int(version), _buffer(flat, self.elems),
                                                ctypes.byref(st), ctypes.byref(err))
        if rc:
            _raise(rc, err, "publish")
        self.version = int(version)
        out = {"version": st.version, "elems": st.elems, "changed": st.changed,
               "density": st.changed / st.elems, "delta_bytes": st.delta_bytes,
               "dense_bytes": st.dense_bytes, "buckets": st.buckets, "buckets_sent": st.sent,
               "encode_s": st.encode_s, "path": "cuda" if dev else "host"}
        if dev:
            out.update(cs.stages())
        return out

    def close(self):
        if self.h:
            self.lib.loom_sync_pub_free(self.h)
            self.h = None


RETRY_FIRST_S = 0.05  # the Puller's first pause before it asks a failed endpoint again
RETRY_MAX_S = 1.0     # and the longest


class Puller:
    """The rollout worker's side. endpoint: "host:port", or a file the publisher wrote it to
    (waited for). model: accept only a publisher serving this id (None: any of this shape)."""

    def __init__(self, endpoint, shards, model=None, key=None):
        self.lib = _load()
        self.key = _key(key)
        self._shards, self.sizes = _shards(shards)
        self.elems = sum(self.sizes)
        self.endpoint = endpoint
        self.from_file = ":" not in endpoint or os.path.sep in endpoint
        self.model = model
        self.version = None
        # GPU pulls: the shards' checksums of the version held, so a delta into GPU memory
        # checks only what it changes (sync.h, loom_sync_cuda_opts.have_hash)
        self._hash = (ctypes.c_uint64 * len(self.sizes))()
        self._hash_ok = False
        self._scratch = None  # GPU pulls: the host buffer frames are applied in, kept

    def _resolve(self, timeout_s):
        ep = self.endpoint
        if self.from_file:
            import time
            end = time.monotonic() + timeout_s
            while not os.path.exists(ep):
                if time.monotonic() > end:
                    raise SyncError(f"pull: no publisher endpoint in {ep}", -9, "endpoint")
                time.sleep(0.02)
            with open(ep) as f:
                ep = f.read().strip()
        host, _, port = ep.rpartition(":")
        return host, int(port)

    def pull(self, flat, want, timeout_s=60.0):
        """Bring flat (uint16, updated in place) to the latest version >= want. Returns the
        pull's statistics; raises SyncError (flat unchanged) on a timeout or a bad frame. flat
        in GPU memory (see the module's doc) is written as buckets arrive: a failure after the
        first one leaves it partly updated, and this Puller then holds no version.

        When the endpoint is a file, a publisher that cannot be reached (or does not answer)
        is looked up again in the file every second until timeout_s: a trainer that was
        restarted serves from a new port (and whatever took over its old port serves another
        model, which is refused and retried the same way). Its version `have` is accepted only
        if its checksums match the bits held here. Retries back off (RETRY_FIRST_S doubling to
        RETRY_MAX_S), so a publisher that accepts and closes at once, or answers "busy", is not
        hammered."""
        import time
        end = time.monotonic() + timeout_s
        pause = RETRY_FIRST_S
        while True:
            host, port = self._resolve(max(end - time.monotonic(), 0.05))
            left = max(end - time.monotonic(), 0.05)
            try:
                return self._pull_once(host, port, flat, want,
                                       min(left, 1.0) if self.from_file else left)
            except SyncError as err:
                if (not self.from_file
                        or err.code not in (_native.EIO, _native.ETIMEDOUT, _native.ENOENT)
                        or time.monotonic() >= end):
                    raise
                # another model answered, the publisher was busy or closed on us: look again
                time.sleep(max(0.0, min(pause, end - time.monotonic())))
                pause = min(pause * 2, RETRY_MAX_S)

    def _pull_once(self, host, port, flat, want, timeout_s):
        have = NO_VERSION if self.version is None else self.version
        st, err = _PullStats(), _native.Err()
        dev = _cuda_buffer(flat, self.elems)
        cs = _CudaStats()
        if dev:
            kept = ctypes.cast(self._hash, ctypes.POINTER(ctypes.c_uint64))
            if self._scratch is None:
                self._scratch = (ctypes.c_uint16 * self.elems)()
            opts = _CudaOpts(dev[1], 0, kept if self._hash_ok and self.version is not None
                             else None, kept, ctypes.addressof(self._scratch))
            self._hash_ok = False  # until this pull succeeds
            rc = self.lib.loom_sync_pull_cuda(self.key, _model(self.model), host.encode(), port,
                                              self._shards, len(self.sizes), dev[0], have,
                                              int(want), float(timeout_s), ctypes.byref(opts),
                                              ctypes.byref(st), ctypes.byref(cs),
                                              ctypes.byref(err))
        else:
            rc = self.lib.loom_sync_pull_keyed(self.key, _model(self.model), host.encode(), port,
                                               self._shards, len(self.sizes),
                                               _buffer(flat, self.elems), have, int(want),
                                               float(timeout_s), ctypes.byref(st),
                                               ctypes.byref(err))
        if rc:
            if dev and st.version == NO_VERSION:
                self.version = None  # the GPU weights were partly written: next pull is dense
            _raise(rc, err, "pull")
        self.version = int(st.version)
        self._hash_ok = bool(dev)
        out = {"version": st.version, "dense": st.base == NO_VERSION, "bytes": st.bytes,
               "changed": st.changed, "wait_s": st.wait_s, "seconds": st.seconds,
               "path": "cuda" if dev else "host"}
        if dev:
            out.update(cs.stages())
        return out
