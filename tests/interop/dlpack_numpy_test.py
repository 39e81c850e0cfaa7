"""NumPy and gpubatch through DLPack, both ways, host memory.

NumPy's arrays go to gpubatch as DLManagedTensors (their __dlpack__ capsules, consumed as the
protocol says); gpubatch computes on views of their memory and hands its results back as
tensors it exported, which numpy.from_dlpack takes without a copy. Checked: values against
NumPy in float64 on random inputs, writes through a view landing in the NumPy array, strided
and transposed arrays, refused dtypes and layouts raising with gpubatch's message, every
consumed input released, and every exported tensor freed once NumPy lets go of it.

Usage: python3 dlpack_numpy_test.py <path of the dlpack_numpy_module shared library>
"""

import ctypes
import gc
import sys

import numpy as np

lib = ctypes.CDLL(sys.argv[1])
P = ctypes.c_void_p
lib.gpubatch_dlpack_gemm.argtypes = [P, P, ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_size_t]
lib.gpubatch_dlpack_scale.argtypes = [P, ctypes.c_double, ctypes.c_char_p, ctypes.c_size_t]
lib.gpubatch_dlpack_device_type.argtypes = [P]
lib.gpubatch_dlpack_delete.argtypes = [P]
lib.gpubatch_dlpack_delete.restype = None
lib.gpubatch_dlpack_data.argtypes = [P]
lib.gpubatch_dlpack_data.restype = P

# The capsule API, through ctypes. Names given to capsules must outlive them: module globals.
USED = ctypes.c_char_p(b"used_dltensor")
NAME = ctypes.c_char_p(b"dltensor")
api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = P
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [P, ctypes.c_char_p, P]
# The destructor gets the dying capsule as a raw pointer: taking a new reference to it would
# resurrect it. These prototypes take it as one.
raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, P, ctypes.c_char_p)(("PyCapsule_IsValid", api))
raw_get_pointer = ctypes.PYFUNCTYPE(P, P, ctypes.c_char_p)(("PyCapsule_GetPointer", api))


@ctypes.CFUNCTYPE(None, P)
def capsule_destructor(capsule):
    # Still named "dltensor": no consumer took it, so its tensor is ours to delete.
    if raw_is_valid(capsule, NAME):
        lib.gpubatch_dlpack_delete(raw_get_pointer(capsule, NAME))


def take(array):
    """NumPy's DLManagedTensor for `array`; the capsule is marked used, as a consumer does."""
    capsule = array.__dlpack__()
    pointer = api.PyCapsule_GetPointer(capsule, NAME)
    api.PyCapsule_SetName(capsule, USED)
    return pointer


class Exported:
    """A tensor gpubatch exported, which numpy.from_dlpack consumes (once)."""

    def __init__(self, pointer):
        self._device = (lib.gpubatch_dlpack_device_type(pointer), 0)
        self._capsule = api.PyCapsule_New(
            pointer, NAME, ctypes.cast(capsule_destructor, P).value)

    def __dlpack__(self, stream=None, **kwargs):
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("this tensor was already consumed")
        return capsule

    def __dlpack_device__(self):
        return self._device


class GpubatchError(Exception):
    pass


def call(function, *args):
    message = ctypes.create_string_buffer(1024)
    if function(*args, message, len(message)) != 0:
        raise GpubatchError(message.value.decode())


def gemm(a, b):
    out = P()
    call(lib.gpubatch_dlpack_gemm, take(a), take(b), ctypes.byref(out))
    return np.from_dlpack(Exported(out.value))


def scale(x, alpha):
    call(lib.gpubatch_dlpack_scale, take(x), alpha)


rng = np.random.default_rng(20261124)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED:", what)


def check_close(got, expected, rtol, what):
    if got.shape != expected.shape:
        check(False, f"{what}: shape {got.shape}, expected {expected.shape}")
        return
    error = np.max(np.abs(got - expected), initial=0.0)
    check(np.allclose(got, expected, rtol=rtol, atol=rtol), f"{what}: max error {error}")


def test_gemm_values():
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        for shape_a, shape_b in (((5, 7), (7, 6)), ((3, 4, 9), (3, 9, 2)), ((1, 1), (1, 1)),
                                 ((2, 17, 33), (2, 33, 16))):
            a = rng.standard_normal(shape_a).astype(dtype)
            b = rng.standard_normal(shape_b).astype(dtype)
            c = gemm(a, b)
            check(c.dtype == dtype, f"gemm result dtype {c.dtype} for {dtype}")
            check_close(c, a.astype(np.float64) @ b.astype(np.float64), rtol,
                        f"gemm {np.dtype(dtype).name} {shape_a} x {shape_b}")


