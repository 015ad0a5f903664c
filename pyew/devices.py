"""The GPUs of this process: how many, each one's attributes, the current device, pyew.Device.

Each GPU is opened on its first use, so `import pyew` and `pyew.ops()` work without one; its
attributes are queried once and travel with its streams to every launch. Every CUDA call about
GPUs goes through `cuda` (a CudaDevices; the CPU tests swap in a stand-in).
"""
from __future__ import annotations

import contextlib
import operator
import threading
from dataclasses import dataclass

from . import cudart, occupancy
from .cudart import check
from .errors import NoDeviceError


@dataclass(frozen=True)
class DeviceProps:
    """What a launch needs to know about one GPU, queried once when it is first used."""
    ordinal: int
    name: str
    capability: tuple[int, int]
    sms: int
    threads_per_sm: int
    total_memory: int
    l2_bytes: int
    pool: object
    pci_bus_id: str = ""          # domain:bus:device.function, as nvidia-smi prints it
    launch_threads_per_sm: int = 0    # resident threads per SM the map launches use (0: threads_per_sm)

    def __post_init__(self):
        if self.launch_threads_per_sm <= 0:
            object.__setattr__(self, "launch_threads_per_sm", self.threads_per_sm)

    @property
    def dims(self) -> tuple[int, int]:
        """The launch arguments every entry point takes after the stream: (sms, threads_per_sm)."""
        return self.sms, self.launch_threads_per_sm


def _driver_hint(rt) -> str:
    """Where the runtime finds the driver too old: a driver there (version above 0) older than the
    CUDA of the installed cuda-python, not a machine without one."""
    try:
        driver = int(rt.cudaDriverGetVersion()[1])
        runtime = int(rt.cudaRuntimeGetVersion()[1])
    except Exception:
        return ""
    if not driver or driver >= runtime:
        return ""
    major = driver // 1000
    lowest = "12.6.1" if major == 12 else str(major)          # pyew needs cuda.bindings (12.6.1 on)
    return (f" The NVIDIA driver runs CUDA {major}.{driver % 1000 // 10}, older than the CUDA "
            f"{runtime // 1000}.{runtime % 1000 // 10} of the installed cuda-python: update the driver, or "
            f"install cuda-python {major} (pip install 'cuda-python>={lowest},<{major + 1}').")


