"""The process an answer runs in: :mod:`helpers.evaluate` starts one per answer and talks to it through a pipe. The
inputs and the result buffer are memory the judge owns and shares; the answer never sees their seed, the reference,
or the judge's clock. Everything this process relies on is bound here, before the answer is imported: an answer may
replace any Python function of torch, time or triton, at import, when built or during a call, and these names still
hold the originals. The process reports what it saw (one reply per message); the judge decides."""
from __future__ import annotations

import ctypes
import gc
import importlib.util
import sys
import time
import traceback

import torch

from . import check

# region: bound
_Tensor, _TensorBase = torch.Tensor, torch._C.TensorBase
_copy, _as_strided, _size, _reshape = _TensorBase.copy_, _TensorBase.as_strided, _TensorBase.size, _TensorBase.reshape
_numel = _TensorBase.numel
_dtype, _device = _TensorBase.dtype.__get__, _TensorBase.device.__get__
_storage, _storage_ptr, _storage_bytes = _TensorBase.untyped_storage, torch._C.StorageBase.data_ptr, torch._C.StorageBase.nbytes
_cuda_synchronize = getattr(torch._C, "_cuda_synchronize", None)  # every stream of the device
_get_stream = getattr(torch._C, "_cuda_getCurrentStream", None)
_set_stream = getattr(torch._C, "_cuda_setStream", None)
_empty_cache = getattr(torch._C, "_cuda_emptyCache", None)
_type, _clock = type, time.perf_counter
_cuda = False  # whether this process's buffers are on a GPU (set by Worker; nothing here may start CUDA)
# endregion


def _synchronize_device() -> None:
    if _cuda:
        _cuda_synchronize()

# The functions a benchmark reads or waits with, watched for replacement (names, not behaviour:
# this process never calls them). time's clocks and triton's timer are TIMERS; torch.cuda's
# synchronisation, streams and events are SYNCS.
TIMER_NAMES = ("time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
               "time.monotonic_ns", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.record",
               "triton.testing.do_bench")
SYNC_NAMES = ("torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.default_stream",
              "torch.cuda.set_stream", "torch.cuda.stream", "torch.cuda.Stream.synchronize", "torch.cuda.Stream.query",
              "torch.cuda.Stream.wait_stream", "torch.cuda.Stream.wait_event", "torch.cuda.Event.synchronize",
              "torch.cuda.Event.query", "torch.cuda.Event.wait")
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cuda.h's CUlimit


def _lookup(name: str):
    """(owner, attribute) of a dotted name, or None where its module is not imported."""
    module, *path = name.split(".")
    owner = sys.modules.get(module if module != "triton" else "triton.testing")
    if owner is None:
        return None
    if module == "triton":
        path = path[1:]
    for part in path[:-1]:
        owner = getattr(owner, part)
    return owner, path[-1]


def _snapshot() -> dict[str, tuple[object, str, object]]:
    found = {}
    for name in TIMER_NAMES + SYNC_NAMES:
        where = _lookup(name)
        if where is not None and hasattr(*where):
            found[name] = (*where, getattr(*where))
    return found


def restore(snapshot: dict[str, tuple[object, str, object]]) -> list[str]:
    """Every watched function replaced since ``snapshot`` put back; the names of those that were
    replaced."""
    patched = [name for name, (owner, attribute, original) in snapshot.items() if getattr(owner, attribute) is not original]
    for name in patched:
        owner, attribute, original = snapshot[name]
        setattr(owner, attribute, original)
    return patched


class _L2:
    """The device's persisting-L2 set-aside (driver API): an answer that reserves it keeps its
    data in the cache across calls. Read after each call, and put back to the driver's default."""

    def __init__(self, cuda: bool):
        self.driver = ctypes.CDLL("libcuda.so.1") if cuda else None
        self.baseline = self.reserved_bytes()  # the driver's own default, before any answer ran

    def reserved_bytes(self) -> int:
        if self.driver is None:
            return 0
        value = ctypes.c_size_t(0)
        self.driver.cuCtxGetLimit(ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return value.value

    def changed(self) -> int:
        """The set-aside now where an answer changed it (put back, its lines evicted), else 0."""
        now = self.reserved_bytes()
        if now == self.baseline:
            return 0
        self.driver.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(self.baseline))
        self.driver.cuCtxResetPersistingL2Cache()
        return now

    def wait_for_callers_stream(self) -> None:
        """The legacy default stream, the caller's here, done (not the streams that do not wait for it)."""
        self.driver.cuStreamSynchronize(None)