def test_strided_and_transposed():
    m, n, k = 6, 5, 8
    b_stored = rng.standard_normal((3, n, k))
    b = b_stored.transpose(0, 2, 1)  # column-major matrices of the same memory
    a_padded = rng.standard_normal((3, m, k + 3))[:, :, :k]  # row-major, leading dimension k + 3
    check_close(gemm(a_padded, b), a_padded @ b, 1e-12, "padded A times transposed B")
    a_fortran = np.asfortranarray(rng.standard_normal((m, k)))
    b_every_other = rng.standard_normal((2 * k, n))[::2]  # row stride 2n: a padded row-major view
    check_close(gemm(a_fortran, b_every_other), a_fortran @ b_every_other, 1e-12,
                "Fortran-order A times every other row of B")


def test_zero_copy():
    x = rng.standard_normal((4, 5))
    before = x.copy()
    scale(x, 2.5)
    check(np.array_equal(x, 2.5 * before), "a write through gpubatch's view lands in the array")
    scale(x.T, -1.0)  # the transposed array: a column-major view of the same memory
    check(np.array_equal(x, -2.5 * before), "a write through a transposed view")
    batch = rng.standard_normal((3, 6, 7)).astype(np.float32)
    original = batch.copy()
    scale(batch[:, 1:5, 2:6], 4.0)  # a window: padded leading dimension and batch stride
    expected = original.copy()
    expected[:, 1:5, 2:6] *= 4.0
    check(np.array_equal(batch, expected), "a write through a strided window, and nothing else")
    # The result NumPy gets is the memory gpubatch exported, not a copy of it.
    out = P()
    call(lib.gpubatch_dlpack_gemm, take(np.eye(3)), take(np.arange(9.0).reshape(3, 3)),
         ctypes.byref(out))
    exported_at = lib.gpubatch_dlpack_data(out.value)
    c = np.from_dlpack(Exported(out.value))
    check(c.__array_interface__["data"][0] == exported_at, "NumPy reads gpubatch's memory in place")
    check(np.array_equal(c, np.arange(9.0).reshape(3, 3)), "identity times B is B")


def test_refused():
    a = rng.standard_normal((4, 6))
    cases = (
        (a.astype(np.int16), a.T.copy(), "tensor.dtype", "int16"),
        (a.astype(np.complex64), a.T.copy(), "tensor.dtype", "complex64"),
        (a[:, ::2], a.T[::2].copy(), "tensor.strides", "neither row-major"),
        (a[::-1], a.T.copy(), "tensor.strides", "negative"),
        (a[0], a.T.copy(), "tensor.ndim", "1 dimensions"),
        (rng.standard_normal((2, 2, 2, 2)), a.T.copy(), "tensor.ndim", "4 dimensions"),
        (a, a.copy(), "'b'", "inner dimensions differ"),  # imported; gemm refuses the shapes
    )
    for first, second, field, words in cases:
        references = sys.getrefcount(first)
        try:
            gemm(first, second)
            check(False, f"{field} ({words}): no error")
        except GpubatchError as e:
            check(field in str(e) and words in str(e), f"{field} ({words}): message {e}")
        # The library released NumPy's tensor: it no longer holds a reference to the array.
        check(sys.getrefcount(first) == references, f"{field} ({words}): input released")


def test_exports_freed():
    gc.collect()
    check(lib.gpubatch_dlpack_live_exports() == 0, "no export alive at the start")
    results = [gemm(rng.standard_normal((3, 3)), rng.standard_normal((3, 3))) for _ in range(4)]
    check(lib.gpubatch_dlpack_live_exports() == 4, "four exports alive while NumPy holds them")
    view = results[0][1:, :]  # a NumPy view keeps the exported memory alive
    del results
    gc.collect()
    check(lib.gpubatch_dlpack_live_exports() == 1, "the export a view still uses stays alive")
    check(np.isfinite(view).all(), "the surviving view still reads gpubatch's memory")
    del view
    gc.collect()
    check(lib.gpubatch_dlpack_live_exports() == 0, "every export freed once NumPy lets go")
    # A tensor no consumer takes is freed by its capsule.
    out = P()
    call(lib.gpubatch_dlpack_gemm, take(np.eye(2)), take(np.eye(2)), ctypes.byref(out))
    unconsumed = Exported(out.value)
    check(lib.gpubatch_dlpack_live_exports() == 1, "an unconsumed export is alive")
    del unconsumed
    gc.collect()
    check(lib.gpubatch_dlpack_live_exports() == 0, "an unconsumed export is freed with its capsule")


def main():
    print("NumPy", np.__version__)
    for test in (test_gemm_values, test_strided_and_transposed, test_zero_copy, test_refused,
                 test_exports_freed):
        test()
        print("ran", test.__name__)
    if failures:
        print(len(failures), "check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