class CudaDevices(cudart.Calls):
    """The CUDA runtime calls about GPUs."""

    def count(self) -> int:
        """The GPUs this process sees; NoDeviceError without any (or without cuda-python)."""
        if self.rt is None:
            raise NoDeviceError(cudart.NO_CUDA_PYTHON)
        err, n = self.rt.cudaGetDeviceCount()
        if int(err) != 0 or n == 0:
            name = cudart.error_name(err) if int(err) != 0 else "no CUDA devices"
            hint = _driver_hint(self.rt) if "InsufficientDriver" in name else ""
            raise NoDeviceError(f"no usable NVIDIA GPU ({name}): pyew needs a CUDA GPU and driver for this.{hint} "
                                "import pyew and pyew.ops() work without one.")
        return n

    def open(self, ordinal: int) -> DeviceProps:
        rt = self.rt
        p = check(rt.cudaGetDeviceProperties(ordinal), "cudaGetDeviceProperties")

        def attr(a):
            return check(rt.cudaDeviceGetAttribute(getattr(rt.cudaDeviceAttr, a), ordinal), "cudaDeviceGetAttribute")
        sms, tpsm = attr("cudaDevAttrMultiProcessorCount"), attr("cudaDevAttrMaxThreadsPerMultiProcessor")
        bus = attr("cudaDevAttrGlobalMemoryBusWidth")
        pool = check(rt.cudaDeviceGetDefaultMemPool(ordinal), "cudaDeviceGetDefaultMemPool")
        # Keep freed blocks in the pool instead of returning them to the driver at each sync.
        from cuda.bindings import driver
        check(rt.cudaMemPoolSetAttribute(pool, rt.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold,
                                         driver.cuuint64_t(0xFFFFFFFFFFFFFFFF)), "cudaMemPoolSetAttribute")
        name = p.name.split(b"\0", 1)[0].decode() if isinstance(p.name, bytes) else str(p.name)
        pci = f"{p.pciDomainID:08X}:{p.pciBusID:02X}:{p.pciDeviceID:02X}.0"
        cap = (p.major, p.minor)
        return DeviceProps(ordinal, name, cap, sms, tpsm, p.totalGlobalMem, p.l2CacheSize, pool, pci,
                           occupancy.resident_threads(cap, sms, bus, tpsm))

    def current(self) -> int:
        return int(check(self.rt.cudaGetDevice(), "cudaGetDevice"))

    def set_current(self, ordinal: int) -> None:
        check(self.rt.cudaSetDevice(ordinal), "cudaSetDevice")

    def synchronize(self) -> None:
        check(self.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes of the current GPU."""
        return check(self.rt.cudaMemGetInfo(), "cudaMemGetInfo")

    def can_access_peer(self, ordinal: int, other: int) -> bool:
        return bool(check(self.rt.cudaDeviceCanAccessPeer(ordinal, other), "cudaDeviceCanAccessPeer"))

    def pointer_device(self, ptr: int) -> int:
        rt = self.rt
        attrs = check(rt.cudaPointerGetAttributes(ptr), "cudaPointerGetAttributes")
        kinds = (rt.cudaMemoryType.cudaMemoryTypeDevice, rt.cudaMemoryType.cudaMemoryTypeManaged)
        return int(attrs.device) if attrs.type in kinds else -1


cuda = CudaDevices()


class Gpus:
    """What this process has learnt of its GPUs through `cuda`."""
    __slots__ = ("count", "several", "props")

    def __init__(self):
        self.count: int | None = None       # GPUs this process sees; None until the first GPU use
        self.several = False                # more than one: calls switch the current device and restore it
        self.props: dict[int, DeviceProps] = {}


gpus = Gpus()
_lock = threading.Lock()


def forget() -> None:
    """Forget what `cuda` told (tests swapping it); it is asked again on the next GPU use."""
    gpus.__init__()


def _counted() -> int:
    if gpus.count is None:
        with _lock:
            if gpus.count is None:
                n = cuda.count()
                gpus.several = n > 1
                gpus.count = n
    return gpus.count


def device_count() -> int:
    """The number of GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without a GPU,
    driver or cuda-python."""
    try:
        return _counted()
    except NoDeviceError:
        return 0


def several() -> bool:
    """True when this process sees more than one GPU (then calls pick and restore the device)."""
    if gpus.count is None:
        try:
            _counted()
        except NoDeviceError:      # said by whatever needs the GPU first
            return False
    return gpus.several


def only_one_gpu() -> bool:
    """True once the runtime has counted exactly one GPU (the op functions then replay plans
    themselves, without a device switch); False before the first GPU use, without a GPU, or with
    several."""
    return gpus.count == 1


def check_ordinal(ordinal: int) -> int:
    n = _counted()
    if not 0 <= ordinal < n:
        raise ValueError(f"no CUDA device {ordinal}: this process sees {n} GPU(s), 0..{n - 1} "
                         "(CUDA_VISIBLE_DEVICES decides which)")
    return ordinal


def props(ordinal: int) -> DeviceProps:
    """The attributes of GPU `ordinal`, queried on its first use."""
    p = gpus.props.get(ordinal)
    if p is not None:
        return p
    check_ordinal(ordinal)
    with _lock:
        p = gpus.props.get(ordinal)
        if p is None:
            p = gpus.props[ordinal] = cuda.open(ordinal)
    return p


def device() -> DeviceProps:
    """The current device's attributes; NoDeviceError if there is no GPU."""
    return props(current_ordinal())


# ---- the current device ----------------------------------------------------------------------
#
# The current device is the CUDA runtime's (per thread), as in CuPy: `with pyew.Device(1)` and
# `with cupy.cuda.Device(1)` both set it. A call runs on its operands' device:
# on a machine with several GPUs it makes that device current for the call and restores the
# caller's afterwards, so pyew never leaves another library's current device changed. With one
# GPU visible it never switches: `on` hands back a shared no-op.

class _PerThread(threading.local):
    active: int | None = None       # the device of the call in progress on this thread
    bound: int | None = None        # the device a worker thread of pyew's was bound to

    def __init__(self):
        self.entered: list[_Switch] = []    # the switches of the pyew.Device blocks this thread is in


_thread = _PerThread()


def current_ordinal() -> int:
    """The device a call without GPU operands runs on: the call's own inside a call, else the
    CUDA runtime's current device of this thread."""
    if not several():
        return 0
    a = _thread.active
    return a if a is not None else cuda.current()


class _Switch:
    """Make `ordinal` the current device for a block, then restore the caller's."""
    __slots__ = ("ordinal", "saved", "outer")

    def __init__(self, ordinal: int):
        self.ordinal = ordinal

    def __enter__(self):
        self.outer = _thread.active
        self.saved = cuda.current()
        if self.saved != self.ordinal:
            cuda.set_current(check_ordinal(self.ordinal))
        _thread.active = self.ordinal
        return self

    def __exit__(self, *exc):
        _thread.active = self.outer
        if self.saved != self.ordinal:
            cuda.set_current(self.saved)
        return False


_STAY = contextlib.nullcontext()


def on(ordinal: int):
    """`with on(i):` runs the block with GPU i current (a no-op with one GPU). NoDeviceError
    without a GPU, ValueError for a GPU this process does not see."""
    if not several():
        if ordinal != 0 or gpus.count is None:
            check_ordinal(ordinal)
        return _STAY
    return _Switch(ordinal)


def bind_thread(ordinal: int) -> None:
    """Make `ordinal` current on one of pyew's own worker threads (kept there, no restore)."""
    if gpus.several and _thread.bound != ordinal:
        cuda.set_current(ordinal)
        _thread.bound = ordinal


def pointer_device(ptr: int) -> int:
    """The GPU that device pointer `ptr` lives on (for CUDA Array Interface imports, which do
    not say); -1 for host memory. With one GPU, 0 without asking."""
    return cuda.pointer_device(ptr) if several() else 0


class Device:
    """A GPU of this process: `pyew.Device(1)`, or `pyew.Device()` for the current one.
    `with pyew.Device(1):` makes it current on this thread (calls without GPU operands and new
    arrays go there) and restores the previous one after the block."""
    __slots__ = ("id",)

    def __init__(self, device: "int | Device | None" = None):
        if device is None:
            ident = current_ordinal()
        elif isinstance(device, Device):
            ident = device.id
        else:
            try:
                ident = operator.index(device)
            except TypeError:
                raise TypeError(f"a device is an int ordinal or a pyew.Device, not {type(device).__name__}") \
                    from None
        self.id = check_ordinal(ident)

    def __enter__(self):
        _thread.entered.append(_Switch(self.id).__enter__())
        _thread.active = None           # calls without GPU operands go to the current device, this one
        return self

    def __exit__(self, *exc):
        return _thread.entered.pop().__exit__()

    def synchronize(self) -> None:
        """Wait for all work on this GPU."""
        with on(self.id):
            cuda.synchronize()

    def info(self) -> dict:
        """Name, compute capability, SMs, threads per SM, L2 and memory of this GPU."""
        return device_info(self.id)

    def can_access_peer(self, other: "int | Device") -> bool:
        """Whether the driver reports that this GPU can access `other`'s memory directly (peer access)."""
        j = Device(other).id
        return j == self.id or cuda.can_access_peer(self.id, j)

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("pyew.Device", self.id))

    def __index__(self):
        return self.id

    def __repr__(self):
        return f"<pyew.Device {self.id}>"


def device_info(ordinal: int | None = None) -> dict:
    """Name, compute capability, SM count, threads per SM (the hardware's maximum, and how many
    pyew's elementwise launches keep resident), L2, memory and PCI bus id of a GPU (the current one
    by default)."""
    d = props(current_ordinal() if ordinal is None else ordinal)
    with on(d.ordinal):
        free, total = cuda.memory()
    return {"ordinal": d.ordinal, "name": d.name, "capability": d.capability, "sms": d.sms,
            "threads_per_sm": d.threads_per_sm, "launch_threads_per_sm": d.launch_threads_per_sm,
            "l2_bytes": d.l2_bytes, "total_memory": total, "free_memory": free, "pci_bus_id": d.pci_bus_id}


def synchronize() -> None:
    """Wait for all work on the current device."""
    with on(current_ordinal()):
        cuda.synchronize()