def import_answer(path, module_name: str = "answer"):
    """The answer file at ``path``, imported as module ``module_name`` (its ``ModelNew`` not yet built)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Worker:
    """One answer, its shared buffers, and what it did; :func:`serve` hands it each message."""

    def __init__(self, path: str, buffers: dict[str, torch.Tensor]):
        global _cuda
        _cuda = _device(buffers["final"]).type == "cuda"
        self.buffers, self.kept, self.previous, self.y, self.earlier = buffers, [], None, None, None
        self.l2 = _L2(_cuda)
        self.watched = _snapshot()
        self.stream = _get_stream(_device(buffers["final"]).index) if _cuda else None
        self.model = None
        try:
            self.model = import_answer(path).ModelNew()  # imported, then built
        finally:
            self.report = self._findings()

    def _findings(self) -> dict:
        """Functions replaced and the L2 set-aside since the last report; each put back."""
        patched = restore(self.watched)
        l2 = self.l2.changed()
        self.watched.update({k: v for k, v in _snapshot().items() if k not in self.watched})  # modules imported since
        return {"timers": [n for n in patched if n in TIMER_NAMES], "syncs": [n for n in patched if n in SYNC_NAMES],
                "l2_bytes": l2}

    def _input(self, spec) -> torch.Tensor:
        base, size, stride, offset = spec
        return _as_strided(self.buffers[base], size, stride, offset)

    # region: call
    def call(self, spec, stream_check: bool = False) -> dict:
        """The answer on the input ``spec`` names, every tensor it allocates poisoned with NaN."""
        x = self._input(spec)
        with check.poisoned_outputs():
            self.y = self.model(x)
        return self.collect(x, stream_check)

    def collect(self, x: torch.Tensor, stream_check: bool, earlier: bool = False) -> dict:
        """What the call did, and its result copied into the judge's ``final`` buffer (``earlier``: the
        result of the call before the last of a back-to-back run, still held)."""
        y, reply = (self.earlier if earlier else self.y), self._findings()
        if _cuda:
            _set_stream(*self.stream)  # the caller's stream, whatever the answer left current
            if stream_check:  # once the caller's stream is done, is the device idle?
                self.l2.wait_for_callers_stream()
                gc.disable()
                start = _clock()
                _cuda_synchronize()
                reply["busy_ms"] = (_clock() - start) * 1e3
                gc.enable()
        if _type(y) is not _Tensor:  # a subclass can compute when read: after the clock stops
            reply["not_plain"] = f"{_type(y).__module__}.{_type(y).__qualname__}"
            return reply
        reply["meta"] = (tuple(_size(y)), str(_dtype(y)).removeprefix("torch."), str(_device(y)))
        if reply["meta"][0] != tuple(_size(x)) or _dtype(y) != _dtype(x) or _device(y) != _device(x):
            return reply
        reply["aliases"] = self._aliases(y, x)
        _synchronize_device()  # every stream: work the answer left anywhere is done
        _copy(_as_strided(self.buffers["final"], (_numel(y),), (1,), 0), _reshape(y, (-1,)))
        _synchronize_device()
        return reply
    # endregion

    def _aliases(self, y: torch.Tensor, x: torch.Tensor) -> str:
        """What y's memory is shared with: the input, an earlier output kept alive, or ''."""
        span = _span(y)
        if _overlaps(span, _span(x)):
            return "the input"
        earlier = self.kept + ([self.previous] if self.previous is not None else [])
        if any(_overlaps(span, _span(t)) for t in earlier):
            return "an earlier call's output (a cached result)"
        if _numel(y) < 2**20:
            self.kept.append(y)  # small outputs stay alive: memory of theirs reused is a cache
        else:
            self.previous = y
        return ""

    def timed(self, spec, calls: int) -> dict:
        """``calls`` calls back to back, then every stream idle; the judge's clock is around this."""
        x = self._input(spec)
        aliased = False
        for _ in range(calls):
            # The output two calls back is freed before each call, as a loop that holds one output frees it;
            # the one before the last is held all the same, so the judge checks it after the run.
            self.earlier = None
            y = self.model(x)
            aliased = aliased or (self.y is not None and _type(y) is _Tensor and _type(self.y) is _Tensor
                                  and _overlaps(_span(y), _span(self.y)))
            self.earlier, self.y = self.y, y
        _synchronize_device()
        return {"aliased": aliased}


def _span(t: torch.Tensor) -> tuple[int, int]:
    storage = _storage(t)
    start = _storage_ptr(storage)
    return start, start + _storage_bytes(storage)


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _error(error: BaseException) -> dict:
    """An exception as the judge reports it: its type, first line, and the traceback's last lines."""
    lines = str(error).strip().splitlines()
    tail = "".join(traceback.format_exception(error)[-3:]).strip()
    return {"error": f"{type(error).__name__}: {lines[0] if lines else ''}", "traceback": tail}


def serve(connection, path: str) -> None:
    """The worker's loop: the shared buffers first, then one reply per message until ("stop",) or
    the pipe closes."""
    worker = None
    try:
        worker = Worker(path, connection.recv())
        connection.send(worker.report)
    except BaseException as error:  # the answer failed to import or build: say so and stop
        connection.send({**_error(error), **(worker.report if worker else {})})
        return
    while True:
        try:
            message, *args = connection.recv()
        except EOFError:
            return
        if message == "stop":
            return
        try:
            if message == "call":
                reply = worker.call(*args)
            elif message == "timed":
                reply = worker.timed(*args)
            elif message == "collect":
                reply = worker.collect(worker._input(args[0]), stream_check=False, earlier=args[1:] == ["earlier"])
            elif message == "forget":  # ("forget", True): and give the memory back, for the next answer's turn
                worker.kept, worker.previous, worker.y, worker.earlier = [], None, None, None
                if _cuda and args and args[0]:
                    _empty_cache()
                reply = {}
            else:
                raise ValueError(f"the judge sent an unknown message: {message!r}")
        except BaseException as error:  # an answer may raise anything: report it
            worker.y = None
            reply = {**_error(error), **worker._findings()}
            _synchronize_device()
        connection.send(reply)


# The first use of poisoned outputs takes about a second (torch sets up its deterministic mode):
# paid here, once, in the server process that every answer's process is forked from.
with check.poisoned_outputs():
    torch.empty(1)
