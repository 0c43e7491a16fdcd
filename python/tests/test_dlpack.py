"""The DLPack protocol of a batch's fields, for any consumer."""

import gc
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.utils.dlpack

import gpufeed
from conftest import SCRIPTS, script_env
from gpufeed import _gpufeed


def _handle(loader):
    return loader._impl.next()


def test_a_field_is_a_dlpack_producer_torch_imports():
    loader = gpufeed.Loader(gpufeed.synthetic("mel:float32[2,3],label:int64[]", samples=10),
                            batch_size=4, shuffle=False, device="cpu")
    handle = _handle(loader)
    field = handle.field("mel")
    assert field.__dlpack_device__() == (1, 0)
    assert field.shape == (4, 2, 3) and field.dtype == "float32" and field.name == "mel"
    tensor = torch.from_dlpack(field)
    assert tensor.shape == (4, 2, 3) and tensor.is_contiguous()
    again = torch.utils.dlpack.from_dlpack(handle.field(1).__dlpack__())
    assert again.dtype == torch.int64 and again.shape == (4,)
    with pytest.raises(gpufeed.NotFound, match="nope"):
        handle.field("nope")
    with pytest.raises(gpufeed.NotFound, match="out of range"):
        handle.field(5)


def test_capsules_own_the_batch_until_consumed_or_dropped():
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[2]", samples=10), batch_size=4,
                            device="cpu")
    handle = _handle(loader)
    capsules = handle.capsules()
    assert "dltensor" in repr(capsules[0])
    del handle
    gc.collect()
    assert loader.stats()["held_batches"] == 1  # the capsule holds it
    tensor = torch.utils.dlpack.from_dlpack(capsules[0])
    del capsules
    assert loader.stats()["held_batches"] == 1  # now the tensor does
    del tensor
    assert loader.stats()["held_batches"] == 0


def test_array_api_keywords():
    loader = gpufeed.Loader(gpufeed.synthetic("x:float32[2]", samples=10), batch_size=4,
                            device="cpu")
    field = _handle(loader).field("x")
    field.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError, match="copy=True"):
        field.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="device"):
        field.__dlpack__(dl_device=(2, 0))


def test_bool_and_half_fields_arrive_with_their_dtypes():
    loader = gpufeed.Loader(gpufeed.synthetic("m:bool[3],h:float16[2],b:bfloat16[],u:uint8[]",
                                              samples=10), batch_size=5, device="cpu")
    batch = next(iter(loader))
    assert batch["m"].dtype == torch.bool and batch["m"].shape == (5, 3)
    assert batch["h"].dtype == torch.float16
    assert batch["b"].dtype == torch.bfloat16
    assert batch["u"].dtype == torch.uint8


@pytest.mark.skipif(hasattr(torch, "uint32"), reason="this torch has uint32")
def test_a_dtype_torch_lacks_is_refused_up_front():
    with pytest.raises(gpufeed.Unsupported, match="'u' is uint32"):
        gpufeed.Loader(gpufeed.synthetic("u:uint32[]", samples=10), batch_size=5, device="cpu")


def _fake_libcuda():
    build = os.environ.get("GPUFEED_BUILD_DIR") or str(pathlib.Path(_gpufeed.__file__).parents[2])
    path = pathlib.Path(build) / "tests" / "device" / "fake_cuda" / "libcuda.so.1"
    return path if path.exists() else None


@pytest.mark.skipif(_fake_libcuda() is None, reason="the fake libcuda.so.1 is not built")
def test_cuda_batches_order_the_consumer_stream_after_their_copy():
    env = script_env()
    env["GPUFEED_CUDA_LIBRARY"] = str(_fake_libcuda())
    env.pop("LOCAL_RANK", None)
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "cuda_fake.py"),
                           str(_fake_libcuda())], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


@pytest.mark.skipif(_fake_libcuda() is None, reason="the fake libcuda.so.1 is not built")
def test_events_on_the_dlpack_consumer_stream_measure_the_gpu_busy_share():
    env = script_env()
    env["GPUFEED_CUDA_LIBRARY"] = str(_fake_libcuda())
    env.pop("LOCAL_RANK", None)
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "cuda_gpu_busy.py"),
                           str(_fake_libcuda())], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


def test_cuda_loader_needs_a_torch_with_cuda():
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    env = script_env()
    if _fake_libcuda() is None:
        pytest.skip("the fake libcuda.so.1 is not built")
    env["GPUFEED_CUDA_LIBRARY"] = str(_fake_libcuda())
    code = ("import ctypes, os, gpufeed\n"
            "try:\n"
            "    gpufeed.Loader(gpufeed.synthetic('x:float32[]', 8), batch_size=4, device='cuda')\n"
            "except gpufeed.DeviceError as e:\n"
            "    print(e)\n"
            "ctypes.CDLL(os.environ['GPUFEED_CUDA_LIBRARY']).fake_cuda_reset()\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert "torch" in proc.stdout and "CUDA" in proc.stdout, proc.stdout + proc.stderr
